package gossip

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

// fakeMeta is a metadata log shared by fake nodes: Propose prepares a
// command as the controller does (gossip/meta's Prepare helpers), applies
// it to a copy of the State, publishes it and calls every node's OnApply
// hook in order, all under one lock, as a single Raft log would.
type fakeMeta struct {
	mu    sync.Mutex
	state *meta.State
	hooks map[string]func(prev, next *meta.State)
	alive map[string]bool
	// unreachable nodes answer no PeerDescribe.
	unreachable map[string]bool
	// lagFor[node] is how many more PeerDescribe calls node answers
	// UNKNOWN_TOPIC, as a node that has not applied the topic's creation
	// yet does.
	lagFor map[string]int
	peers  map[string]*Broker
	// proposeErr, when set, is returned by every Propose (NO_QUORUM).
	proposeErr error
	// gate, when set, is received from before a mark-data is applied.
	gate chan struct{}
	ops  map[meta.Op]int
	now  int64
	// grpcConns are the fake nodes' connections to their peers' gRPC
	// planes (PeerConn), closed at the end of the test.
	grpcConns map[string]*grpc.ClientConn
}

func newFakeMeta(t *testing.T, nodes ...string) *fakeMeta {
	m := &fakeMeta{state: meta.NewState(), hooks: map[string]func(prev, next *meta.State){}, alive: map[string]bool{},
		unreachable: map[string]bool{}, lagFor: map[string]int{}, peers: map[string]*Broker{}, ops: map[meta.Op]int{}, now: 1_000_000,
		grpcConns: map[string]*grpc.ClientConn{}}
	t.Cleanup(func() {
		for _, c := range m.grpcConns {
			c.Close()
		}
	})
	for _, n := range nodes {
		m.alive[n] = true
		m.mustApply(t, meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: n, DataAddr: n + ":6064", GRPCAddr: n + ":6060"}})
	}
	return m
}

// apply publishes c's outcome and runs the hooks; m.mu is held.
func (m *fakeMeta) apply(c meta.Command) meta.Result {
	next := m.state.Clone()
	res := next.Apply(c)
	if res.Err != nil {
		return res
	}
	prev := m.state
	m.state = next
	m.ops[c.Op]++
	names := make([]string, 0, len(m.hooks))
	for n := range m.hooks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		m.hooks[n](prev, next)
	}
	return res
}

func (m *fakeMeta) mustApply(t *testing.T, c meta.Command) meta.Result {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	res := m.apply(c)
	if res.Err != nil {
		t.Fatalf("apply %s: %v", c.Op, res.Err)
	}
	return res
}

