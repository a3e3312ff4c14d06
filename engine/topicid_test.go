package engine

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// readMetaID returns the id stored in the topic's metadata file.
func readMetaID(t *testing.T, dir, name string) api.TopicID {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "meta", "topics", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var m topicMeta
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m.ID
}

// Every topic gets its own id at creation; describe, list and the
// metadata file carry it, and a restart keeps it.
func TestTopicIDCreatedAndKept(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	ids := map[api.TopicID]string{}
	for _, name := range []string{"a", "b", strings.Repeat("x", 249)} {
		ti, err := e.CreateTopic(name, 2, TopicConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if ti.ID.IsZero() || ids[ti.ID] != "" {
			t.Fatalf("topic %s: id %v zero or shared with %q", name, ti.ID, ids[ti.ID])
		}
		ids[ti.ID] = name
		if got := readMetaID(t, opts.DataDir, name); got != ti.ID {
			t.Fatalf("metadata file of %s holds id %v, want %v", name, got, ti.ID)
		}
	}
	// Changing the config keeps the id.
	ms := int64(60000)
	if ti, err := e.AlterTopicConfig("a", TopicConfigChange{RetentionMs: &ms}); err != nil || ids[ti.ID] != "a" {
		t.Fatalf("AlterTopicConfig: id %v, %v", ti.ID, err)
	}
	e.Close()
	e2 := openTest(t, opts)
	for _, ti := range e2.ListTopics() {
		if ids[ti.ID] != ti.Name {
			t.Errorf("after restart ListTopics: %s has id %v, want the id it was created with", ti.Name, ti.ID)
		}
		d, err := e2.DescribeTopic(ti.Name)
		if err != nil || d.ID != ti.ID {
			t.Errorf("DescribeTopic(%s) id %v, %v; ListTopics says %v", ti.Name, d.ID, err, ti.ID)
		}
	}
}

// A metadata file written before topic ids existed gets an id at the
// first start, persisted, so every later start sees the same id; the
// group offsets committed before are kept and take that id.
func TestTopicIDAssignedToOldMetadata(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	for _, name := range []string{"old1", "old2"} {
		if _, err := e.CreateTopic(name, 1, TopicConfig{}); err != nil {
			t.Fatal(err)
		}
		_, _ = e.Append(context.Background(), name, 0, mkBatch(t, "a", "b", "c"))
	}
	if _, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "old1", Offset: 2}, {Topic: "old2", Offset: 3}}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	// Rewrite both metadata files and the offsets log as an older
	// version wrote them: without any id.
	for _, name := range []string{"old1", "old2"} {
		path := filepath.Join(opts.DataDir, "meta", "topics", name+".json")
		data, _ := os.ReadFile(path)
		var raw map[string]any
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatal(err)
		}
		delete(raw, "id")
		data, _ = json.Marshal(raw)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rec, _ := encodeRecord(offsetRecord{Group: "g", Offsets: []offsetEntry{{Topic: "old1", Offset: 2}, {Topic: "old2", Offset: 3}}})
	if err := os.WriteFile(filepath.Join(opts.DataDir, "groups", offsetsFile), rec, 0o644); err != nil {
		t.Fatal(err)
	}
	e2 := openTest(t, opts)
	first := map[string]api.TopicID{}
	for _, name := range []string{"old1", "old2"} {
		ti, err := e2.DescribeTopic(name)
		if err != nil || ti.ID.IsZero() {
			t.Fatalf("DescribeTopic(%s) after upgrade: id %v, %v", name, ti.ID, err)
		}
		if got := readMetaID(t, opts.DataDir, name); got != ti.ID {
			t.Fatalf("assigned id %v of %s not persisted (file has %v)", ti.ID, name, got)
		}
		first[name] = ti.ID
		got, _ := e2.FetchOffsets("g", name)
		if len(got) != 1 || got[0].TopicID != ti.ID {
			t.Fatalf("offsets of %s after upgrade %+v, want one with id %v", name, got, ti.ID)
		}
	}
	if first["old1"] == first["old2"] {
		t.Fatal("two topics got the same id")
	}
	// A commit with the assigned id works.
	if res, err := e2.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "old1", TopicID: first["old1"], Offset: 3}}); err != nil || res[0].Err != nil {
		t.Fatalf("commit with the assigned id: %v %+v", err, res)
	}
	e2.Close()
	e3 := openTest(t, opts)
	for name, id := range first {
		if ti, _ := e3.DescribeTopic(name); ti.ID != id {
			t.Errorf("second restart: %s has id %v, want %v", name, ti.ID, id)
		}
	}
	if got, _ := e3.FetchOffsets("g", "old1"); len(got) != 1 || got[0].Offset != 3 || got[0].TopicID != first["old1"] {
		t.Errorf("offsets after second restart %+v", got)
	}
}

