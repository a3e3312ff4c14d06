package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
)

// fakeCluster is a control.ClusterBackend of three nodes; err, when set,
// is every change's answer.
type fakeCluster struct {
	err     error
	removed []string
	orphans []string // Info's orphaned topics
}

func (f *fakeCluster) Members(context.Context) (*sqv1.MembersResponse, error) {
	return &sqv1.MembersResponse{ClusterId: "prod", Members: []*sqv1.Member{
		{NodeId: "c", State: "dead", GrpcAddress: "10.0.0.3:6060", CapnpAddress: "10.0.0.3:6064", GossipAddress: "10.0.0.3:6066", RaftAddress: "10.0.0.3:6067"},
		{NodeId: "a", State: "alive", Voter: true, Controller: true, Self: true, GrpcAddress: "10.0.0.1:6060", CapnpAddress: "10.0.0.1:6064",
			GossipAddress: "10.0.0.1:6066", RaftAddress: "10.0.0.1:6067", HttpAddress: "10.0.0.1:8080"},
		{NodeId: "b", State: "suspect", Voter: true, GrpcAddress: "10.0.0.2:6060", CapnpAddress: "10.0.0.2:6064", GossipAddress: "10.0.0.2:6066", RaftAddress: "10.0.0.2:6067"},
	}}, nil
}

func (f *fakeCluster) Info(context.Context) (*sqv1.ClusterInfoResponse, error) {
	return &sqv1.ClusterInfoResponse{ClusterId: "prod", NodeId: "a", ControllerId: "a", RaftState: "leader", RaftTerm: 4,
		AppliedIndex: 41, CommitIndex: 42, LastLogIndex: 43, MetadataHash: "9f86d08", MemberCount: 3, VoterCount: 2,
		TopicCount: 1, PartitionCount: 6, LeaderlessPartitions: 2, Ready: true, OrphanedTopics: f.orphans}, nil
}

func (f *fakeCluster) RemoveNode(_ context.Context, id string) (*sqv1.RemoveNodeResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.removed = append(f.removed, id)
	return &sqv1.RemoveNodeResponse{MovedPartitions: 2}, nil
}

func (f *fakeCluster) Join(context.Context, *sqv1.JoinRequest) (*sqv1.JoinResponse, error) {
	return nil, f.err
}

func (f *fakeCluster) Propose(context.Context, []byte) (*sqv1.ProposeResponse, error) {
	return nil, f.err
}

func (f *fakeCluster) Ready() error { return nil }

// startClusterControl is startControl with backend as the node's cluster.
func startClusterControl(t *testing.T, backend control.ClusterBackend) string {
	t.Helper()
	quietLog := func() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
	srv, err := control.New(control.Options{NodeID: "a", ClusterID: "prod", Version: "cli-test", Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), Logger: quietLog(), Observer: srv.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetCluster(backend)
	srv.SetEngine(eng)
	srv.SetReady(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.ServeGRPC(ln); close(done) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-done
		eng.Close()
	})
	return ln.Addr().String()
}

// wantLines fails unless out holds each of want, in order.
func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("output lacks %q (in order):\n%s", w, out)
		}
		rest = rest[i+len(w):]
	}
}

