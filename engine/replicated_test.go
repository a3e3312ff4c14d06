package engine

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine/replica"
	"github.com/seedqueue/sq/internal/testutil"
)

// replNode is one replica of a test cluster: an engine with
// Options.Replication, its data directory and node id.
type replNode struct {
	id   string
	dir  string
	opts Options
	e    *Engine
}

// testClock is a settable clock shared by the nodes of a test.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

const replTopic = "rt"

var replTopicID = api.NewTopicID()

// newReplNode opens a replicating engine for node id holding topic rt
// (one partition, sync policy policy) under the shared topic id.
func newReplNode(t *testing.T, id, policy string, clock *testClock) *replNode {
	t.Helper()
	n := &replNode{id: id, dir: t.TempDir()}
	n.opts = testOptions(n.dir)
	n.opts.Replication = &ReplicationOptions{NodeID: id, LagTimeMax: 10 * time.Second}
	n.opts.Now = clock.Now
	n.opts.RetentionCheckInterval = -1
	n.e = openTest(t, n.opts)
	if _, err := n.e.CreateTopicSpec(TopicSpec{Name: replTopic, ID: replTopicID, Partitions: 1, Config: TopicConfig{SyncPolicy: policy}}); err != nil {
		t.Fatal(err)
	}
	return n
}

// reopen closes n's engine and opens it again on the same directory.
func (n *replNode) reopen(t *testing.T) {
	t.Helper()
	if err := n.e.Close(); err != nil {
		t.Fatal(err)
	}
	n.e = openTest(t, n.opts)
}

