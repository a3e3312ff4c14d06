package engine

// Replicas' scrubs and repairs, truncation at the log end, a follower
// below its leader's log start, and offsets on a restarted replica
// (replicated_test.go has the replica harness).

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine/replica"
	"github.com/seedqueue/sq/internal/testutil"
)

// TestScrubRepairsFollower: a bit flipped in a follower's sealed segment
// is found by the periodic scrub; the follower is Corrupt (not eligible
// as leader), cuts its log below the damaged segment, fetches it again
// and is repaired, its log byte for byte the leader's.
func TestScrubRepairsFollower(t *testing.T) {
	clock := newClock()
	nodes := map[string]*replNode{}
	for _, id := range []string{"a", "b"} {
		n := &replNode{id: id, dir: t.TempDir()}
		n.opts = testOptions(n.dir)
		n.opts.Replication = &ReplicationOptions{NodeID: id}
		n.opts.Now = clock.Now
		n.opts.RetentionCheckInterval = -1
		n.opts.ScrubBytesPerSec = 1 << 40
		n.opts.ScrubInterval = 10 * time.Millisecond
		n.e = openTest(t, n.opts)
		if _, err := n.e.CreateTopicSpec(TopicSpec{Name: replTopic, ID: replTopicID, Partitions: 1, Config: TopicConfig{SegmentBytes: 4096}}); err != nil {
			t.Fatal(err)
		}
		nodes[id] = n
	}
	a, b := nodes["a"], nodes["b"]
	if err := a.e.BecomeLeader(replTopic, replTopicID, 0, 1, []string{"a", "b"}, []string{"a", "b"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.e.BecomeFollower(replTopic, replTopicID, 0, 1, "a"); err != nil {
		t.Fatal(err)
	}
	value := string(bytes.Repeat([]byte{'v'}, 900))
	for range 12 {
		await(t, appendAsync(t, a, AcksLeader, value))
	}
	for pump(t, a, b, 1) > 0 {
	}
	pump(t, a, b, 1)
	if st := b.state(t); st.LogEndOffset != 12 || st.HighWatermark != 12 || st.Corrupt {
		t.Fatalf("follower state %+v before the damage", st)
	}
	// Flip a bit in a record of b's first (sealed) segment.
	f, err := os.OpenFile(filepath.Join(b.dir, "topics", replTopic, "0", "00000000000000000000.log"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var one [1]byte
	if _, err := f.ReadAt(one[:], 500); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0x10
	if _, err := f.WriteAt(one[:], 500); err != nil {
		t.Fatal(err)
	}
	f.Close()
	testutil.Eventually(t, 10*time.Second, "the follower's log cut below the damaged segment", func() bool {
		st := b.state(t)
		return st.Corrupt && st.LogEndOffset == 0
	})
	for pump(t, a, b, 1) > 0 {
		if !b.state(t).Corrupt && b.state(t).LogEndOffset < 12 {
			t.Fatal("Corrupt cleared before the follower caught up")
		}
	}
	if st := b.state(t); st.Corrupt || st.LogEndOffset != 12 {
		t.Fatalf("follower state %+v after fetching again", st)
	}
	ra, err := a.e.Fetch(context.Background(), replTopic, 0, 0, 1<<30, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Release()
	rb, err := b.e.Fetch(context.Background(), replTopic, 0, 0, 1<<30, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Release()
	if !bytes.Equal(bytes.Join(ra.Bufs, nil), bytes.Join(rb.Bufs, nil)) {
		t.Fatal("repaired follower's log differs from the leader's")
	}
	// The leader case: damage on a is recorded, it keeps leading until told.
	f, err = os.OpenFile(filepath.Join(a.dir, "topics", replTopic, "0", "00000000000000000000.log"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{one[0] ^ 0x01}, 600); err != nil {
		t.Fatal(err)
	}
	f.Close()
	testutil.Eventually(t, 10*time.Second, "the leader marked corrupt", func() bool { return a.state(t).Corrupt })
	if st := a.state(t); !st.Leader || st.LogEndOffset != 12 {
		t.Fatalf("corrupt leader state %+v", st)
	}
}

// TestTruncateAtLogEndDropsEmptyEpoch: a replica that led an epoch without
// appending holds a cache entry at its log end; a truncation to the log
// end removes no batch but drops that entry, so that its truncation loop
// (replica.TruncationComplete) ends.
func TestTruncateAtLogEndDropsEmptyEpoch(t *testing.T) {
	a, b, _ := leaderAndFollower(t, "every-batch", "every-batch")
	await(t, appendAsync(t, a, AcksLeader, "v0"))
	pump(t, a, b, 1)
	// b leads epoch 2 without appending, then follows a at epoch 3.
	if err := b.e.BecomeLeader(replTopic, replTopicID, 0, 2, []string{"a", "b"}, []string{"b"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.e.BecomeFollower(replTopic, replTopicID, 0, 3, "a"); err != nil {
		t.Fatal(err)
	}
	before := readEpochs(t, b)
	if got := before.Entries(); len(got) != 2 || got[1] != (replica.EpochEntry{Epoch: 2, StartOffset: 1}) {
		t.Fatalf("b's checkpoint before the truncation %v, want an entry of epoch 2 at offset 1", got)
	}
	if err := b.e.TruncateTo(replTopic, replTopicID, 0, 1); err != nil {
		t.Fatal(err)
	}
	after := readEpochs(t, b)
	if got, want := after.Entries(), []replica.EpochEntry{{Epoch: 1, StartOffset: 0}}; !slices.Equal(got, want) {
		t.Fatalf("b's checkpoint after truncating at its log end %v, want %v", got, want)
	}
	if st := b.state(t); st.LogEndOffset != 1 {
		t.Fatalf("b's state %+v, want log end 1 (nothing removed)", st)
	}
}

// TestFollowerBelowLeaderLogStart: retention moved the leader's log start
// past an empty follower's log end; the fetch is OFFSET_OUT_OF_RANGE with
// the leader's range, and the follower starts over there.
func TestFollowerBelowLeaderLogStart(t *testing.T) {
	clock := newClock()
	nodes := map[string]*replNode{}
	for _, id := range []string{"a", "b"} {
		n := &replNode{id: id, dir: t.TempDir()}
		n.opts = testOptions(n.dir)
		n.opts.Replication = &ReplicationOptions{NodeID: id}
		n.opts.Now = clock.Now
		n.opts.RetentionCheckInterval = -1
		n.e = openTest(t, n.opts)
		if _, err := n.e.CreateTopicSpec(TopicSpec{Name: replTopic, ID: replTopicID, Partitions: 1,
			Config: TopicConfig{SegmentBytes: 4096, RetentionBytes: 8192}}); err != nil {
			t.Fatal(err)
		}
		nodes[id] = n
	}
	a, b := nodes["a"], nodes["b"]
	if err := a.e.BecomeLeader(replTopic, replTopicID, 0, 1, []string{"a", "b"}, []string{"a"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.e.BecomeFollower(replTopic, replTopicID, 0, 1, "a"); err != nil {
		t.Fatal(err)
	}
	value := string(bytes.Repeat([]byte{'v'}, 1000))
	for range 24 {
		await(t, appendAsync(t, a, AcksAll, value))
	}
	if err := a.e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	start := a.state(t).LogStartOffset
	if start == 0 {
		t.Fatal("retention kept the leader's log start at 0")
	}
	_, err := a.e.FetchReplica(context.Background(), ReplicaFetch{Topic: replTopic, TopicID: replTopicID, FollowerID: "b", LeaderEpoch: 1, MaxBytes: 1 << 20})
	var ae *api.Error
	if codeOf(err) != api.CodeOffsetOutOfRange || !errors.As(err, &ae) || !ae.HasRange || ae.RangeStart != start {
		t.Fatalf("fetch below the leader's log start = %#v, want OFFSET_OUT_OF_RANGE from %d", err, start)
	}
	if err := a.e.TruncateFullyAndStartAt(replTopic, replTopicID, 0, start); codeOf(err) != api.CodeInvalidRequest {
		t.Fatalf("TruncateFullyAndStartAt on the leader = %v, want INVALID_REQUEST", err)
	}
	if err := b.e.TruncateFullyAndStartAt(replTopic, replTopicID, 0, start); err != nil {
		t.Fatal(err)
	}
	if st := b.state(t); st.LogStartOffset != start || st.LogEndOffset != start || st.HighWatermark != start {
		t.Fatalf("follower state %+v after starting over at %d", st, start)
	}
	for pump(t, a, b, 1) > 0 {
	}
	if st := b.state(t); st.LogEndOffset != 24 {
		t.Fatalf("follower state %+v after catching up", st)
	}
	b.reopen(t)
	if st := b.state(t); st.LogStartOffset != start || st.LogEndOffset != 24 {
		t.Fatalf("follower state %+v after a restart", st)
	}
}

// TestScrubSoleReplica: damage found by the scrub that runs after Open,
// before the partition has a role, cuts nothing; the partition's only
// replica then fails when it is made leader, as a single node's corrupt
// partition does (nothing to repair it from).
func TestScrubSoleReplica(t *testing.T) {
	n := &replNode{id: "a", dir: t.TempDir()}
	n.opts = testOptions(n.dir)
	n.opts.Replication = &ReplicationOptions{NodeID: "a"}
	n.opts.RetentionCheckInterval = -1
	n.opts.ScrubBytesPerSec = -1 // no scrub while writing
	n.e = openTest(t, n.opts)
	if _, err := n.e.CreateTopicSpec(TopicSpec{Name: replTopic, ID: replTopicID, Partitions: 1, Config: TopicConfig{SegmentBytes: 64 << 10}}); err != nil {
		t.Fatal(err)
	}
	if err := n.e.BecomeLeader(replTopic, replTopicID, 0, 1, []string{"a"}, []string{"a"}, 1); err != nil {
		t.Fatal(err)
	}
	value := string(bytes.Repeat([]byte{'v'}, 900))
	for range 80 {
		if o := await(t, appendAsync(t, n, AcksAll, value)); o.err != nil {
			t.Fatal(o.err)
		}
	}
	if err := n.e.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(n.dir, "topics", replTopic, "0", "00000000000000000000.log"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var one [1]byte
	if _, err := f.ReadAt(one[:], 30*1040+500); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0x10
	if _, err := f.WriteAt(one[:], 30*1040+500); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// In the middle of the sealed first segment: recovery spot-checks
	// sealed segments, the scrub finds it.
	n.opts.ScrubBytesPerSec = 1 << 40
	n.e = openTest(t, n.opts)
	testutil.Eventually(t, 10*time.Second, "the damage recorded", func() bool { return n.state(t).Corrupt })
	if st := n.state(t); st.LogEndOffset != 80 {
		t.Fatalf("a partition without a role cut its log: %+v", st)
	}
	if err := n.e.BecomeLeader(replTopic, replTopicID, 0, 2, []string{"a"}, []string{"a"}, 1); err != nil {
		t.Fatal(err)
	}
	d, err := n.e.DescribeTopic(replTopic)
	if err != nil {
		t.Fatal(err)
	}
	if p := d.Partitions[0]; !errors.Is(p.Err, api.ErrPartitionFailed) || p.LogEndOffset != 80 {
		t.Fatalf("the sole replica after BecomeLeader: %+v", p)
	}
}

// TestClampKeepsCommitsOnRestartedReplica: a replica restarted with a high
// watermark checkpoint below a group's committed offset (the checkpoint
// lags the high watermark by up to one interval) keeps the commit: the
// offset was accepted against the high watermark of then, so the in-sync
// set holds it; only an offset past the log end is clamped.
func TestClampKeepsCommitsOnRestartedReplica(t *testing.T) {
	a, b, _ := leaderAndFollower(t, "every-batch", "every-batch")
	await(t, appendAsync(t, a, AcksLeader, "v0", "v1", "v2"))
	pump(t, a, b, 1)
	pump(t, a, b, 1)
	if st := a.state(t); st.HighWatermark != 3 {
		t.Fatalf("leader state %+v, want high watermark 3", st)
	}
	// The group's offsets partition, led by a alone.
	if _, err := a.e.CreateTopicSpec(TopicSpec{Name: OffsetsTopic, ID: offsetsTopicID, Partitions: 1, Config: TopicConfig{RetentionMs: -1, RetentionBytes: -1}}); err != nil {
		t.Fatal(err)
	}
	if err := a.e.BecomeLeader(OffsetsTopic, offsetsTopicID, 0, 1, []string{"a"}, []string{"a"}, 1); err != nil {
		t.Fatal(err)
	}
	awaitServing(t, a, "g")
	if _, err := a.e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: replTopic, Partition: 0, Offset: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := a.e.Close(); err != nil {
		t.Fatal(err)
	}
	// The checkpoint as a crash between two checkpoints leaves it.
	ckp := filepath.Join(a.dir, "topics", replTopic, "0", hwCheckpointName)
	if err := os.WriteFile(ckp, []byte("0\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.e = openTest(t, a.opts)
	if st := a.state(t); st.HighWatermark != 1 || st.LogEndOffset != 3 {
		t.Fatalf("reopened state %+v, want high watermark 1 and log end 3", st)
	}
	if err := a.e.BecomeLeader(OffsetsTopic, offsetsTopicID, 0, 2, []string{"a"}, []string{"a"}, 1); err != nil {
		t.Fatal(err)
	}
	awaitServing(t, a, "g")
	if n := a.e.ClampOffsets(nil); n != 0 {
		t.Fatalf("ClampOffsets clamped %d commits, want none", n)
	}
	got, err := a.e.FetchOffsets("g", replTopic)
	if err != nil || len(got) != 1 || got[0].Offset != 3 {
		t.Fatalf("committed offsets after the restart: %+v, %v; want offset 3", got, err)
	}
}

// TestScrubFencedReplicaKeepsLog: a replica fenced without a leader (a
// leader back from a restart waiting for its new epoch) whose scrub finds
// a damaged segment records the damage but does not cut its log: it may
// hold the only copy of those records, and no leader would give them back.
func TestScrubFencedReplicaKeepsLog(t *testing.T) {
	n := &replNode{id: "a", dir: t.TempDir()}
	n.opts = testOptions(n.dir)
	n.opts.Replication = &ReplicationOptions{NodeID: "a"}
	n.opts.Now = newClock().Now
	n.opts.RetentionCheckInterval = -1
	n.opts.ScrubBytesPerSec = 1 << 40
	n.opts.ScrubInterval = 10 * time.Millisecond
	n.e = openTest(t, n.opts)
	if _, err := n.e.CreateTopicSpec(TopicSpec{Name: replTopic, ID: replTopicID, Partitions: 1, Config: TopicConfig{SegmentBytes: 4096}}); err != nil {
		t.Fatal(err)
	}
	if err := n.e.BecomeLeader(replTopic, replTopicID, 0, 1, []string{"a", "b"}, []string{"a"}, 1); err != nil {
		t.Fatal(err)
	}
	value := string(bytes.Repeat([]byte{'v'}, 900))
	for range 12 {
		await(t, appendAsync(t, n, AcksLeader, value))
	}
	if err := n.e.BecomeFollower(replTopic, replTopicID, 0, 2, ""); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(n.dir, "topics", replTopic, "0", "00000000000000000000.log")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[500] ^= 0x10
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the damage recorded", func() bool { return n.state(t).Corrupt })
	if st := n.state(t); st.LogEndOffset != 12 {
		t.Fatalf("fenced replica's state %+v: its log was cut", st)
	}
}
