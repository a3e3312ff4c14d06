package gossip

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/engine/replica"
	"github.com/seedqueue/sq/gossip/meta"
)

// fakeReplicas is a ReplicaStorage of one node over in-memory logs: each
// partition's log is the leader epoch of each offset (one record per
// batch), and a batch travels as "offset:epoch". It records the role
// calls it gets.
type fakeReplicas struct {
	node string

	mu      sync.Mutex
	parts   map[partKey]*fakeReplicaLog
	calls   []string
	propose []engine.ISRProposal // returned by the next ISRProposals
	notify  chan struct{}
}

type fakeReplicaLog struct {
	epochs  []uint32 // the leader epoch of each offset
	hw      uint64
	leader  bool
	epoch   uint32
	isr     []string
	minISR  int
	corrupt bool // a scrub found damage
}

func newFakeReplicas(node string) *fakeReplicas {
	return &fakeReplicas{node: node, parts: map[partKey]*fakeReplicaLog{}, notify: make(chan struct{})}
}

// part returns the log of a partition; f.mu is held.
func (f *fakeReplicas) part(id api.TopicID, p int) *fakeReplicaLog {
	k := partKey{id, p}
	if f.parts[k] == nil {
		f.parts[k] = &fakeReplicaLog{}
	}
	return f.parts[k]
}

// wake wakes the fetches waiting for new records; f.mu is held.
func (f *fakeReplicas) wake() {
	close(f.notify)
	f.notify = make(chan struct{})
}

func (f *fakeReplicas) call(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeReplicas) callsWith(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

// append appends n records as the leader of epoch.
func (f *fakeReplicas) append(id api.TopicID, p, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.part(id, p)
	for range n {
		l.epochs = append(l.epochs, l.epoch)
	}
	f.wake()
}

func (f *fakeReplicas) log(id api.TopicID, p int) []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.part(id, p).epochs)
}

func (f *fakeReplicas) BecomeLeader(topic string, id api.TopicID, p int, epoch uint32, replicas, isr []string, minISR int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.call("leader %s/%d epoch %d isr %v min %d", topic, p, epoch, isr, minISR)
	l := f.part(id, p)
	l.leader, l.epoch, l.isr, l.minISR = true, epoch, slices.Clone(isr), minISR
	f.wake()
	return nil
}

func (f *fakeReplicas) BecomeFollower(topic string, id api.TopicID, p int, epoch uint32, leader string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.call("follower %s/%d epoch %d of %q", topic, p, epoch, leader)
	l := f.part(id, p)
	l.leader, l.epoch = false, epoch
	f.wake()
	return nil
}

func (f *fakeReplicas) UpdateISR(topic string, id api.TopicID, p int, epoch uint32, isr []string, minISR int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.call("isr %s/%d epoch %d isr %v min %d", topic, p, epoch, isr, minISR)
	f.part(id, p).isr = slices.Clone(isr)
	return nil
}

func (f *fakeReplicas) AppendReplica(ctx context.Context, topic string, id api.TopicID, p int, batches [][]byte, leaderHW uint64) (engine.ReplicaState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.part(id, p)
	if l.leader {
		return engine.ReplicaState{}, api.NewError(api.CodeNotLeader, "a leader takes no replica appends")
	}
	for _, b := range batches {
		var off uint64
		var epoch uint32
		if _, err := fmt.Sscanf(string(b), "%d:%d", &off, &epoch); err != nil {
			return engine.ReplicaState{}, err
		}
		if off != uint64(len(l.epochs)) {
			return engine.ReplicaState{}, api.NewError(api.CodeOffsetOutOfRange, "batch at %d, log end %d", off, len(l.epochs))
		}
		l.epochs = append(l.epochs, epoch)
	}
	l.hw = max(l.hw, min(leaderHW, uint64(len(l.epochs))))
	return f.position(l), nil
}

func (f *fakeReplicas) position(l *fakeReplicaLog) engine.ReplicaState {
	n := uint64(len(l.epochs))
	return engine.ReplicaState{LogEndOffset: n, DurableEndOffset: n, HighWatermark: l.hw, LeaderEpoch: l.epoch, Leader: l.leader, Corrupt: l.corrupt}
}

func (f *fakeReplicas) TruncateTo(topic string, id api.TopicID, p int, offset uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.part(id, p)
	f.call("truncate %s/%d to %d", topic, p, offset)
	if offset > uint64(len(l.epochs)) {
		return api.NewError(api.CodeOffsetOutOfRange, "truncate to %d beyond %d", offset, len(l.epochs))
	}
	l.epochs = l.epochs[:offset]
	l.hw = min(l.hw, offset)
	return nil
}

func (f *fakeReplicas) TruncateFullyAndStartAt(topic string, id api.TopicID, p int, offset uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.call("truncate fully %s/%d start %d", topic, p, offset)
	return api.NewError(api.CodeInvalidRequest, "the fake log starts at 0")
}