// recreate deletes topic name and creates it again, returning the old and
// the new id.
func recreate(t *testing.T, e *Engine, name string, partitions int) (old, cur api.TopicID) {
	t.Helper()
	ti, err := e.DescribeTopic(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteTopic(name); err != nil {
		t.Fatal(err)
	}
	nt, err := e.CreateTopic(name, partitions, TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if nt.ID == ti.ID {
		t.Fatalf("recreated topic %s kept id %v", name, ti.ID)
	}
	return ti.ID, nt.ID
}

// Fetches and commits that carry the id of a deleted topic fail with
// UNKNOWN_TOPIC_ID (not retriable), whether the name was created again or
// not; the current id and no id (by name) work.
func TestTopicIDStaleRequests(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	ctx := context.Background()
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		_, _ = e.Append(ctx, "t", 0, mkBatch(t, "old"))
	}
	if _, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", Offset: 10}}); err != nil {
		t.Fatal(err)
	}
	old, cur := recreate(t, e, "t", 3)
	_, _ = e.Append(ctx, "t", 0, mkBatch(t, "new1", "new2"))

	for _, p := range []int{0, 1, 2} {
		if _, err := e.FetchID(ctx, "t", old, p, 0, 1<<20, 0); codeOf(err) != api.CodeUnknownTopicID || api.IsRetriable(err) {
			t.Errorf("fetch of %d with the old id: %v, want UNKNOWN_TOPIC_ID, not retriable", p, err)
		}
	}
	r, err := e.FetchID(ctx, "t", cur, 0, 0, 1<<20, 0)
	if err != nil || r.TopicID != cur || len(r.Bufs) == 0 {
		t.Fatalf("fetch with the current id: %v, result id %v", err, r.TopicID)
	}
	r.Release()
	if r, err := e.Fetch(ctx, "t", 0, 0, 1<<20, 0); err != nil || r.TopicID != cur {
		t.Fatalf("fetch by name: %v", err)
	} else {
		r.Release()
	}
	// The recreated topic starts with no committed offsets.
	if got, _ := e.FetchOffsets("g", "t"); len(got) != 0 {
		t.Fatalf("recreated topic has offsets %+v", got)
	}
	res, err := e.CommitOffsets("g", "", -1, []OffsetCommit{
		{Topic: "t", TopicID: old, Partition: 0, Offset: 1},
		{Topic: "t", TopicID: cur, Partition: 1, Offset: 0},
		{Topic: "t", Partition: 0, Offset: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	if codeOf(res[0].Err) != api.CodeUnknownTopicID || res[1].Err != nil || res[2].Err != nil {
		t.Fatalf("commit results %+v: want UNKNOWN_TOPIC_ID, ok, ok", res)
	}
	if res[2].TopicID != cur {
		t.Errorf("commit by name stored id %v, want %v", res[2].TopicID, cur)
	}
	got, _ := e.FetchOffsets("g", "t")
	if len(got) != 2 || got[0].Offset != 2 || got[0].TopicID != cur || got[1].Partition != 1 || got[1].TopicID != cur {
		t.Fatalf("offsets %+v, want partition 0 at 2 and 1 at 0, both with the new id", got)
	}
	// An id of a topic that no longer exists at all.
	if err := e.DeleteTopic("t"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.FetchID(ctx, "t", cur, 0, 0, 1<<20, 0); codeOf(err) != api.CodeUnknownTopicID {
		t.Errorf("fetch with the id of a deleted topic: %v", err)
	}
	if res, _ := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", TopicID: cur, Offset: 0}}); codeOf(res[0].Err) != api.CodeUnknownTopicID {
		t.Errorf("commit with the id of a deleted topic: %+v", res)
	}
	if _, err := e.Fetch(ctx, "t", 0, 0, 1<<20, 0); codeOf(err) != api.CodeUnknownTopic {
		t.Errorf("fetch by name of a deleted topic: %v, want UNKNOWN_TOPIC", err)
	}
}

// A topic created again with fewer partitions: a fetch or commit with the
// old id of a partition the new topic lacks is UNKNOWN_TOPIC_ID (start
// over), never UNKNOWN_PARTITION, which a consumer takes as permanent; the
// id is checked before the partition number. Without an id it is
// UNKNOWN_PARTITION.
func TestTopicIDCheckedBeforePartition(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	ctx := context.Background()
	if _, err := e.CreateTopic("t", 4, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	old, cur := recreate(t, e, "t", 1)
	for _, p := range []int{1, 3, 7} {
		if _, err := e.FetchID(ctx, "t", old, p, 0, 1<<20, 0); codeOf(err) != api.CodeUnknownTopicID {
			t.Errorf("fetch of partition %d with the old id: %v, want UNKNOWN_TOPIC_ID", p, err)
		}
		res, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", TopicID: old, Partition: p, Offset: 0}})
		if err != nil || codeOf(res[0].Err) != api.CodeUnknownTopicID {
			t.Errorf("commit of partition %d with the old id: %v %+v, want UNKNOWN_TOPIC_ID", p, err, res)
		}
		if _, err := e.FetchID(ctx, "t", cur, p, 0, 1<<20, 0); codeOf(err) != api.CodeUnknownPartition {
			t.Errorf("fetch of partition %d with the current id: %v, want UNKNOWN_PARTITION", p, err)
		}
		if _, err := e.Fetch(ctx, "t", p, 0, 1<<20, 0); codeOf(err) != api.CodeUnknownPartition {
			t.Errorf("fetch of partition %d by name: %v, want UNKNOWN_PARTITION", p, err)
		}
	}
}

// A commit checked against a topic that is deleted and created again
// before it is written is not stored: it would otherwise become the new
// topic's committed offset.
func TestTopicIDCommitRacesRecreate(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	_, _ = e.Append(context.Background(), "t", 0, mkBatch(t, "a", "b"))
	old, cur := recreate(t, e, "t", 1)
	// The write half of a commit whose check passed against the old topic.
	stale, err := e.offsets.commitIDs(offsetRecord{Group: "g", Generation: -1, Offsets: []offsetEntry{
		{Topic: "t", Offset: 2, ID: old},
	}})
	if err != nil || !stale[topicRef{"t", old}] {
		t.Fatalf("commitIDs = %v, %v; want t reported stale", stale, err)
	}
	if got, _ := e.FetchOffsets("g", "t"); len(got) != 0 {
		t.Fatalf("a commit for the old topic became the new topic's offset: %+v", got)
	}
	if stale, err := e.offsets.commitIDs(offsetRecord{Group: "g", Offsets: []offsetEntry{{Topic: "t", Offset: 0, ID: cur}}}); err != nil || len(stale) != 0 {
		t.Fatalf("commitIDs with the current id = %v, %v", stale, err)
	}
}

// After a recreate, DescribeGroup shows the new topic's id and no
// committed offset; ResetOffsets stores the current id; a restart drops an
// offset stored with an id that is not its topic's (a crash between the
// delete and the drop of its offsets).
func TestTopicIDGroupState(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	_, _ = e.Append(context.Background(), "t", 0, mkBatch(t, "a", "b", "c"))
	if _, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", Offset: 3}}); err != nil {
		t.Fatal(err)
	}
	_, cur := recreate(t, e, "t", 1)
	_, _ = e.Append(context.Background(), "t", 0, mkBatch(t, "x"))
	if _, err := e.CommitOffsets("h", "", -1, []OffsetCommit{{Topic: "t", Offset: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.DescribeGroup("g"); codeOf(err) != api.CodeUnknownGroup {
		t.Fatalf("group g only had offsets of the deleted topic: DescribeGroup = %v, want UNKNOWN_GROUP", err)
	}
	d, err := e.DescribeGroup("h")
	if err != nil || len(d.Offsets) != 1 || d.Offsets[0].TopicID != cur || d.Offsets[0].CommittedOffset != 1 {
		t.Fatalf("DescribeGroup(h) = %+v, %v", d, err)
	}
	out, err := e.ResetOffsets("g", "t", ResetEarliest, 0)
	if err != nil || len(out) != 1 || out[0].TopicID != cur {
		t.Fatalf("ResetOffsets = %+v, %v", out, err)
	}
	// Plant an offset of an older topic "t" in the log, as a crash
	// between DeleteTopic's commit point and the drop of its offsets
	// would leave it.
	e.offsets.mu.Lock()
	err = e.offsets.commitLocked(offsetRecord{Group: "stale", Offsets: []offsetEntry{{Topic: "t", Offset: 1, ID: api.NewTopicID()}}})
	e.offsets.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := e.FetchOffsets("stale", "t"); len(got) != 1 {
		t.Fatalf("planted offset missing: %+v", got)
	}
	e.Close()
	e2 := openTest(t, opts)
	if got, _ := e2.FetchOffsets("stale", "t"); len(got) != 0 {
		t.Fatalf("offset of an older topic survived the restart: %+v", got)
	}
	if got, _ := e2.FetchOffsets("h", "t"); len(got) != 1 || got[0].TopicID != cur {
		t.Fatalf("offsets of h after restart %+v", got)
	}
}

// A long poll woken by the deletion of its topic gets UNKNOWN_TOPIC_ID
// when it named the topic by id, UNKNOWN_TOPIC when by name.
func TestTopicIDLongPollDeleted(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	for _, byID := range []bool{true, false} {
		ti, err := e.CreateTopic("t", 1, TopicConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var id api.TopicID
		want := api.CodeUnknownTopic
		if byID {
			id, want = ti.ID, api.CodeUnknownTopicID
		}
		done := make(chan error, 1)
		go func() {
			r, err := e.FetchID(context.Background(), "t", id, 0, 0, 1<<20, 20*time.Second)
			if r != nil {
				r.Release()
			}
			done <- err
		}()
		// Wait until the fetch is parked in its long poll.
		deadline := time.Now().Add(10 * time.Second)
		for e.InFlight() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("fetch never started")
			}
			time.Sleep(time.Millisecond)
		}
		if err := e.DeleteTopic("t"); err != nil {
			t.Fatal(err)
		}
		if err := <-done; codeOf(err) != want {
			t.Fatalf("byID=%v: long poll woken by the delete: %v, want %v", byID, err, want)
		}
	}
}