func TestClusterMembers(t *testing.T) {
	addr := startClusterControl(t, &fakeCluster{})
	out, err := runSQ(t, nil, "--control", addr, "cluster", "members")
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by id; every column of every member.
	wantLines(t, out,
		"ID", "STATE", "VOTER", "CONTROLLER", "GRPC", "DATA", "GOSSIP", "RAFT",
		"a (this node)", "alive", "yes", "yes", "10.0.0.1:6060", "10.0.0.1:6064", "10.0.0.1:6066", "10.0.0.1:6067",
		"b", "suspect", "yes", "no", "10.0.0.2:6060",
		"c", "dead", "no", "no", "10.0.0.3:6060", "10.0.0.3:6064", "10.0.0.3:6066", "10.0.0.3:6067")

	out, err = runSQ(t, nil, "--control", addr, "cluster", "members", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	doc, keys := jsonKeys(t, out)
	if strings.Join(keys, ",") != "cluster_id,members" || doc["cluster_id"] != "prod" {
		t.Fatalf("members json:\n%s", out)
	}
	ms := doc["members"].([]any)
	first := ms[0].(map[string]any)
	if len(ms) != 3 || first["node_id"] != "a" || first["controller"] != true || first["http_address"] != "10.0.0.1:8080" ||
		strings.Join(sortedKeys(first), ",") != "capnp_address,controller,drained,gossip_address,grpc_address,http_address,node_id,raft_address,self,state,voter" {
		t.Fatalf("members json:\n%s", out)
	}
}

func TestClusterInfoShowsTheMetadataState(t *testing.T) {
	addr := startClusterControl(t, &fakeCluster{})
	out, err := runSQ(t, nil, "--control", addr, "cluster", "info")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "Node:", "a", "Controller:", "a", "Raft:", "leader, term 4", "Metadata log:", "applied 41, committed 42, last 43",
		"Metadata hash:", "9f86d08", "Members:", "3 (2 voters)", "Partitions:", "6 in 1 topic, 2 leaderless", "Ready:", "yes",
		"ID", "CONTROLLER", "a (this node)")
	out, err = runSQ(t, nil, "--control", addr, "cluster", "info", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := jsonKeys(t, out)
	if doc["applied_index"] != 41.0 || doc["commit_index"] != 42.0 || doc["metadata_hash"] != "9f86d08" || doc["controller_id"] != "a" ||
		doc["raft_state"] != "leader" || doc["raft_term"] != 4.0 || doc["leaderless_partitions"] != 2.0 || len(doc["members"].([]any)) != 3 {
		t.Fatalf("cluster info json:\n%s", out)
	}
}

// cluster info lists the node's orphaned topics (in its data directory,
// unknown to the metadata) in both formats; none: no line, and [] in
// JSON.
func TestClusterInfoShowsOrphanedTopics(t *testing.T) {
	addr := startClusterControl(t, &fakeCluster{orphans: []string{"legacy", "old-orders"}})
	out, err := runSQ(t, nil, "--control", addr, "cluster", "info")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "Ready:", "yes", "Orphaned topics:", "legacy, old-orders", "unknown to the cluster metadata", "ID")
	out, err = runSQ(t, nil, "--control", addr, "cluster", "info", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := jsonKeys(t, out)
	if got, ok := doc["orphaned_topics"].([]any); !ok || len(got) != 2 || got[0] != "legacy" || got[1] != "old-orders" {
		t.Fatalf("orphaned_topics in:\n%s", out)
	}

	addr = startClusterControl(t, &fakeCluster{})
	out, err = runSQ(t, nil, "--control", addr, "cluster", "info")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "Orphaned topics:") {
		t.Fatalf("an Orphaned line without orphaned topics:\n%s", out)
	}
	out, err = runSQ(t, nil, "--control", addr, "cluster", "info", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ = jsonKeys(t, out)
	if got, ok := doc["orphaned_topics"].([]any); !ok || len(got) != 0 {
		t.Fatalf("orphaned_topics without any, want []:\n%s", out)
	}
}

func TestClusterRemoveNode(t *testing.T) {
	fc := &fakeCluster{}
	addr := startClusterControl(t, fc)
	out, err := runSQ(t, nil, "--control", addr, "cluster", "remove-node", "c")
	if err != nil {
		t.Fatal(err)
	}
	if out != "removed node c from the cluster; leadership of 2 partitions moved to other replicas\n" || len(fc.removed) != 1 || fc.removed[0] != "c" {
		t.Fatalf("remove-node: %q (backend removed %v)", out, fc.removed)
	}
	fc.err = api.NewError(api.CodeNoQuorum, "no Raft majority: 1 of 3 voters reachable")
	if _, err := runSQ(t, nil, "--control", addr, "cluster", "remove-node", "b"); err == nil ||
		err.Error() != "cannot remove node b: NO_QUORUM: no Raft majority: 1 of 3 voters reachable" {
		t.Fatalf("remove-node without quorum: %v", err)
	}
	for _, args := range [][]string{{"cluster", "remove-node"}, {"cluster", "remove-node", "a", "b"}} {
		if _, err := runSQ(t, nil, append([]string{"--control", addr}, args...)...); err == nil ||
			!strings.Contains(err.Error(), "sq cluster remove-node takes exactly one node ID") {
			t.Fatalf("%v: %v", args, err)
		}
	}
	// A node outside a cluster says so.
	single := startControl(t)
	if _, err := runSQ(t, nil, "--control", single, "cluster", "remove-node", "b"); err == nil ||
		!strings.Contains(err.Error(), "cannot remove node b: Cluster.RemoveNode: the node at "+single+" answers: this node is not part of a cluster") {
		t.Fatalf("remove-node on a single node: %v", err)
	}
	// The single node's info and members describe it alone.
	out, err = runSQ(t, nil, "--control", single, "cluster", "members")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "cli-node (this node)", "alive", "yes", "yes")
}