// FollowLogStart: the fake log always starts at 0 and never deletes.
func (f *fakeReplicas) FollowLogStart(topic string, id api.TopicID, p int, leaderStart uint64) (int, error) {
	return 0, nil
}

func (f *fakeReplicas) ReplicaState(topic string, id api.TopicID, p int) (engine.ReplicaState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.position(f.part(id, p)), nil
}

// cache is the epoch cache of l; f.mu is held.
func (l *fakeReplicaLog) cache() *replica.EpochCache {
	var c replica.EpochCache
	for off, e := range l.epochs {
		c.Assign(e, uint64(off))
	}
	return &c
}

func (f *fakeReplicas) LocalEpochs(topic string, id api.TopicID, p int) (*replica.EpochCache, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.part(id, p).cache(), nil
}

func (f *fakeReplicas) ISRProposals(now time.Time) []engine.ISRProposal {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.propose
	f.propose = nil
	return out
}

// fakeReplicaConn is a follower's connection to the fake storage of a
// leader node.
type fakeReplicaConn struct {
	leader *fakeReplicas
	closed chan struct{}
	once   sync.Once
}

func (c *fakeReplicaConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *fakeReplicaConn) FetchReplica(ctx context.Context, r engine.ReplicaFetch) (ReplicaFetched, error) {
	f := c.leader
	for {
		f.mu.Lock()
		l := f.part(r.TopicID, r.Partition)
		switch {
		case !l.leader:
			f.mu.Unlock()
			return ReplicaFetched{}, api.NewError(api.CodeNotLeader, "%s does not lead", f.node)
		case r.LeaderEpoch < l.epoch:
			f.mu.Unlock()
			return ReplicaFetched{}, api.NewError(api.CodeFencedLeaderEpoch, "epoch %d < %d", r.LeaderEpoch, l.epoch)
		case r.LeaderEpoch > l.epoch:
			f.mu.Unlock()
			return ReplicaFetched{}, api.NewError(api.CodeUnknownLeaderEpoch, "epoch %d > %d", r.LeaderEpoch, l.epoch)
		case r.FetchOffset > uint64(len(l.epochs)):
			f.mu.Unlock()
			return ReplicaFetched{}, api.NewError(api.CodeOffsetOutOfRange, "offset %d beyond %d", r.FetchOffset, len(l.epochs))
		}
		res := ReplicaFetched{LeaderEpoch: l.epoch, HighWatermark: min(r.FetchOffset, uint64(len(l.epochs)))}
		for off := r.FetchOffset; off < uint64(len(l.epochs)); off++ {
			res.Batches = append(res.Batches, fmt.Appendf(nil, "%d:%d", off, l.epochs[off]))
		}
		wait := f.notify
		f.mu.Unlock()
		if len(res.Batches) > 0 {
			return res, nil
		}
		t := time.NewTimer(r.MaxWait)
		select {
		case <-wait:
			t.Stop()
		case <-t.C:
			return res, nil
		case <-ctx.Done():
			t.Stop()
			return ReplicaFetched{}, ctx.Err()
		case <-c.closed:
			t.Stop()
			return ReplicaFetched{}, fmt.Errorf("connection closed")
		}
	}
}

func (c *fakeReplicaConn) EndOffsetForEpoch(ctx context.Context, topic string, id api.TopicID, p int, epoch uint32) (uint32, uint64, error) {
	f := c.leader
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.part(id, p)
	if !l.leader {
		return 0, 0, api.NewError(api.CodeNotLeader, "%s does not lead", f.node)
	}
	e, end, ok := l.cache().EndOffsetFor(epoch, uint64(len(l.epochs)))
	if !ok {
		return epoch, 0, nil
	}
	return e, end, nil
}

// replicaRig is three nodes of a fakeMeta, each with a fakeReplicas and a
// Replicator whose connections reach the other nodes' fake storage.
type replicaRig struct {
	m      *fakeMeta
	stores map[string]*fakeReplicas
	reps   map[string]*Replicator
}

func newReplicaRig(t *testing.T, nodes ...string) *replicaRig {
	g := &replicaRig{m: newFakeMeta(t, nodes...), stores: map[string]*fakeReplicas{}, reps: map[string]*Replicator{}}
	for _, n := range nodes {
		g.stores[n] = newFakeReplicas(n)
	}
	dial := func(ctx context.Context, addr string) (ReplicaConn, error) {
		node, _, _ := strings.Cut(addr, ":")
		s := g.stores[node]
		if s == nil {
			return nil, fmt.Errorf("dial %s: connection refused", addr)
		}
		return &fakeReplicaConn{leader: s, closed: make(chan struct{})}, nil
	}
	for _, n := range nodes {
		r := NewReplicator(g.stores[n], &fakeNode{m: g.m, id: n}, ReplicatorOptions{NodeID: n, Dial: dial, Logger: testLogger(t),
			ISRInterval: 20 * time.Millisecond, FetchMaxWait: 50 * time.Millisecond, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond})
		g.reps[n] = r
		g.m.mu.Lock()
		// A kick, not OnApply's pass: the fake runs its hooks with its
		// lock held, which a pass (State) takes again.
		g.m.hooks[n] = func(prev, next *meta.State) { r.Kick() }
		g.m.mu.Unlock()
		r.Start()
		t.Cleanup(func() { r.Close() })
	}
	return g
}

