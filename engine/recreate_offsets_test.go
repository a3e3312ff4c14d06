package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// A topic created again after its metadata was lost (it never went
// through DeleteTopic) does not inherit the old topic's group offsets,
// also after a restart.
func TestRecreatedTopicDropsGroupOffsets(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	_, _ = e.Append(context.Background(), "t", 0, mkBatch(t, "a", "b"))
	if _, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", Offset: 2}}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	// The metadata is lost and the operator moved the data directory away.
	os.Remove(filepath.Join(opts.DataDir, "meta", "topics", "t.json"))
	os.RemoveAll(filepath.Join(opts.DataDir, "topics", "t"))
	e2 := openTest(t, opts)
	if _, err := e2.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e2.FetchOffsets("g", "t"); len(got) != 0 {
		t.Fatalf("recreated topic inherits offsets %+v", got)
	}
	e2.Close()
	e3 := openTest(t, opts)
	defer e3.Close()
	if got, _ := e3.FetchOffsets("g", "t"); len(got) != 0 {
		t.Fatalf("after restart the recreated topic has offsets %+v", got)
	}
}
