package gossip

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
	"github.com/seedqueue/sq/internal/testutil"
)

// clusterServer adapts a Node to sqv1.ClusterServer (Join, Propose,
// RemoveNode), as the control plane does.
type clusterServer struct {
	sqv1.UnimplementedClusterServer
	node atomic.Pointer[Node]
}

func (s *clusterServer) get() (*Node, error) {
	n := s.node.Load()
	if n == nil {
		return nil, status.Error(codes.Unavailable, "node starting")
	}
	return n, nil
}

func (s *clusterServer) Join(ctx context.Context, r *sqv1.JoinRequest) (*sqv1.JoinResponse, error) {
	n, err := s.get()
	if err != nil {
		return nil, err
	}
	resp, err := n.Join(ctx, r)
	return resp, control.ToStatus(err)
}

func (s *clusterServer) Propose(ctx context.Context, r *sqv1.ProposeRequest) (*sqv1.ProposeResponse, error) {
	n, err := s.get()
	if err != nil {
		return nil, err
	}
	resp, err := n.Propose(ctx, r.Command)
	return resp, control.ToStatus(err)
}

func (s *clusterServer) RemoveNode(ctx context.Context, r *sqv1.RemoveNodeRequest) (*sqv1.RemoveNodeResponse, error) {
	n, err := s.get()
	if err != nil {
		return nil, err
	}
	resp, err := n.RemoveNode(ctx, r.NodeId)
	return resp, control.ToStatus(err)
}

// clusterNode is a Node with its gRPC server.
type clusterNode struct {
	*Node
	srv  *grpc.Server
	addr string
	dir  string
}

// testOptions are options with timings short enough for tests on
// loopback.
func testOptions(t *testing.T, id, dir string) Options {
	return Options{
		NodeID: id, ClusterID: "test", DataDir: dir,
		HeartbeatTimeout: 400 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond,
		LeaderLeaseTimeout: 200 * time.Millisecond, ControllerInterval: 200 * time.Millisecond,
		ProposeTimeout: 5 * time.Second, RemovalProbeAfter: 2 * time.Second,
		Logger: testLogger(t),
		Memberlist: func(c *memberlist.Config) {
			c.ProbeInterval = 200 * time.Millisecond
			c.ProbeTimeout = 100 * time.Millisecond
			c.GossipInterval = 50 * time.Millisecond
			c.PushPullInterval = time.Second
			c.SuspicionMult = 2
			c.TCPTimeout = time.Second
		},
	}
}

// startTestNode starts a gRPC server and a Node behind it; mod adjusts
// the options. The node is closed at the end of the test.
func startTestNode(t *testing.T, o Options) (*clusterNode, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &clusterServer{}
	srv := grpc.NewServer()
	sqv1.RegisterClusterServer(srv, cs)
	go func() { _ = srv.Serve(ln) }()
	o.GRPCAddr = ln.Addr().String()
	o.DataAddr = ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := Start(ctx, o)
	if err != nil {
		srv.Stop()
		return nil, err
	}
	cs.node.Store(n)
	tn := &clusterNode{Node: n, srv: srv, addr: o.GRPCAddr, dir: o.DataDir}
	t.Cleanup(func() { tn.stop(t) })
	return tn, nil
}

func mustStart(t *testing.T, o Options) *clusterNode {
	t.Helper()
	n, err := startTestNode(t, o)
	if err != nil {
		t.Fatalf("start %s: %v", o.NodeID, err)
	}
	return n
}

// stop closes the node and its server; idempotent.
func (n *clusterNode) stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Errorf("close %s: %v", n.ID(), err)
	}
	n.srv.Stop()
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, d, what, cond)
}

func waitReady(t *testing.T, nodes ...*clusterNode) {
	t.Helper()
	for _, n := range nodes {
		eventually(t, 20*time.Second, n.ID()+" ready", func() bool { return n.Ready() == nil })
	}
}

