package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/internal/faultfs"
)

// replicaBatch returns a one-record batch as a leader of epoch stamped it
// at offset off.
func replicaBatch(t *testing.T, off uint64, epoch uint32) []byte {
	b := mkBatch(t, fmt.Sprintf("e%d-o%d", epoch, off))
	batch.SetBaseOffset(b, off)
	batch.SetLeaderEpoch(b, epoch)
	return b
}

// TestReplicaCrashAtEveryPoint crashes a follower at each counted disk
// call of replica appends that bring new epochs, a truncation and the
// appends after it, restores the synced and then a torn state, and checks
// that the reopened replica's leader-epoch cache agrees with its log: each
// batch's epoch is the one the cache gives its offset, and no entry starts
// at or past the log end.
func TestReplicaCrashAtEveryPoint(t *testing.T) {
	setup := func(t *testing.T) (*faultfs.FS, Options, *Engine) {
		fs := faultfs.New(t.TempDir(), nil)
		opts := testOptions(fs.Root())
		opts.FS, opts.Backend, opts.ScrubBytesPerSec, opts.RetentionCheckInterval = fs, fs.Backend(), -1, -1
		opts.SegmentBytes, opts.MaxBatchBytes, opts.PreallocBytes = 4<<10, 2<<10, 4<<10
		opts.Replication = &ReplicationOptions{NodeID: "b"}
		e, err := Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.CreateTopicSpec(TopicSpec{Name: replTopic, ID: replTopicID, Partitions: 1, Config: TopicConfig{SegmentBytes: 4 << 10}}); err != nil {
			t.Fatal(err)
		}
		if err := e.BecomeFollower(replTopic, replTopicID, 0, 5, "a"); err != nil {
			t.Fatal(err)
		}
		var bs [][]byte
		for off := range uint64(20) {
			bs = append(bs, replicaBatch(t, off, 1))
		}
		if _, err := e.AppendReplica(context.Background(), replTopic, replTopicID, 0, bs, 10); err != nil {
			t.Fatal(err)
		}
		return fs, opts, e
	}
	op := func(t *testing.T, e *Engine) {
		ctx := context.Background()
		var bs [][]byte
		for off := uint64(20); off < 40; off++ {
			bs = append(bs, replicaBatch(t, off, 2+uint32(off/30)))
		}
		if _, err := e.AppendReplica(ctx, replTopic, replTopicID, 0, bs, 20); err != nil {
			return
		}
		if err := e.TruncateTo(replTopic, replTopicID, 0, 25); err != nil {
			return
		}
		bs = nil
		for off := uint64(25); off < 45; off++ {
			bs = append(bs, replicaBatch(t, off, 4))
		}
		_, _ = e.AppendReplica(ctx, replTopic, replTopicID, 0, bs, 25)
	}
	fs, _, e := setup(t)
	before := fs.Counted()
	op(t, e)
	calls := fs.Counted() - before
	e.Close()
	if calls < 10 {
		t.Fatalf("the operation made %d counted calls", calls)
	}
	for n := int64(1); n <= calls; n++ {
		for _, torn := range []bool{false, true} {
			fs, opts, e := setup(t)
			fs.CrashAfter(n)
			op(t, e)
			fs.Crash()
			e.Close() // fails: the process is dead
			var rng *rand.Rand
			if torn {
				rng = rand.New(rand.NewPCG(uint64(n), 1))
			}
			if err := fs.Restore(rng); err != nil {
				t.Fatal(err)
			}
			e, err := Open(opts)
			if err != nil {
				t.Fatalf("crash at call %d (torn %v): reopen: %v", n, torn, err)
			}
			checkEpochsAgree(t, e, fmt.Sprintf("crash at call %d (torn %v)", n, torn))
			e.Close()
		}
	}
}

// checkEpochsAgree checks that e's leader-epoch cache of rt/0 agrees with
// the leader epochs of its batches.
func checkEpochsAgree(t *testing.T, e *Engine, what string) {
	t.Helper()
	st, err := e.ReplicaState(replTopic, replTopicID, 0)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	cache, err := e.LocalEpochs(replTopic, replTopicID, 0)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	entries := cache.Entries()
	if n := len(entries); n > 0 && entries[n-1].StartOffset >= st.LogEndOffset {
		t.Fatalf("%s: epoch entry %v at or past the log end %d", what, entries[n-1], st.LogEndOffset)
	}
	if st.HighWatermark > st.LogEndOffset {
		t.Fatalf("%s: state %+v: high watermark past the log end", what, st)
	}
	_, p, err := e.partition(replTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.log.Read(st.LogStartOffset, 1<<30, st.LogEndOffset)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer v.Release()
	epochAt := func(off uint64) uint32 {
		var ep uint32
		for _, en := range entries {
			if en.StartOffset <= off {
				ep = en.Epoch
			}
		}
		return ep
	}
	for _, buf := range v.Bufs {
		for len(buf) > 0 {
			_, rest, h, err := batch.Split(buf, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := epochAt(h.BaseOffset); h.LeaderEpoch != want {
				t.Fatalf("%s: batch at offset %d has epoch %d, the cache %v says %d", what, h.BaseOffset, h.LeaderEpoch, entries, want)
			}
			buf = rest
		}
	}
}