func (m *fakeMeta) liveNodes() []string {
	var out []string
	for n, ok := range m.alive {
		if ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// prepare completes an unprepared command as the controller would.
func (m *fakeMeta) prepare(c meta.Command) (meta.Command, error) {
	switch c.Op {
	case meta.OpCreateTopic:
		m.now++
		return meta.PrepareCreate(m.state, c.Topic.Name, api.NewTopicID(), len(c.Topic.Partitions), c.Topic.Config, m.liveNodes(), m.now)
	case meta.OpCreatePartitions:
		t := m.state.Topics[c.Name]
		if t == nil || t.ID != c.ID {
			return c, api.NewError(api.CodeUnknownTopicID, "topic %q changed", c.Name)
		}
		return meta.PrepareCreatePartitions(m.state, c.Name, len(t.Partitions)+len(c.NewPartitions), m.liveNodes())
	}
	return c, nil
}

func (m *fakeMeta) state0() *meta.State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

func (m *fakeMeta) setAlive(node string, alive bool) {
	m.mu.Lock()
	m.alive[node] = alive
	m.mu.Unlock()
}

func (m *fakeMeta) count(op meta.Op) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops[op]
}

// fakeNode is one node's Cluster view of a fakeMeta.
type fakeNode struct {
	m  *fakeMeta
	id string
}

func (n *fakeNode) ID() string         { return n.id }
func (n *fakeNode) ClusterID() string  { return "test-cluster" }
func (n *fakeNode) State() *meta.State { return n.m.state0() }

func (n *fakeNode) Alive(id string) bool {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	return n.m.alive[id]
}

func (n *fakeNode) Nodes() []api.Node {
	s := n.State()
	var out []api.Node
	for _, x := range s.Nodes {
		out = append(out, api.Node{ID: x.ID, DataAddr: x.DataAddr, GRPCAddr: x.GRPCAddr, Alive: n.Alive(x.ID)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (n *fakeNode) Propose(ctx context.Context, c meta.Command) (meta.Result, error) {
	if c.Op == meta.OpMarkData {
		n.m.mu.Lock()
		g := n.m.gate
		n.m.mu.Unlock()
		if g != nil {
			select {
			case <-g:
			case <-ctx.Done():
				return meta.Result{}, ctx.Err()
			}
		}
	}
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	if n.m.proposeErr != nil {
		return meta.Result{}, n.m.proposeErr
	}
	c, err := n.m.prepare(c)
	if err != nil {
		if e := api.AsError(err); e != nil {
			return meta.Result{Err: e}, nil
		}
		return meta.Result{}, err
	}
	return n.m.apply(c), nil
}

func (n *fakeNode) PeerDescribe(ctx context.Context, node, topic string) (engine.TopicInfo, error) {
	n.m.mu.Lock()
	b, down, lag := n.m.peers[node], n.m.unreachable[node], n.m.lagFor[node] > 0
	if lag {
		n.m.lagFor[node]--
	}
	n.m.mu.Unlock()
	if b == nil || down {
		return engine.TopicInfo{}, fmt.Errorf("dial node %s: connection refused", node)
	}
	if lag {
		return engine.TopicInfo{}, api.NewError(api.CodeUnknownTopic, "topic %q does not exist (node %s lags)", topic, node)
	}
	return b.DescribeLocal(topic)
}

// testNode is one node: a real engine in a temporary directory, its
// Reconciler hooked to the fake log, and its Broker.
type testNode struct {
	eng  *engine.Engine
	rec  *Reconciler
	b    *Broker
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func openEngine(t *testing.T, dir string) *engine.Engine {
	t.Helper()
	e, err := engine.Open(engine.Options{DataDir: dir, SegmentBytes: 64 << 10, MaxBatchBytes: 32 << 10, PreallocBytes: 16 << 10,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// newTestNode starts node id on m with an engine in dir ("" for a new
// temporary directory); hooked says whether its reconciler follows the
// log from now on.
func newTestNode(t *testing.T, m *fakeMeta, id, dir string, hooked bool) *testNode {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	n := &testNode{eng: openEngine(t, dir), logs: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(n.logs, nil))
	n.rec = NewReconciler(n.eng, ReconcilerOptions{NodeID: id, Logger: log})
	n.b = NewBroker(n.eng, &fakeNode{m: m, id: id}, n.rec, BrokerOptions{Logger: log})
	m.mu.Lock()
	m.peers[id] = n.b
	if hooked {
		m.hooks[id] = n.rec.OnApply
		n.rec.OnApply(nil, m.state)
	}
	m.mu.Unlock()
	return n
}

// placed is a create-topic command for name with one partition per entry
// of leaders (each partition's only replica and leader; "" for a
// partition whose leader was lost: its replica is replica, leader none).
func placed(name string, replica string, leaders ...string) meta.Command {
	t := &meta.Topic{Name: name, ID: api.NewTopicID(), CreatedMs: 777}
	t.Config = engine.TopicConfig{SyncPolicy: "none", SegmentBytes: 64 << 10, RetentionBytes: -1, RetentionMs: 86400000,
		MaxRecordBytes: 1 << 20, SegmentMs: 86400000, ReplicationFactor: 1,
		LocalRetentionMs: engine.LocalRetentionDefault, LocalRetentionBytes: engine.LocalRetentionDefault}
	for _, l := range leaders {
		r := l
		if r == "" {
			r = replica
		}
		t.Partitions = append(t.Partitions, meta.Partition{Replicas: []string{r}, Leader: l, ISR: []string{r}})
	}
	return meta.Command{Op: meta.OpCreateTopic, Topic: t}
}

func mkBatch(t testing.TB, values ...string) []byte {
	t.Helper()
	var b batch.Builder
	for _, v := range values {
		b.Add(nil, []byte(v), nil, 1)
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func codeOf(err error) api.Code {
	if e := api.AsError(err); e != nil {
		return e.Code
	}
	if err != nil {
		return api.CodeUnknown
	}
	return api.CodeNone
}
