package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestLostMetadataKeepsData: a topic whose metadata file is lost or
// damaged is not served, its data stays on disk, the other topics keep
// serving, and creating the name again is refused instead of wiping the
// records.
func TestLostMetadataKeepsData(t *testing.T) {
	for _, damage := range []string{"deleted", "truncated", "garbage"} {
		t.Run(damage, func(t *testing.T) {
			opts := testOptions(t.TempDir())
			e := openTest(t, opts)
			for _, name := range []string{"lost", "fine"} {
				if _, err := e.CreateTopic(name, 1, TopicConfig{}); err != nil {
					t.Fatal(err)
				}
				if _, err := e.Append(context.Background(), name, 0, mkBatch(t, "a", "b")); err != nil {
					t.Fatal(err)
				}
			}
			e.Close()
			meta := filepath.Join(opts.DataDir, "meta", "topics", "lost.json")
			switch damage {
			case "deleted":
				os.Remove(meta)
			case "truncated":
				_ = os.Truncate(meta, 7)
			case "garbage":
				_ = os.WriteFile(meta, []byte("\x00\x01not json"), 0o644)
			}
			e2 := openTest(t, opts)
			if got := readAll(t, e2, "fine", 0); len(got) != 2 {
				t.Fatalf("healthy topic: %q", got)
			}
			if _, err := e2.DescribeTopic("lost"); codeOf(err) != api.CodeUnknownTopic {
				t.Fatalf("describe of the topic without metadata: %v", err)
			}
			if _, err := e2.CreateTopic("lost", 1, TopicConfig{}); codeOf(err) != api.CodeTopicExists {
				t.Fatalf("create over a directory holding data: %v, want TOPIC_EXISTS", err)
			}
			seg := filepath.Join(opts.DataDir, "topics", "lost", "0", "00000000000000000000.log")
			if st, err := os.Stat(seg); err != nil || st.Size() == 0 {
				t.Fatalf("the data of the topic was touched: %v", err)
			}
		})
	}
}