// placedBroker is an engine in a cluster of three nodes as the data plane
// sees it: every partition is led by node b, replicated on b and c.
type placedBroker struct{ *engine.Engine }

func (p placedBroker) Nodes() []api.Node {
	return []api.Node{{ID: "a", Alive: true}, {ID: "b", Alive: true}, {ID: "c", Alive: true}}
}

func (p placedBroker) ClusterID() string { return "prod" }

func (p placedBroker) DescribeTopic(name string) (engine.TopicInfo, error) {
	ti, err := p.Engine.DescribeTopic(name)
	ti.Config.ReplicationFactor = 2
	for i := range ti.Partitions {
		ti.Partitions[i].Leader, ti.Partitions[i].LeaderEpoch = "b", 7
		ti.Partitions[i].Replicas, ti.Partitions[i].ISR = []string{"b", "c"}, []string{"b"}
	}
	return ti, err
}

func TestTopicPlacementAndReplicationFactor(t *testing.T) {
	bare := serveEngine(t, func(e *engine.Engine) dataplane.Broker { return e })
	out, err := runSQ(t, nil, "--server", bare, "topic", "describe", "orders")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "Replication factor:", "1", "PARTITION", "STATUS", "LEADER", "EPOCH", "REPLICAS", "ISR",
		"0", "ok", "cli-node", "0", "cli-node", "cli-node", "1", "ok", "cli-node")

	// One node holds one replica.
	if _, err := runSQ(t, nil, "--server", bare, "topic", "create", "x", "--replication-factor", "3"); err == nil ||
		err.Error() != "INVALID_CONFIG: replication factor 3 exceeds the 1 node(s) of this cluster" {
		t.Fatalf("rf 3 on one node: %v", err)
	}
	out, err = runSQ(t, nil, "--server", bare, "topic", "create", "x", "--partitions", "2", "--replication-factor", "1", "--retention-ms", "60000")
	if err != nil || out != "created topic x with 2 partitions, replication factor 1\n" {
		t.Fatalf("create rf 1: %q, %v", out, err)
	}
	out, err = runSQ(t, nil, "--server", bare, "topic", "describe", "x")
	if err != nil || !strings.Contains(out, "1m") {
		t.Fatalf("the created topic lacks its retention: %v\n%s", err, out)
	}
	if _, err := runSQ(t, nil, "--server", bare, "topic", "create", "y", "--replication-factor", "-1"); err == nil ||
		!strings.Contains(err.Error(), "--replication-factor -1: want at least 1") {
		t.Fatalf("rf -1: %v", err)
	}
	if _, err := runSQ(t, nil, "--server", bare, "topic", "create", "x", "--replication-factor", "1"); err == nil ||
		!strings.HasPrefix(err.Error(), "TOPIC_EXISTS: ") {
		t.Fatalf("create an existing topic with rf: %v", err)
	}

	placed := serveEngine(t, func(e *engine.Engine) dataplane.Broker { return placedBroker{e} })
	out, err = runSQ(t, nil, "--server", placed, "topic", "describe", "orders")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "Replication factor:", "2", "LEADER", "EPOCH", "REPLICAS", "ISR", "0", "ok", "b", "7", "b,c", "b", "1", "ok", "b", "7", "b,c")
	out, err = runSQ(t, nil, "--server", placed, "topic", "describe", "orders", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := jsonKeys(t, out)
	p0 := doc["partitions"].([]any)[0].(map[string]any)
	if doc["replication_factor"] != 2.0 || p0["leader"] != "b" || p0["leader_epoch"] != 7.0 ||
		len(p0["replicas"].([]any)) != 2 || len(p0["isr"].([]any)) != 1 {
		t.Fatalf("describe json:\n%s", out)
	}
}