func (n *replNode) state(t *testing.T) ReplicaState {
	t.Helper()
	st, err := n.e.ReplicaState(replTopic, replTopicID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// pump runs one replica fetch of follower f from leader l at epoch and
// appends what it got on f, as the cluster's replicator does; it returns
// the number of batches copied.
func pump(t *testing.T, l, f *replNode, epoch uint32) int {
	t.Helper()
	st := f.state(t)
	res, err := l.e.FetchReplica(context.Background(), ReplicaFetch{Topic: replTopic, TopicID: replTopicID, FollowerID: f.id,
		LeaderEpoch: epoch, FetchOffset: st.LogEndOffset, DurableOffset: st.DurableEndOffset, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatalf("FetchReplica by %s from %s: %v", f.id, l.id, err)
	}
	if res.LeaderEpoch != epoch {
		t.Fatalf("FetchReplica: leader epoch %d, want %d", res.LeaderEpoch, epoch)
	}
	var batches [][]byte
	for _, buf := range res.Bufs {
		for len(buf) > 0 {
			b, rest, _, err := batch.Split(buf, 0)
			if err != nil {
				t.Fatal(err)
			}
			batches = append(batches, bytes.Clone(b))
			buf = rest
		}
	}
	hw := res.HighWatermark
	res.Release()
	fst, err := f.e.AppendReplica(context.Background(), replTopic, replTopicID, 0, batches, hw)
	if err != nil {
		t.Fatalf("AppendReplica on %s: %v", f.id, err)
	}
	if fst.HighWatermark > fst.LogEndOffset || fst.HighWatermark > hw && fst.HighWatermark != st.HighWatermark {
		t.Fatalf("follower state %+v after a fetch with leader HW %d", fst, hw)
	}
	return len(batches)
}

// appendAsync starts an append of values on n with acks and returns a
// channel that delivers its outcome.
type appendOutcome struct {
	res AppendResult
	err error
}

func appendAsync(t *testing.T, n *replNode, acks Acks, values ...string) <-chan appendOutcome {
	t.Helper()
	ctx := WithAcks(context.Background(), acks)
	pd, err := n.e.AppendAsync(ctx, replTopic, 0, mkBatch(t, values...), nil)
	out := make(chan appendOutcome, 1)
	if err != nil {
		out <- appendOutcome{err: err}
		return out
	}
	go func() {
		res, err := pd.Wait(ctx)
		out <- appendOutcome{res, err}
	}()
	return out
}

// await returns the outcome of an appendAsync, failing after 10 s.
func await(t *testing.T, ch <-chan appendOutcome) appendOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("append outcome not delivered within 10 s")
		return appendOutcome{}
	}
}

// pendingOutcome reports whether ch has no outcome yet.
func pendingOutcome(ch <-chan appendOutcome) bool {
	select {
	case o := <-ch:
		panic("outcome delivered early: " + api.AsError(o.err).Error())
	default:
		return true
	}
}

func newClock() *testClock { return &testClock{now: time.Unix(1_800_000_000, 0)} }

// leaderAndFollower returns node a leading epoch 1 and node b following,
// both in the ISR, min.insync.replicas 2.
func leaderAndFollower(t *testing.T, leaderPolicy, followerPolicy string) (*replNode, *replNode, *testClock) {
	t.Helper()
	clock := newClock()
	a := newReplNode(t, "a", leaderPolicy, clock)
	b := newReplNode(t, "b", followerPolicy, clock)
	if err := a.e.BecomeLeader(replTopic, replTopicID, 0, 1, []string{"a", "b"}, []string{"a", "b"}, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.e.BecomeFollower(replTopic, replTopicID, 0, 1, "a"); err != nil {
		t.Fatal(err)
	}
	return a, b, clock
}

func TestReplicatedHighWatermark(t *testing.T) {
	a, b, _ := leaderAndFollower(t, "every-batch", "every-batch")
	out := appendAsync(t, a, AcksAll, "v0", "v1")
	testutil.Eventually(t, 10*time.Second, "the leader's durable log end at 2", func() bool { return a.state(t).DurableEndOffset == 2 })
	if st := a.state(t); st.HighWatermark != 0 || st.DurableEndOffset != 2 || !st.Leader || st.LeaderEpoch != 1 {
		t.Fatalf("leader state %+v before any replica fetch", st)
	}
	// Consumers see nothing above the high watermark.
	if got := readAll(t, a.e, replTopic, 0); len(got) != 0 {
		t.Fatalf("consumer read %q above the high watermark", got)
	}
	// The first fetch copies the batch; the follower's durable end was 0
	// at the fetch, so the high watermark stays.
	if n := pump(t, a, b, 1); n != 1 {
		t.Fatalf("first fetch copied %d batches, want 1", n)
	}
	if st := b.state(t); st.LogEndOffset != 2 || st.DurableEndOffset != 2 || st.HighWatermark != 0 || st.Leader {
		t.Fatalf("follower state %+v after the first fetch", st)
	}
	if a.state(t).HighWatermark != 0 || !pendingOutcome(out) {
		t.Fatalf("leader high watermark moved before the follower reported its durable end")
	}
	// The next fetch reports it: the high watermark passes the batch and
	// the acks-all append returns.
	pump(t, a, b, 1)
	o := await(t, out)
	if o.err != nil || o.res.Durability != DurabilityReplicated || o.res.Replicas != 2 || o.res.BaseOffset != 0 {
		t.Fatalf("acks-all append = %+v, %v; want replicated by 2 at offset 0", o.res, o.err)
	}
	if st := a.state(t); st.HighWatermark != 2 {
		t.Fatalf("leader high watermark %d, want 2", st.HighWatermark)
	}
	if got := readAll(t, a.e, replTopic, 0); !slices.Equal(got, []string{"v0", "v1"}) {
		t.Fatalf("consumer read %q", got)
	}
	// The follower learns the high watermark from the next response.
	pump(t, a, b, 1)
	if st := b.state(t); st.HighWatermark != 2 {
		t.Fatalf("follower high watermark %d, want 2", st.HighWatermark)
	}
	// Batches carry the leader epoch on both replicas.
	for _, n := range []*replNode{a, b} {
		r, err := n.e.Fetch(context.Background(), replTopic, 0, 0, 1<<20, 0)
		if err != nil {
			t.Fatal(err)
		}
		h, err := batch.ParseHeader(r.Bufs[0])
		r.Release()
		if err != nil || h.LeaderEpoch != 1 {
			t.Fatalf("%s: batch leader epoch %d (%v), want 1", n.id, h.LeaderEpoch, err)
		}
	}
	// acks leader returns after the local commit.
	o = await(t, appendAsync(t, a, AcksLeader, "v2"))
	if o.err != nil || o.res.Replicas != 1 || o.res.Durability != DurabilitySynced {
		t.Fatalf("acks-leader append = %+v, %v", o.res, o.err)
	}
}

// TestReplicatedDurableLEO: under an interval policy the follower's
// durable log end lags its log end, and the leader's high watermark
// follows the durable one.
func TestReplicatedDurableLEO(t *testing.T) {
	a, b, _ := leaderAndFollower(t, "every-batch", "3600000ms")
	out := appendAsync(t, a, AcksAll, "v0")
	testutil.Eventually(t, 10*time.Second, "the leader's log end at 1", func() bool { return a.state(t).LogEndOffset == 1 })
	pump(t, a, b, 1)
	pump(t, a, b, 1)
	if st := b.state(t); st.LogEndOffset != 1 || st.DurableEndOffset != 0 {
		t.Fatalf("follower state %+v: want log end 1, durable end 0", st)
	}
	if a.state(t).HighWatermark != 0 || !pendingOutcome(out) {
		t.Fatal("leader high watermark passed a batch the follower has not synced")
	}
	// A policy change syncs what was written under the old one.
	every := "every-batch"
	if _, err := b.e.AlterTopicConfig(replTopic, TopicConfigChange{SyncPolicy: &every}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the follower's durable end at 1", func() bool { return b.state(t).DurableEndOffset == 1 })
	pump(t, a, b, 1)
	if o := await(t, out); o.err != nil || o.res.Durability != DurabilityReplicated {
		t.Fatalf("acks-all append = %+v, %v", o.res, o.err)
	}
}

func TestNotEnoughReplicas(t *testing.T) {
	a, b, _ := leaderAndFollower(t, "every-batch", "every-batch")
	// The ISR shrinks below min.insync.replicas while an append waits.
	out := appendAsync(t, a, AcksAll, "v0")
	testutil.Eventually(t, 10*time.Second, "the leader's log end at 1", func() bool { return a.state(t).LogEndOffset == 1 })
	if err := a.e.UpdateISR(replTopic, replTopicID, 0, 1, []string{"a"}, 2); err != nil {
		t.Fatal(err)
	}
	if o := await(t, out); codeOf(o.err) != api.CodeNotEnoughReplicas {
		t.Fatalf("acks-all append after the ISR shrank = %+v, %v; want NOT_ENOUGH_REPLICAS", o.res, o.err)
	}
	// Refused before anything is written while the ISR is too small.
	o := await(t, appendAsync(t, a, AcksAll, "v1"))
	if codeOf(o.err) != api.CodeNotEnoughReplicas || a.state(t).LogEndOffset != 1 {
		t.Fatalf("acks-all append with 1 in-sync replica of 2 = %v, log end %d; want NOT_ENOUGH_REPLICAS, 1", o.err, a.state(t).LogEndOffset)
	}
	// acks leader is still taken.
	if o := await(t, appendAsync(t, a, AcksLeader, "v1")); o.err != nil || o.res.BaseOffset != 1 {
		t.Fatalf("acks-leader append = %+v, %v", o.res, o.err)
	}
	// Stale or future epochs are refused.
	if err := a.e.UpdateISR(replTopic, replTopicID, 0, 0, []string{"a", "b"}, 2); codeOf(err) != api.CodeFencedLeaderEpoch {
		t.Fatalf("UpdateISR of epoch 0 = %v, want FENCED_LEADER_EPOCH", err)
	}
	if err := a.e.UpdateISR(replTopic, replTopicID, 0, 2, []string{"a", "b"}, 2); codeOf(err) != api.CodeUnknownLeaderEpoch {
		t.Fatalf("UpdateISR of epoch 2 = %v, want UNKNOWN_LEADER_EPOCH", err)
	}
	// The follower rejoins: with the ISR back at 2 the high watermark
	// passes both batches once b has them durably.
	if err := a.e.UpdateISR(replTopic, replTopicID, 0, 1, []string{"a", "b"}, 2); err != nil {
		t.Fatal(err)
	}
	pump(t, a, b, 1)
	pump(t, a, b, 1)
	if st := a.state(t); st.HighWatermark != 2 {
		t.Fatalf("leader high watermark %d, want 2", st.HighWatermark)
	}
}

func TestFollowerRefusesClientAppends(t *testing.T) {
	a, b, _ := leaderAndFollower(t, "every-batch", "every-batch")
	for _, acks := range []Acks{AcksAll, AcksLeader} {
		if o := await(t, appendAsync(t, b, acks, "x")); codeOf(o.err) != api.CodeNotLeader {
			t.Fatalf("append on the follower (acks %v) = %v, want NOT_LEADER", acks, o.err)
		}
	}
	if _, err := b.e.FetchReplica(context.Background(), ReplicaFetch{Topic: replTopic, TopicID: replTopicID, FollowerID: "a", LeaderEpoch: 1}); codeOf(err) != api.CodeNotLeader {
		t.Fatalf("FetchReplica from the follower = %v, want NOT_LEADER", err)
	}
	for epoch, code := range map[uint32]api.Code{0: api.CodeFencedLeaderEpoch, 2: api.CodeUnknownLeaderEpoch} {
		if _, err := a.e.FetchReplica(context.Background(), ReplicaFetch{Topic: replTopic, TopicID: replTopicID, FollowerID: "b", LeaderEpoch: epoch}); codeOf(err) != code {
			t.Fatalf("FetchReplica at epoch %d = %v, want %v", epoch, err, code)
		}
	}
	if _, err := a.e.FetchReplica(context.Background(), ReplicaFetch{Topic: replTopic, TopicID: api.NewTopicID(), FollowerID: "b", LeaderEpoch: 1}); codeOf(err) != api.CodeUnknownTopicID {
		t.Fatalf("FetchReplica with another topic id = %v, want UNKNOWN_TOPIC_ID", err)
	}
	if _, err := a.e.FetchReplica(context.Background(), ReplicaFetch{Topic: replTopic, TopicID: replTopicID, FollowerID: "b", LeaderEpoch: 1, FetchOffset: 5}); codeOf(err) != api.CodeOffsetOutOfRange {
		t.Fatalf("FetchReplica past the log end = %v, want OFFSET_OUT_OF_RANGE", err)
	}
	if err := a.e.TruncateTo(replTopic, replTopicID, 0, 0); codeOf(err) != api.CodeInvalidRequest {
		t.Fatalf("TruncateTo on the leader = %v, want INVALID_REQUEST", err)
	}
	if err := a.e.BecomeLeader(replTopic, replTopicID, 0, 0, []string{"a"}, []string{"a"}, 1); codeOf(err) != api.CodeFencedLeaderEpoch {
		t.Fatalf("BecomeLeader at an older epoch = %v, want FENCED_LEADER_EPOCH", err)
	}
	// A queued acks-all append fails with NOT_LEADER when the leader
	// steps down before the high watermark passes it.
	out := appendAsync(t, a, AcksAll, "v0")
	testutil.Eventually(t, 10*time.Second, "the leader's log end at 1", func() bool { return a.state(t).LogEndOffset == 1 })
	if err := a.e.BecomeFollower(replTopic, replTopicID, 0, 2, "b"); err != nil {
		t.Fatal(err)
	}
	if o := await(t, out); codeOf(o.err) != api.CodeNotLeader {
		t.Fatalf("acks-all append across a step-down = %v, want NOT_LEADER", o.err)
	}
}

// TestFetchReplicaLongPoll: a caught-up follower's fetch waits for the
// leader's log end to move, not its high watermark.
func TestFetchReplicaLongPoll(t *testing.T) {
	a, _, _ := leaderAndFollower(t, "every-batch", "every-batch")
	got := make(chan error, 1)
	go func() {
		res, err := a.e.FetchReplica(context.Background(), ReplicaFetch{Topic: replTopic, TopicID: replTopicID, FollowerID: "b",
			LeaderEpoch: 1, MaxBytes: 1 << 20, MaxWait: 20 * time.Second})
		if err == nil {
			if len(res.Bufs) == 0 || res.HighWatermark != 0 {
				err = api.NewError(api.CodeInvalidRequest, "fetch returned %d bufs, high watermark %d", len(res.Bufs), res.HighWatermark)
			}
			res.Release()
		}
		got <- err
	}()
	testutil.Eventually(t, 10*time.Second, "the fetch waiting", func() bool { return a.e.InFlight() == 1 })
	appendAsync(t, a, AcksLeader, "v0")
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("replica fetch did not return after the log end moved")
	}
}

// TestTruncateDivergentSuffix: the old leader wrote batches nobody copied;
// after a leader change it truncates them (KIP-101/279) and copies the
// new leader's.
func TestTruncateDivergentSuffix(t *testing.T) {
	a, b, _ := leaderAndFollower(t, "every-batch", "every-batch")
	await(t, appendAsync(t, a, AcksLeader, "v0", "v1"))
	pump(t, a, b, 1)
	pump(t, a, b, 1) // high watermark 2 everywhere
	// Written on a only.
	await(t, appendAsync(t, a, AcksLeader, "lost2"))
	await(t, appendAsync(t, a, AcksLeader, "lost3"))
	// b leads epoch 2 and writes at offset 2.
	if err := b.e.BecomeLeader(replTopic, replTopicID, 0, 2, []string{"a", "b"}, []string{"b"}, 1); err != nil {
		t.Fatal(err)
	}
	if o := await(t, appendAsync(t, b, AcksAll, "new2")); o.err != nil || o.res.BaseOffset != 2 || o.res.Replicas != 1 {
		t.Fatalf("append on the new leader = %+v, %v", o.res, o.err)
	}
	if err := a.e.BecomeFollower(replTopic, replTopicID, 0, 2, "b"); err != nil {
		t.Fatal(err)
	}
	// a asks b for the end of its latest epoch, 1, and truncates there.
	epoch, end, err := b.e.EndOffsetForEpoch(replTopic, replTopicID, 0, 1)
	if err != nil || epoch != 1 || end != 2 {
		t.Fatalf("EndOffsetForEpoch(1) on the new leader = %d, %d, %v; want 1, 2", epoch, end, err)
	}
	local, err := a.e.LocalEpochs(replTopic, replTopicID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if file := readEpochs(t, a); !slices.Equal(local.Entries(), file.Entries()) {
		t.Fatalf("LocalEpochs %v, checkpoint file %v", local.Entries(), file.Entries())
	}
	ast := a.state(t)
	to := replica.TruncationOffset(local, ast.LogEndOffset, epoch, end, true)
	if to != 2 {
		t.Fatalf("truncation offset %d, want 2", to)
	}
	if err := a.e.TruncateTo(replTopic, replTopicID, 0, 1); codeOf(err) != api.CodeOffsetOutOfRange {
		t.Fatalf("TruncateTo inside a batch = %v, want OFFSET_OUT_OF_RANGE", err)
	}
	if err := a.e.TruncateTo(replTopic, replTopicID, 0, to); err != nil {
		t.Fatal(err)
	}
	if st := a.state(t); st.LogEndOffset != 2 || st.HighWatermark > 2 || st.DurableEndOffset != 2 {
		t.Fatalf("state after truncation %+v", st)
	}
	pump(t, b, a, 2)
	pump(t, b, a, 2)
	for _, n := range []*replNode{a, b} {
		if got := readAll(t, n.e, replTopic, 0); !slices.Equal(got, []string{"v0", "v1", "new2"}) {
			t.Fatalf("%s holds %q", n.id, got)
		}
	}
	aEpochs := readEpochs(t, a)
	if got, want := aEpochs.Entries(), []replica.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: 2}}; !slices.Equal(got, want) {
		t.Fatalf("a's leader-epoch checkpoint %v, want %v", got, want)
	}
	// A replica never keeps a high watermark above its truncated log end.
	if err := a.e.TruncateTo(replTopic, replTopicID, 0, 0); err != nil {
		t.Fatal(err)
	}
	if st := a.state(t); st.LogEndOffset != 0 || st.HighWatermark != 0 {
		t.Fatalf("state after truncating everything %+v", st)
	}
	aEpochs = readEpochs(t, a)
	if got := aEpochs.Entries(); len(got) != 0 {
		t.Fatalf("leader-epoch checkpoint after truncating everything: %v", got)
	}
}

// readEpochs parses n's leader-epoch checkpoint file.
func readEpochs(t *testing.T, n *replNode) replica.EpochCache {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dir, "topics", replTopic, "0", epochCheckpointName))
	if err != nil {
		t.Fatal(err)
	}
	var c replica.EpochCache
	if err := c.UnmarshalText(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReplicationRestart: the epoch cache and the high watermark survive a
// restart; the high watermark does not jump to the log end.
func TestReplicationRestart(t *testing.T) {
	a, b, _ := leaderAndFollower(t, "every-batch", "every-batch")
	await(t, appendAsync(t, a, AcksLeader, "v0", "v1"))
	pump(t, a, b, 1)
	pump(t, a, b, 1)
	await(t, appendAsync(t, a, AcksLeader, "v2")) // not replicated: the high watermark stays at 2
	if st := a.state(t); st.HighWatermark != 2 || st.LogEndOffset != 3 {
		t.Fatalf("leader state %+v", st)
	}
	a.reopen(t)
	b.reopen(t)
	for _, n := range []*replNode{a, b} {
		st := n.state(t)
		if st.HighWatermark != 2 || st.LeaderEpoch != 1 || st.Leader {
			t.Fatalf("%s after restart: %+v; want high watermark 2, epoch 1, not leading", n.id, st)
		}
		// Not leading until told: client appends are refused.
		if o := await(t, appendAsync(t, n, AcksLeader, "x")); codeOf(o.err) != api.CodeNotLeader {
			t.Fatalf("%s: append before BecomeLeader = %v, want NOT_LEADER", n.id, o.err)
		}
	}
	if got := readAll(t, a.e, replTopic, 0); !slices.Equal(got, []string{"v0", "v1"}) {
		t.Fatalf("consumer reads %q after restart, want what was below the high watermark", got)
	}
	// An offset between the high watermark and the log end waits for the
	// high watermark (here: returns empty), it is not out of range.
	if r, err := a.e.Fetch(context.Background(), replTopic, 0, 3, 1<<20, 0); err != nil || len(r.Bufs) != 0 || r.HighWatermark != 2 {
		t.Fatalf("Fetch(3) with high watermark 2 and log end 3 = %v", err)
	} else {
		r.Release()
	}
	if _, err := a.e.Fetch(context.Background(), replTopic, 0, 4, 1<<20, 0); codeOf(err) != api.CodeOffsetOutOfRange {
		t.Fatalf("Fetch(4) past the log end = %v, want OFFSET_OUT_OF_RANGE", err)
	}
	// a leads epoch 3; its cache keeps epoch 1.
	if err := a.e.BecomeLeader(replTopic, replTopicID, 0, 3, []string{"a", "b"}, []string{"a", "b"}, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.e.BecomeFollower(replTopic, replTopicID, 0, 3, "a"); err != nil {
		t.Fatal(err)
	}
	if ep, end, err := a.e.EndOffsetForEpoch(replTopic, replTopicID, 0, 2); err != nil || ep != 1 || end != 3 {
		t.Fatalf("EndOffsetForEpoch(2) = %d, %d, %v; want 1, 3", ep, end, err)
	}
	pump(t, a, b, 3)
	pump(t, a, b, 3)
	if st := a.state(t); st.HighWatermark != 3 {
		t.Fatalf("high watermark %d after the follower caught up, want 3", st.HighWatermark)
	}
	b.reopen(t)
	bEpochs := readEpochs(t, b)
	if got := bEpochs.Entries(); !slices.Equal(got, []replica.EpochEntry{{Epoch: 1, StartOffset: 0}}) {
		t.Fatalf("b's epochs %v: want only epoch 1 (epoch 3 appended nothing yet)", got)
	}
}

// TestISRProposals: a follower that does not catch up within LagTimeMax
// is proposed out; the committed shrink lets the high watermark move; the
// follower is proposed back in once caught up.
func TestISRProposals(t *testing.T) {
	a, b, clock := leaderAndFollower(t, "every-batch", "every-batch")
	if err := a.e.UpdateISR(replTopic, replTopicID, 0, 1, []string{"a", "b"}, 1); err != nil {
		t.Fatal(err)
	}
	if got := a.e.ISRProposals(clock.Now()); len(got) != 0 {
		t.Fatalf("proposals with a caught-up follower: %+v", got)
	}
	out := appendAsync(t, a, AcksAll, "v0")
	testutil.Eventually(t, 10*time.Second, "the leader's log end at 1", func() bool { return a.state(t).LogEndOffset == 1 })
	clock.add(11 * time.Second)
	got := a.e.ISRProposals(clock.Now())
	if len(got) != 1 || got[0].Epoch != 1 || got[0].ID != replTopicID || !slices.Equal(got[0].ISR, []string{"a"}) {
		t.Fatalf("proposals = %+v, want ISR [a]", got)
	}
	if again := a.e.ISRProposals(clock.Now()); len(again) != 0 {
		t.Fatalf("a second proposal while one is in flight: %+v", again)
	}
	if err := a.e.UpdateISR(replTopic, replTopicID, 0, 1, []string{"a"}, 1); err != nil {
		t.Fatal(err)
	}
	if o := await(t, out); o.err != nil || o.res.Replicas != 1 {
		t.Fatalf("acks-all append after the shrink = %+v, %v", o.res, o.err)
	}
	pump(t, a, b, 1)
	pump(t, a, b, 1)
	got = a.e.ISRProposals(clock.Now())
	if len(got) != 1 || !slices.Equal(got[0].ISR, []string{"a", "b"}) {
		t.Fatalf("proposals after b caught up = %+v, want ISR [a b]", got)
	}
}

// TestSingleNodeUnchanged: without Options.Replication no replication
// file is written, batches carry epoch 0 and appends report 1 replica.
func TestSingleNodeUnchanged(t *testing.T) {
	dir := t.TempDir()
	e := openTest(t, testOptions(dir))
	if _, err := e.CreateTopic("s", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	b := mkBatch(t, "v0")
	batch.SetLeaderEpoch(b, 7)
	res, err := e.Append(context.Background(), "s", 0, b)
	if err != nil || res.Replicas != 1 || res.Durability != DurabilitySynced {
		t.Fatalf("Append = %+v, %v", res, err)
	}
	r, err := e.Fetch(context.Background(), "s", 0, 0, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := batch.ParseHeader(r.Bufs[0])
	r.Release()
	if h.LeaderEpoch != 0 {
		t.Fatalf("leader epoch %d on a single node, want 0", h.LeaderEpoch)
	}
	if _, err := e.ReplicaState("s", api.TopicID{}, 0); codeOf(err) != api.CodeInvalidRequest {
		t.Fatalf("ReplicaState on a single node = %v, want INVALID_REQUEST", err)
	}
	if got := e.ISRProposals(time.Now()); got != nil {
		t.Fatalf("ISRProposals on a single node = %v", got)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{epochCheckpointName, hwCheckpointName} {
		if _, err := os.Stat(filepath.Join(dir, "topics", "s", "0", name)); !os.IsNotExist(err) {
			t.Fatalf("%s on a single node: %v", name, err)
		}
	}
}

// TestEpochCacheFollowsLogStart: retention moves the log start and the
// leader-epoch checkpoint with it; a damaged checkpoint is rebuilt from
// the batches' leader epochs at open.
func TestEpochCacheFollowsLogStart(t *testing.T) {
	clock := newClock()
	a := &replNode{id: "a", dir: t.TempDir()}
	a.opts = testOptions(a.dir)
	a.opts.Replication = &ReplicationOptions{NodeID: "a"}
	a.opts.Now = clock.Now
	a.opts.RetentionCheckInterval = -1
	a.e = openTest(t, a.opts)
	if _, err := a.e.CreateTopicSpec(TopicSpec{Name: replTopic, ID: replTopicID, Partitions: 1,
		Config: TopicConfig{SegmentBytes: 4096, RetentionBytes: 8192}}); err != nil {
		t.Fatal(err)
	}
	value := string(bytes.Repeat([]byte{'x'}, 1000))
	for epoch := uint32(1); epoch <= 3; epoch++ {
		if err := a.e.BecomeLeader(replTopic, replTopicID, 0, epoch, []string{"a"}, []string{"a"}, 1); err != nil {
			t.Fatal(err)
		}
		for range 8 {
			if o := await(t, appendAsync(t, a, AcksAll, value)); o.err != nil {
				t.Fatal(o.err)
			}
		}
	}
	before := readEpochs(t, a)
	if got := before.Entries(); !slices.Equal(got, []replica.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: 8}, {Epoch: 3, StartOffset: 16}}) {
		t.Fatalf("epochs %v before retention", got)
	}
	if err := a.e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	start := a.state(t).LogStartOffset
	if start <= 8 || start >= 24 {
		t.Fatalf("log start %d after retention, want within epoch 2 or 3", start)
	}
	after := readEpochs(t, a)
	if got := after.Entries(); got[0].StartOffset != start || got[len(got)-1].Epoch != 3 {
		t.Fatalf("epochs %v after retention moved the log start to %d", got, start)
	}
	// Damage the checkpoint: it is rebuilt from the log at open.
	path := filepath.Join(a.dir, "topics", replTopic, "0", epochCheckpointName)
	if err := a.e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("0\n2\n3 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.e = openTest(t, a.opts)
	if err := a.e.BecomeLeader(replTopic, replTopicID, 0, 4, []string{"a"}, []string{"a"}, 1); err != nil {
		t.Fatal(err)
	}
	rebuilt := readEpochs(t, a)
	want := append(after.Entries(), replica.EpochEntry{Epoch: 4, StartOffset: 24})
	if got := rebuilt.Entries(); !slices.Equal(got, want) {
		t.Fatalf("rebuilt epochs %v, want %v", got, want)
	}
}

// TestReplicationUnderLoad: producers publish with acks all while a
// follower fetches in a loop with long polls; every publish is
// acknowledged as replicated, and both logs end up byte for byte equal.
func TestReplicationUnderLoad(t *testing.T) {
	a, b, _ := leaderAndFollower(t, "every-batch", "every-batch")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fetcherDone := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			st, err := b.e.ReplicaState(replTopic, replTopicID, 0)
			if err != nil {
				fetcherDone <- err
				return
			}
			res, err := a.e.FetchReplica(ctx, ReplicaFetch{Topic: replTopic, TopicID: replTopicID, FollowerID: "b",
				LeaderEpoch: 1, FetchOffset: st.LogEndOffset, DurableOffset: st.DurableEndOffset, MaxBytes: 64 << 10, MaxWait: time.Second})
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				fetcherDone <- err
				return
			}
			var batches [][]byte
			for _, buf := range res.Bufs {
				for len(buf) > 0 {
					bb, rest, _, err := batch.Split(buf, 0)
					if err != nil {
						fetcherDone <- err
						return
					}
					batches = append(batches, bytes.Clone(bb))
					buf = rest
				}
			}
			hw := res.HighWatermark
			res.Release()
			if _, err := b.e.AppendReplica(ctx, replTopic, replTopicID, 0, batches, hw); err != nil {
				if ctx.Err() != nil {
					break
				}
				fetcherDone <- err
				return
			}
		}
		fetcherDone <- nil
	}()
	const producers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, producers*each)
	for p := range producers {
		wg.Go(func() {
			actx := WithAcks(context.Background(), AcksAll)
			for i := range each {
				res, err := a.e.Append(actx, replTopic, 0, mkBatch(t, "p"+string(rune('0'+p))+"-"+string(rune('a'+i%26))))
				if err == nil && (res.Durability != DurabilityReplicated || res.Replicas != 2) {
					err = api.NewError(api.CodeInvalidRequest, "ack %+v", res)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("acks-all publish: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "the follower's high watermark at the leader's", func() bool {
		return b.state(t).HighWatermark == producers*each
	})
	cancel()
	if err := <-fetcherDone; err != nil {
		t.Fatal(err)
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
		t.Fatal("leader and follower logs differ")
	}
}