// startCluster starts n nodes: the first bootstraps, the others join
// through it.
func startCluster(t *testing.T, count int) []*clusterNode {
	t.Helper()
	first := mustStart(t, testOptions(t, "n1", t.TempDir()))
	nodes := []*clusterNode{first}
	for i := 2; i <= count; i++ {
		o := testOptions(t, "n"+string(rune('0'+i)), t.TempDir())
		o.Seeds = []string{first.addr}
		nodes = append(nodes, mustStart(t, o))
	}
	waitReady(t, nodes...)
	for _, n := range nodes {
		eventually(t, 20*time.Second, n.ID()+" sees every member alive", func() bool {
			for _, m := range nodes {
				if !n.Alive(m.ID()) || n.memberState(m.ID()) != StateAlive {
					return false
				}
			}
			return len(n.State().Nodes) == len(nodes)
		})
	}
	return nodes
}

func createCmd(name string, partitions int) meta.Command {
	return meta.Command{Op: meta.OpCreateTopic, Topic: &meta.Topic{
		Name: name, Config: engine.TopicConfig{ReplicationFactor: 0}, Partitions: make([]meta.Partition, partitions),
	}}
}

// sameState waits until every node has applied the same log: topic name
// present, equal applied index and hash.
func sameState(t *testing.T, topic string, nodes ...*clusterNode) {
	t.Helper()
	eventually(t, 20*time.Second, "the same metadata on every node", func() bool {
		h, idx := nodes[0].State().Hash(), nodes[0].AppliedIndex()
		for _, n := range nodes {
			if _, ok := n.State().Topics[topic]; !ok || n.State().Hash() != h || n.AppliedIndex() != idx {
				return false
			}
		}
		return true
	})
}

func controllerOf(nodes []*clusterNode) *clusterNode {
	for _, n := range nodes {
		if n.raft.State() == raft.Leader {
			return n
		}
	}
	return nil
}