// TestReplicatorFollowsTheMetadata: the leader's storage is made leader,
// the others followers that copy its log; an ISR proposal is committed
// through set-isr and handed back with UpdateISR; after the leader dies
// the controller's choice leads with the next epoch and a follower with
// a divergent suffix truncates it before it copies the new leader's log.
func TestReplicatorFollowsTheMetadata(t *testing.T) {
	g := newReplicaRig(t, "n1", "n2", "n3")
	cmd := placed("orders", "")
	tp := cmd.Topic
	tp.Config.ReplicationFactor = 3
	tp.Partitions = []meta.Partition{{Replicas: []string{"n1", "n2", "n3"}, Leader: "n1", ISR: []string{"n1", "n2", "n3"}}}
	g.m.mustApply(t, cmd)
	id := tp.ID
	eventually(t, 5*time.Second, "roles given", func() bool {
		return len(g.stores["n1"].callsWith("leader orders/0 epoch 0 isr [n1 n2 n3] min 2")) == 1 &&
			len(g.stores["n2"].callsWith(`follower orders/0 epoch 0 of "n1"`)) == 1 &&
			len(g.stores["n3"].callsWith(`follower orders/0 epoch 0 of "n1"`)) == 1
	})
	g.stores["n1"].append(id, 0, 5)
	same := func(nodes ...string) func() bool {
		return func() bool {
			want := g.stores[nodes[0]].log(id, 0)
			for _, n := range nodes[1:] {
				if !slices.Equal(g.stores[n].log(id, 0), want) {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 5*time.Second, "followers copy the leader's log", same("n1", "n2", "n3"))

	// An ISR change the leader asks for is committed and handed back.
	g.stores["n1"].mu.Lock()
	g.stores["n1"].propose = []engine.ISRProposal{{Topic: "orders", ID: id, Partition: 0, Epoch: 0, ISR: []string{"n1", "n2"}}}
	g.stores["n1"].mu.Unlock()
	eventually(t, 5*time.Second, "the ISR change committed and passed back", func() bool {
		return slices.Equal(g.m.state0().Topics["orders"].Partitions[0].ISR, []string{"n1", "n2"}) &&
			len(g.stores["n1"].callsWith("isr orders/0 epoch 0 isr [n1 n2] min 2")) > 0
	})
	// A stale proposal is refused; the committed set is passed back.
	g.stores["n1"].mu.Lock()
	g.stores["n1"].propose = []engine.ISRProposal{{Topic: "orders", ID: id, Partition: 0, Epoch: 7, ISR: []string{"n1"}}}
	g.stores["n1"].mu.Unlock()
	before := len(g.stores["n1"].callsWith("isr orders/0"))
	eventually(t, 5*time.Second, "the committed set passed back after a refused proposal", func() bool {
		return len(g.stores["n1"].callsWith("isr orders/0 epoch 0 isr [n1 n2] min 2")) > before
	})

	// n3 holds a record of epoch 0 the others never got; n1 dies and n2
	// (in the ISR) leads epoch 1.
	g.stores["n3"].mu.Lock()
	l3 := g.stores["n3"].part(id, 0)
	l3.epochs = append(l3.epochs, 0)
	g.stores["n3"].mu.Unlock()
	g.m.setAlive("n1", false)
	changes := meta.LeadersAfterDeath(g.m.state0(), func(n string) bool { return n != "n1" })
	g.m.mustApply(t, meta.Command{Op: meta.OpSetLeaders, Leaders: changes})
	if p := g.m.state0().Topics["orders"].Partitions[0]; p.Leader != "n2" || p.LeaderEpoch != 1 {
		t.Fatalf("after the failover: %+v", p)
	}
	eventually(t, 5*time.Second, "n2 leads epoch 1", func() bool {
		return len(g.stores["n2"].callsWith("leader orders/0 epoch 1 isr [n2] min 2")) == 1
	})
	g.stores["n2"].append(id, 0, 3)
	eventually(t, 5*time.Second, "n3 truncated and copies n2", same("n2", "n3"))
	if got := g.stores["n3"].callsWith("truncate orders/0 to 5"); len(got) != 1 {
		t.Fatalf("n3's truncations: %v", g.stores["n3"].callsWith("truncate"))
	}
	if got := g.stores["n3"].log(id, 0); !slices.Equal(got, []uint32{0, 0, 0, 0, 0, 1, 1, 1}) {
		t.Fatalf("n3's log: %v", got)
	}

	// Deleting the topic stops the fetchers (the leak check of TestMain
	// sees any left).
	g.m.mustApply(t, meta.Command{Op: meta.OpDeleteTopic, Name: "orders", ID: id})
	eventually(t, 5*time.Second, "no role kept", func() bool {
		for _, r := range g.reps {
			r.mu.Lock()
			n := len(r.roles)
			r.mu.Unlock()
			if n != 0 {
				return false
			}
		}
		return true
	})
}

// TestReplicatorHandsOverADamagedLeader: a leader whose replica a scrub
// found damaged hands the partition to the first other alive in-sync
// replica, and follows it.
func TestReplicatorHandsOverADamagedLeader(t *testing.T) {
	g := newReplicaRig(t, "n1", "n2", "n3")
	cmd := placed("orders", "")
	tp := cmd.Topic
	tp.Config.ReplicationFactor = 3
	tp.Partitions = []meta.Partition{{Replicas: []string{"n1", "n2", "n3"}, Leader: "n1", ISR: []string{"n1", "n3"}}}
	g.m.mustApply(t, cmd)
	eventually(t, 5*time.Second, "n1 leads", func() bool {
		return len(g.stores["n1"].callsWith("leader orders/0 epoch 0")) == 1
	})
	g.stores["n1"].mu.Lock()
	g.stores["n1"].part(tp.ID, 0).corrupt = true
	g.stores["n1"].mu.Unlock()
	eventually(t, 5*time.Second, "n3 (the other in-sync replica) leads epoch 1, n1 follows it", func() bool {
		p := g.m.state0().Topics["orders"].Partitions[0]
		return p.Leader == "n3" && p.LeaderEpoch == 1 && slices.Equal(p.ISR, []string{"n3"}) &&
			len(g.stores["n1"].callsWith(`follower orders/0 epoch 1 of "n3"`)) == 1
	})
}

// TestReplicatorDamagedFollowerLeavesTheISR: a follower whose replica a
// scrub found damaged takes itself out of the in-sync set, so that no
// election chooses it.
func TestReplicatorDamagedFollowerLeavesTheISR(t *testing.T) {
	g := newReplicaRig(t, "n1", "n2", "n3")
	cmd := placed("orders", "")
	tp := cmd.Topic
	tp.Config.ReplicationFactor = 3
	tp.Partitions = []meta.Partition{{Replicas: []string{"n1", "n2", "n3"}, Leader: "n1", ISR: []string{"n1", "n2", "n3"}}}
	g.m.mustApply(t, cmd)
	eventually(t, 5*time.Second, "n2 follows", func() bool {
		return len(g.stores["n2"].callsWith(`follower orders/0 epoch 0 of "n1"`)) == 1
	})
	g.stores["n2"].mu.Lock()
	g.stores["n2"].part(tp.ID, 0).corrupt = true
	g.stores["n2"].mu.Unlock()
	eventually(t, 5*time.Second, "n2 out of the ISR, n1 still leading epoch 0", func() bool {
		p := g.m.state0().Topics["orders"].Partitions[0]
		return p.Leader == "n1" && p.LeaderEpoch == 0 && slices.Equal(p.ISR, []string{"n1", "n3"})
	})
}

// A connection is dialled again after a transport error or a call that
// timed out, not after an answer of the leader nor when the fetcher
// stops.
func TestReplicaConnPoolDropsBrokenConnections(t *testing.T) {
	dials := 0
	p := &connPoolR{conns: map[string]*pooledConn{}, dial: func(ctx context.Context, addr string) (ReplicaConn, error) {
		dials++
		return &fakeReplicaConn{closed: make(chan struct{})}, nil
	}}
	defer p.close()
	ctx := context.Background()
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	c, err := p.get(ctx, "a:1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		drop bool
	}{
		{ctx, api.NewError(api.CodeNotLeader, "not the leader"), false},
		{stopped, context.Canceled, false},
		{ctx, fmt.Errorf("replica connection broken: %w", io.EOF), true},
		{ctx, context.DeadlineExceeded, true},
	} {
		p.failed(tc.ctx, "a:1", c, tc.err)
		again, err := p.get(ctx, "a:1")
		if err != nil {
			t.Fatal(err)
		}
		if dropped := again != c; dropped != tc.drop {
			t.Fatalf("after %v: dropped %v, want %v", tc.err, dropped, tc.drop)
		}
		c = again
	}
	if dials != 3 {
		t.Fatalf("%d dials, want 3", dials)
	}
}