func TestClusterProposeAndFailover(t *testing.T) {
	nodes := startCluster(t, 3)
	var follower *clusterNode
	eventually(t, 10*time.Second, "a controller", func() bool { return controllerOf(nodes) != nil })
	for _, n := range nodes {
		if n.raft.State() != raft.Leader {
			follower = n
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := follower.ProposeCommand(ctx, createCmd("orders", 6))
	if err != nil || res.Err != nil {
		t.Fatalf("create on follower %s: %v %v", follower.ID(), err, res.Err)
	}
	if _, ok := follower.State().Topics["orders"]; !ok {
		t.Fatal("the proposing node has not applied its create when Propose returned")
	}
	tp := follower.State().Topics["orders"]
	if tp.Config.ReplicationFactor != 3 || len(tp.Partitions) != 6 || tp.ID.IsZero() {
		t.Fatalf("created topic %+v: want rf 3 (min(3, live)), 6 partitions, an id", tp)
	}
	sameState(t, "orders", nodes...)
	checkMembersAndInfo(t, nodes)
	res, err = follower.ProposeCommand(ctx, createCmd("orders", 1))
	if err != nil || res.Err == nil || !strings.Contains(res.Err.Error(), "TOPIC_EXISTS") {
		t.Fatalf("second create: %v, %v: want TOPIC_EXISTS in the result", err, res.Err)
	}

	old := controllerOf(nodes)
	old.stop(t)
	var rest []*clusterNode
	for _, n := range nodes {
		if n != old {
			rest = append(rest, n)
		}
	}
	eventually(t, 20*time.Second, "a new controller", func() bool {
		c := controllerOf(rest)
		return c != nil && c != old
	})
	res, err = rest[0].ProposeCommand(ctx, createCmd("after", 2))
	if err != nil || res.Err != nil {
		t.Fatalf("create with 2 of 3: %v %v", err, res.Err)
	}
	sameState(t, "after", rest...)
	for _, n := range rest {
		eventually(t, 20*time.Second, "the old controller dead or left", func() bool { return !n.Alive(old.ID()) })
	}
}

// crash stops the node as a kill -9 would for its peers: no leadership
// transfer, no gossip leave.
func (n *clusterNode) crash(t *testing.T) {
	n.closeOnce.Do(func() {
		n.closing.Store(true)
		n.loopStop()
		n.loopDone.Wait()
		n.closeErr = n.shutdown(context.Background(), false)
	})
	n.srv.Stop()
}

func TestCrashedNodeLosesEmptyPartitionsAndRestarts(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if res, err := nodes[0].ProposeCommand(ctx, createCmd("empty", 6)); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	sameState(t, "empty", nodes...)
	eventually(t, 10*time.Second, "a controller", func() bool { return controllerOf(nodes) != nil })
	var victim *clusterNode
	for _, n := range nodes {
		if n != controllerOf(nodes) {
			victim = n
		}
	}
	before := nodes[0].State().Topics["empty"]
	victim.crash(t)
	var rest []*clusterNode
	for _, n := range nodes {
		if n != victim {
			rest = append(rest, n)
		}
	}
	eventually(t, 20*time.Second, "the partitions of the dead node moved by the controller", func() bool {
		for _, n := range rest {
			if n.memberState(victim.ID()) != StateDead || n.State().Leaderless(n.Alive) != 0 {
				return false
			}
			for _, p := range n.State().Topics["empty"].Partitions {
				if p.Leader == victim.ID() {
					return false
				}
			}
		}
		return true
	})
	for i, p := range rest[0].State().Topics["empty"].Partitions {
		if was := before.Partitions[i]; was.Leader == victim.ID() && p.LeaderEpoch != was.LeaderEpoch+1 {
			t.Errorf("partition %d moved from %s to %s with epoch %d, was %d", i, was.Leader, p.Leader, p.LeaderEpoch, was.LeaderEpoch)
		}
	}

	// Restarted with its data directory at new addresses (port 0).
	o := testOptions(t, victim.ID(), victim.dir)
	o.Seeds = []string{rest[0].addr}
	back := mustStart(t, o)
	waitReady(t, back)
	eventually(t, 20*time.Second, "the restarted node alive at its new addresses everywhere", func() bool {
		for _, n := range rest {
			m := n.State().Nodes[victim.ID()]
			if n.memberState(victim.ID()) != StateAlive || m.GossipAddr != back.gossipAddr || m.RaftAddr != back.raftAddr {
				return false
			}
		}
		return true
	})
	if res, err := back.ProposeCommand(ctx, createCmd("again", 3)); err != nil || res.Err != nil {
		t.Fatalf("create on the restarted node: %v %v", err, res.Err)
	}
	sameState(t, "again", append(rest, back)...)
}

// checkMembersAndInfo checks the Members and Info answers of every node of
// a settled cluster: every node alive and a voter, one controller, the
// same applied index and hash everywhere.
func checkMembersAndInfo(t *testing.T, nodes []*clusterNode) {
	t.Helper()
	ctx := context.Background()
	var hash string
	for _, n := range nodes {
		mr, err := n.Members(ctx)
		if err != nil || mr.ClusterId != "test" || len(mr.Members) != len(nodes) {
			t.Fatalf("%s: members %v, %v", n.ID(), mr, err)
		}
		controllers, selves := 0, 0
		for _, m := range mr.Members {
			if m.State != StateAlive || !m.Voter || m.GrpcAddress == "" || m.GossipAddress == "" || m.RaftAddress == "" {
				t.Errorf("%s: member %v", n.ID(), m)
			}
			if m.Controller {
				controllers++
			}
			if m.Self {
				selves++
				if m.NodeId != n.ID() {
					t.Errorf("%s: self is %s", n.ID(), m.NodeId)
				}
			}
		}
		if controllers != 1 || selves != 1 {
			t.Errorf("%s: %d controllers, %d selves", n.ID(), controllers, selves)
		}
		info, err := n.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if hash == "" {
			hash = info.MetadataHash
		}
		if info.MetadataHash != hash || info.AppliedIndex != nodes[0].AppliedIndex() || !info.Ready || info.ControllerId == "" ||
			info.MemberCount != int32(len(nodes)) || info.VoterCount != int32(len(nodes)) || info.TopicCount != 1 || info.PartitionCount != 6 ||
			info.LeaderlessPartitions != 0 || info.RaftTerm == 0 || info.CommitIndex < info.AppliedIndex || info.NodeId != n.ID() {
			t.Errorf("%s: info %v", n.ID(), info)
		}
	}
}

// TestRaftTransportDoesNotPipeline: the Raft transport sends a follower
// one AppendEntries at a time (raftMaxRPCsInFlight): hashicorp/raft's
// pipeline can deadlock after a follower refuses an append, leaving that
// follower without log entries and the node unable to shut down.
func TestRaftTransportDoesNotPipeline(t *testing.T) {
	n := mustStart(t, testOptions(t, "n1", t.TempDir()))
	if _, err := n.trans.AppendEntriesPipeline("n2", "127.0.0.1:1"); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline: %v, want raft.ErrPipelineReplicationNotSupported", err)
	}
}
