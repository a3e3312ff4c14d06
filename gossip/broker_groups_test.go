package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

// PeerConn implements Cluster for the fake: a connection to the gRPC
// address node registered, unless the node is marked unreachable.
func (n *fakeNode) PeerConn(node string) (grpc.ClientConnInterface, error) {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	if n.m.unreachable[node] {
		return nil, fmt.Errorf("dial node %s: connection refused", node)
	}
	addr := n.m.state.Nodes[node].GRPCAddr
	if c, ok := n.m.grpcConns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	n.m.grpcConns[addr] = c
	return c, nil
}

// groupNode is a test node whose Broker is served by a real control
// plane on loopback, so that group calls are forwarded over gRPC.
type groupNode struct {
	*testNode
	id   string
	srv  *control.Server
	addr string
}

// newGroupCluster starts nodes ids on one fake metadata log, each with its
// control plane's gRPC listener registered as its address.
func newGroupCluster(t *testing.T, ids ...string) (*fakeMeta, map[string]*groupNode) {
	t.Helper()
	m := newFakeMeta(t)
	lns := map[string]net.Listener{}
	for _, id := range ids {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[id] = ln
		m.alive[id] = true
		m.mustApply(t, meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: id, DataAddr: id + ":6064", GRPCAddr: ln.Addr().String()}})
	}
	nodes := map[string]*groupNode{}
	for _, id := range ids {
		n := &groupNode{testNode: newTestNode(t, m, id, "", true), id: id, addr: lns[id].Addr().String()}
		srv, err := control.New(control.Options{NodeID: id, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		srv.SetEngine(n.b)
		n.srv = srv
		done := make(chan struct{})
		go func() { _ = srv.ServeGRPC(lns[id]); close(done) }()
		srv.SetReady(true)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
			<-done
		})
		nodes[id] = n
	}
	return m, nodes
}

// offsetsLeader returns the coordinator of group in s: the leader of its
// partition of the offsets topic ("" without the topic).
func offsetsLeader(s *meta.State, group string) string {
	t := s.Topics[engine.OffsetsTopic]
	if t == nil {
		return ""
	}
	return t.Partitions[engine.OffsetsPartition(group, len(t.Partitions))].Leader
}

// groupCounts counts the groups each node coordinates in s.
func groupCounts(s *meta.State, groups []string) map[string]int {
	out := map[string]int{}
	for _, g := range groups {
		out[offsetsLeader(s, g)]++
	}
	return out
}

// groupLedBy returns a group name, with prefix, whose coordinator in s
// is (or, with not, is not) node.
func groupLedBy(t *testing.T, s *meta.State, prefix, node string, not bool) string {
	t.Helper()
	for i := range 1000 {
		g := fmt.Sprintf("%s%d", prefix, i)
		if (offsetsLeader(s, g) == node) != not {
			return g
		}
	}
	t.Fatalf("no group coordinated by %s (not %v)", node, not)
	return ""
}

// coordinatorNode returns the node that coordinates group and one that
// does not.
func coordinatorNode(t *testing.T, m *fakeMeta, nodes map[string]*groupNode, group string) (coord, other *groupNode) {
	t.Helper()
	owner := offsetsLeader(m.state0(), group)
	if owner == "" {
		t.Fatalf("group %q has no coordinator", group)
	}
	ids := make([]string, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if id != owner {
			return nodes[owner], nodes[id]
		}
	}
	return nodes[owner], nil
}

// TestOffsetsTopicCreatedOnFirstUse: reading a group does not create the
// offsets topic; the first join does, once even when every node joins at
// once, and the group's coordinator is the leader of its partition. The
// topic is hidden from the topic list.
func TestOffsetsTopicCreatedOnFirstUse(t *testing.T) {
	m, nodes := newGroupCluster(t, "n1", "n2", "n3")
	m.mustApply(t, placed("t", "n1", "n1", "n2", "n3"))
	n1 := nodes["n1"]
	if _, err := n1.b.DescribeGroup("g"); codeOf(err) != api.CodeUnknownGroup {
		t.Fatalf("describe of a new group: %v, want UNKNOWN_GROUP", err)
	}
	if offs, err := n1.b.FetchOffsets("g", ""); err != nil || len(offs) != 0 {
		t.Fatalf("offsets of a new group: %v, %v", offs, err)
	}
	if _, err := n1.b.Heartbeat("g", "m-1", 1, nil); codeOf(err) != api.CodeFencedGeneration {
		t.Fatalf("heartbeat to a new group: %v, want FENCED_GENERATION", err)
	}
	if err := n1.b.DeleteGroup("g"); codeOf(err) != api.CodeUnknownGroup {
		t.Fatalf("delete of a new group: %v, want UNKNOWN_GROUP", err)
	}
	if _, err := n1.b.JoinGroup(strings.Repeat("x", 256), "", "c", []string{"t"}, 0); codeOf(err) != api.CodeInvalidRequest {
		t.Fatalf("join with a bad group id: %v, want INVALID_REQUEST", err)
	}
	if m.state0().Topics[engine.OffsetsTopic] != nil || m.count(meta.OpCreateTopic) != 1 {
		t.Fatalf("reads created the offsets topic: %d topics created", m.count(meta.OpCreateTopic))
	}
	res, err := nodes["n2"].b.JoinGroup("g", "", "c", []string{"t"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ot := m.state0().Topics[engine.OffsetsTopic]
	if ot == nil || len(ot.Partitions) != DefaultOffsetsTopicPartitions || ot.Config.ReplicationFactor != 3 || ot.Config.RetentionMs != -1 {
		t.Fatalf("after the first join the offsets topic is %+v", ot)
	}
	for _, n := range nodes {
		for _, ti := range n.b.ListTopics() {
			if ti.Name == engine.OffsetsTopic {
				t.Fatalf("%s lists the offsets topic", n.id)
			}
		}
	}
	coord, _ := coordinatorNode(t, m, nodes, "g")
	d, err := coord.eng.DescribeGroup("g")
	if err != nil || len(d.Members) != 1 || d.Members[0].MemberID != res.MemberID {
		t.Fatalf("the coordinator's engine holds %+v, %v; want the member %s", d, err, res.MemberID)
	}
	// Every node joins a new group at once: one coordinator, one group.
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		wg.Go(func() {
			_, err := n.b.JoinGroup("race", "", n.id, []string{"t"}, time.Second)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	d, err = n1.b.DescribeGroup("race")
	if err != nil || len(d.Members) != 3 {
		t.Fatalf("group joined from 3 nodes at once: %+v, %v; want 3 members", d, err)
	}
	if n := m.count(meta.OpCreateTopic); n != 2 {
		t.Fatalf("%d topics created, want t and the offsets topic once", n)
	}
}

// TestGroupForwardedToCoordinator: members connected to different nodes
// share one group at its coordinator: they split the partitions, and a
// commit made through one node is read through every node, while only
// the coordinator's storage holds it.
func TestGroupForwardedToCoordinator(t *testing.T) {
	m, nodes := newGroupCluster(t, "n1", "n2", "n3")
	m.mustApply(t, placed("t", "n1", "n1", "n2", "n3", "n1", "n2", "n3"))
	if _, err := nodes["n1"].b.CommitOffsets("g", "", -1, []engine.OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	coord, other := coordinatorNode(t, m, nodes, "g")
	third := nodes["n1"]
	for _, n := range nodes {
		if n != coord && n != other {
			third = n
		}
	}
	a, err := other.b.JoinGroup("g", "", "a", []string{"t"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := third.b.JoinGroup("g", "", "b", []string{"t"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Heartbeats through each member's node until both hold three
	// partitions and none twice.
	var owned [2]engine.GroupAssignment
	deadline := time.Now().Add(5 * time.Second)
	for {
		ra, err := other.b.Heartbeat("g", a.MemberID, a.Generation, owned[0])
		if err != nil {
			t.Fatal(err)
		}
		rb, err := third.b.Heartbeat("g", b.MemberID, b.Generation, owned[1])
		if err != nil {
			t.Fatal(err)
		}
		a, b = ra, rb
		owned[0], owned[1] = ra.Assignment, rb.Assignment
		if len(ra.Assignment["t"]) == 3 && len(rb.Assignment["t"]) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("assignments did not settle: %v and %v", ra.Assignment, rb.Assignment)
		}
	}
	seen := map[int]bool{}
	for _, p := range append(append([]int(nil), owned[0]["t"]...), owned[1]["t"]...) {
		if seen[p] {
			t.Fatalf("partition %d held by both members: %v %v", p, owned[0], owned[1])
		}
		seen[p] = true
	}
	// A member's commit through its node, of a partition it holds.
	p := owned[0]["t"][0]
	res, err := other.b.CommitOffsets("g", a.MemberID, a.Generation, []engine.OffsetCommit{{Topic: "t", Partition: p, Offset: 0, Metadata: "from a"}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("commit through %s: %+v, %v", other.id, res, err)
	}
	// A partition the member does not hold: the entry is fenced.
	res, err = other.b.CommitOffsets("g", a.MemberID, a.Generation, []engine.OffsetCommit{{Topic: "t", Partition: owned[1]["t"][0], Offset: 0}})
	if err != nil || codeOf(res[0].Err) != api.CodeFencedGeneration {
		t.Fatalf("commit of another member's partition: %+v, %v; want the entry FENCED_GENERATION", res, err)
	}
	for _, n := range nodes {
		offs, err := n.b.FetchOffsets("g", "t")
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, o := range offs {
			found = found || (o.Partition == p && o.Metadata == "from a")
		}
		if !found {
			t.Fatalf("offsets through %s: %+v; want the commit of partition %d", n.id, offs, p)
		}
		d, err := n.b.DescribeGroup("g")
		if err != nil || len(d.Members) != 2 || d.Summary.State != engine.GroupStable {
			t.Fatalf("describe through %s: %+v, %v", n.id, d.Summary, err)
		}
		local, _ := n.eng.FetchOffsets("g", "")
		if (n == coord) != (len(local) > 0) {
			t.Fatalf("node %s's own storage holds %+v (coordinator %s)", n.id, local, coord.id)
		}
	}
	// A stale generation is fenced by the coordinator, through any node.
	if _, err := third.b.CommitOffsets("g", b.MemberID, b.Generation-1, nil); codeOf(err) != api.CodeFencedGeneration {
		t.Fatalf("stale commit: %v, want FENCED_GENERATION", err)
	}
	if err := other.b.LeaveGroup("g", a.MemberID); err != nil {
		t.Fatal(err)
	}
	if d, _ := coord.b.DescribeGroup("g"); len(d.Members) != 1 {
		t.Fatalf("after a leave through %s: %d members", other.id, len(d.Members))
	}
}

// TestGroupCoordinatorNotAvailable: while a group's coordinator is dead,
// unreachable or stopped, its calls through other nodes fail with
// COORDINATOR_NOT_AVAILABLE (retriable), and work again once it is back.
func TestGroupCoordinatorNotAvailable(t *testing.T) {
	m, nodes := newGroupCluster(t, "n1", "n2")
	m.mustApply(t, placed("t", "n1", "n1", "n2"))
	if _, err := nodes["n1"].b.CommitOffsets("g", "", -1, []engine.OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	coord, other := coordinatorNode(t, m, nodes, "g")
	calls := map[string]func() error{
		"join":     func() error { _, err := other.b.JoinGroup("g", "", "c", []string{"t"}, time.Second); return err },
		"commit":   func() error { _, err := other.b.CommitOffsets("g", "", -1, nil); return err },
		"offsets":  func() error { _, err := other.b.FetchOffsets("g", ""); return err },
		"describe": func() error { _, err := other.b.DescribeGroup("g"); return err },
		"reset":    func() error { _, err := other.b.ResetOffsets("g", "t", engine.ResetEarliest, 0); return err },
		"delete":   func() error { return other.b.DeleteGroup("g") },
	}
	check := func(why string) {
		t.Helper()
		for name, call := range calls {
			err := call()
			if !errors.Is(err, api.ErrCoordinatorNotAvailable) || !api.IsRetriable(err) || !strings.Contains(err.Error(), coord.id) {
				t.Errorf("%s with the coordinator %s: %v, want COORDINATOR_NOT_AVAILABLE naming it", name, why, err)
			}
		}
	}
	m.setAlive(coord.id, false)
	check("dead")
	m.setAlive(coord.id, true)
	m.mu.Lock()
	m.unreachable[coord.id] = true
	m.mu.Unlock()
	check("not dialable")
	m.mu.Lock()
	m.unreachable[coord.id] = false
	m.mu.Unlock()
	if _, err := other.b.FetchOffsets("g", ""); err != nil {
		t.Fatalf("with the coordinator back: %v", err)
	}
	// Its gRPC plane stops: the transport's failure is
	// COORDINATOR_NOT_AVAILABLE too.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = coord.srv.Shutdown(ctx)
	check("stopped")
	// Nothing moved the group elsewhere meanwhile.
	if got := offsetsLeader(m.state0(), "g"); got != coord.id {
		t.Fatalf("coordinator moved to %q", got)
	}
}

// TestForwardedCallNotCoordinator: a call carrying the forwarded header
// that reaches a node which does not coordinate the group is answered
// COORDINATOR_NOT_AVAILABLE there, never forwarded again, and assigns
// nothing.
func TestForwardedCallNotCoordinator(t *testing.T) {
	m, nodes := newGroupCluster(t, "n1", "n2")
	m.mustApply(t, placed("t", "n1", "n1", "n2"))
	if _, err := nodes["n1"].b.CommitOffsets("g", "", -1, []engine.OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	coord, other := coordinatorNode(t, m, nodes, "g")
	conn, err := grpc.NewClient(other.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := &remoteGroups{conn: conn, node: other.id, timeout: 5 * time.Second}
	fresh := groupLedBy(t, m.state0(), "fresh", other.id, true)
	for name, call := range map[string]func() error{
		"join":     func() error { _, err := r.JoinGroup("g", "", "c", []string{"t"}, time.Second); return err },
		"commit":   func() error { _, err := r.CommitOffsets("g", "", -1, nil); return err },
		"offsets":  func() error { _, err := r.FetchOffsets("g", ""); return err },
		"describe": func() error { _, err := r.DescribeGroup("g"); return err },
		"new":      func() error { _, err := r.JoinGroup(fresh, "", "c", []string{"t"}, time.Second); return err },
	} {
		err := call()
		if !errors.Is(err, api.ErrCoordinatorNotAvailable) || !strings.Contains(err.Error(), "not the coordinator") {
			t.Errorf("forwarded %s at %s: %v, want COORDINATOR_NOT_AVAILABLE (not the coordinator)", name, other.id, err)
		}
	}
	if d, _ := coord.eng.DescribeGroup("g"); len(d.Members) != 0 {
		t.Fatalf("a forwarded call was forwarded again: the coordinator has %d members", len(d.Members))
	}
	// A group whose partition's leadership moves to this node, which it
	// has not applied yet (the forwarding node applied it first), is
	// served once it has.
	late := groupLedBy(t, m.state0(), "late", other.id, true)
	ot := m.state0().Topics[engine.OffsetsTopic]
	lp := engine.OffsetsPartition(late, len(ot.Partitions))
	joined := make(chan error, 1)
	go func() {
		_, err := r.JoinGroup(late, "", "c", []string{"t"}, time.Second)
		joined <- err
	}()
	m.mustApply(t, meta.Command{Op: meta.OpSetLeaders, Leaders: []meta.LeaderChange{{Topic: engine.OffsetsTopic, ID: ot.ID, Partition: lp, Leader: other.id, Epoch: ot.Partitions[lp].LeaderEpoch}}})
	if err := <-joined; err != nil {
		t.Fatalf("forwarded join of a group whose coordinator moved here meanwhile: %v", err)
	}
	// Without the header the same node forwards it.
	cl := sqv1.NewGroupsClient(conn)
	if _, err := cl.DescribeGroup(context.Background(), &sqv1.DescribeGroupRequest{Group: "g"}); err != nil {
		t.Fatalf("a client's describe through %s: %v", other.id, err)
	}
	// Sent to the coordinator with the header, it is served there.
	ctx := metadata.AppendToOutgoingContext(context.Background(), GroupForwardedHeader, "1")
	cc, err := grpc.NewClient(coord.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := sqv1.NewGroupsClient(cc).DescribeGroup(ctx, &sqv1.DescribeGroupRequest{Group: "g"}); err != nil {
		t.Fatalf("forwarded describe at the coordinator: %v", err)
	}
}

// TestGroupListAlikeOnEveryNode: every node lists the groups of every
// coordinator alike; a dead coordinator's groups are left out alike.
func TestGroupListAlikeOnEveryNode(t *testing.T) {
	m, nodes := newGroupCluster(t, "n1", "n2", "n3")
	m.mustApply(t, placed("t", "n1", "n1", "n2", "n3"))
	// The first commit creates the offsets topic; then two groups
	// coordinated by each node, and one with a member.
	all := []string{"g0"}
	for i := range 6 {
		g := "g0"
		if i > 0 {
			g = groupLedBy(t, m.state0(), fmt.Sprintf("g%d-", i), fmt.Sprintf("n%d", 1+i%3), false)
			all = append(all, g)
		}
		if _, err := nodes[fmt.Sprintf("n%d", 1+i%3)].b.CommitOffsets(g, "", -1, []engine.OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}); err != nil {
			t.Fatal(err)
		}
	}
	live := groupLedBy(t, m.state0(), "live", "n2", false)
	all = append(all, live)
	if _, err := nodes["n2"].b.JoinGroup(live, "", "c", []string{"t"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if counts := groupCounts(m.state0(), all); len(counts) != 3 || counts["n1"] == 0 || counts["n2"] == 0 || counts["n3"] == 0 {
		t.Fatalf("7 groups are not spread over the 3 nodes: %v", counts)
	}
	want := nodes["n1"].b.ListGroups()
	if len(want) != 7 {
		t.Fatalf("n1 lists %+v, want 7 groups", want)
	}
	for _, gs := range want {
		if (gs.Group == live) != (gs.State == engine.GroupStable) || (gs.Group == live) != (gs.Members == 1) {
			t.Fatalf("listed %+v", gs)
		}
	}
	for _, n := range nodes {
		if got := n.b.ListGroups(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s lists %+v, n1 %+v", n.id, got, want)
		}
		if local := n.b.LocalGroups().ListGroups(); len(local) != groupCounts(m.state0(), all)[n.id] {
			t.Fatalf("%s coordinates %d groups, its local list %+v", n.id, groupCounts(m.state0(), all)[n.id], local)
		}
	}
	m.setAlive("n3", false)
	got := nodes["n1"].b.ListGroups()
	if !reflect.DeepEqual(got, nodes["n2"].b.ListGroups()) || len(got) != 7-groupCounts(m.state0(), all)["n3"] {
		t.Fatalf("with n3 dead: n1 %+v, n2 %+v", got, nodes["n2"].b.ListGroups())
	}
	for _, gs := range got {
		if offsetsLeader(m.state0(), gs.Group) == "n3" {
			t.Fatalf("with n3 dead: %+v listed (coordinator n3)", gs)
		}
	}
}

// TestGroupOffsetsFromLeaders: a group's lag is computed from each
// partition's leader, wherever the coordinator is; a partition whose
// leader is dead has unknown lag, and a reset needing it is refused.
func TestGroupOffsetsFromLeaders(t *testing.T) {
	m, nodes := newGroupCluster(t, "n1", "n2", "n3")
	m.mustApply(t, placed("t", "n1", "n1", "n2", "n3"))
	for p, id := range []string{"n1", "n2", "n3"} {
		for range p + 1 {
			if _, err := nodes[id].b.Append(context.Background(), "t", p, mkBatch(t, "a", "b")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Partition p holds 2(p+1) records; the group committed 1 in each.
	var in []engine.OffsetCommit
	for p := range 3 {
		in = append(in, engine.OffsetCommit{Topic: "t", Partition: p, Offset: 1})
	}
	res, err := nodes["n2"].b.CommitOffsets("g", "", -1, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("commit of partition %d: %v", r.Partition, r.Err)
		}
	}
	coord, _ := coordinatorNode(t, m, nodes, "g")
	for _, n := range nodes {
		d, err := n.b.DescribeGroup("g")
		if err != nil || len(d.Offsets) != 3 {
			t.Fatalf("describe through %s: %+v, %v", n.id, d, err)
		}
		for _, l := range d.Offsets {
			hw := uint64(2 * (l.Partition + 1))
			if l.HighWatermark != hw || l.Lag != int64(hw-1) {
				t.Fatalf("through %s (coordinator %s): %+v, want HW %d and lag %d from the leader", n.id, coord.id, l, hw, hw-1)
			}
		}
	}
	// Only the coordinator exports the group's lag, from the leaders.
	for _, n := range nodes {
		lags := groupLagMetric(t, n, "g")
		if n == coord && (len(lags) != 3 || lags["2"] != 5) {
			t.Fatalf("the coordinator %s exports lags %v, want 3 partitions, partition 2 at 5", n.id, lags)
		}
		if n != coord && len(lags) != 0 {
			t.Fatalf("node %s, not the coordinator, exports lags %v", n.id, lags)
		}
	}
	// The leader of a partition other than the coordinator dies.
	dead := "n1"
	if coord.id == dead {
		dead = "n2"
	}
	deadPart := map[string]int{"n1": 0, "n2": 1}[dead]
	m.setAlive(dead, false)
	d, err := coord.b.DescribeGroup("g")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range d.Offsets {
		if (l.Partition == deadPart) != (l.Lag == engine.LagUnknown) {
			t.Fatalf("with %s dead: %+v, want lag %d only for partition %d", dead, l, engine.LagUnknown, deadPart)
		}
	}
	if _, err := coord.b.ResetOffsets("g", "t", engine.ResetLatest, 0); !errors.Is(err, api.ErrLeaderNotAvailable) {
		t.Fatalf("reset with a leader dead: %v, want LEADER_NOT_AVAILABLE", err)
	}
	m.setAlive(dead, true)
	out, err := nodes[dead].b.ResetOffsets("g", "t", engine.ResetLatest, 0)
	if err != nil || len(out) != 3 || out[2].Offset != 6 {
		t.Fatalf("reset to latest through %s: %+v, %v; want the leaders' high watermarks", dead, out, err)
	}
}

// TestClampOffsetsOnlyLedPartitions: a node restarted with the deferred
// clamp keeps the committed offsets of partitions it does not lead, and
// ClampLedOffsets lowers only those of the partitions it leads.
func TestClampOffsetsOnlyLedPartitions(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2")
	dir := t.TempDir()
	n1 := newTestNode(t, m, "n1", dir, true)
	newTestNode(t, m, "n2", "", true)
	// Both partitions led by n2, with n1 a replica of partition 0.
	c := placed("t", "n2", "n2", "n2")
	c.Topic.Partitions[0].Replicas = []string{"n2", "n1"}
	c.Topic.Partitions[0].ISR = []string{"n2", "n1"}
	c.Topic.Config.ReplicationFactor = 2
	c.Topic.Partitions[1].Replicas = []string{"n2", "n1"}
	c.Topic.Partitions[1].ISR = []string{"n2", "n1"}
	m.mustApply(t, c)
	m.mustApply(t, placed(engine.OffsetsTopic, "n1", "n1")) // n1 coordinates every group
	// n1 leads neither: the offsets are stored unchecked.
	if _, err := n1.b.CommitOffsets("g", "", -1, []engine.OffsetCommit{{Topic: "t", Partition: 0, Offset: 9}, {Topic: "t", Partition: 1, Offset: 7}}); err != nil {
		t.Fatal(err)
	}
	// Partition 0, without data, moves to n1.
	tp := m.state0().Topics["t"]
	m.mustApply(t, meta.Command{Op: meta.OpSetLeaders, Leaders: []meta.LeaderChange{{Topic: "t", ID: tp.ID, Partition: 0, Leader: "n1", Epoch: tp.Partitions[0].LeaderEpoch}}})
	if err := n1.eng.Close(); err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(engine.Options{DataDir: dir, SegmentBytes: 64 << 10, MaxBatchBytes: 32 << 10, PreallocBytes: 16 << 10,
		DeferOffsetClamp: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rec := NewReconciler(e, ReconcilerOptions{NodeID: "n1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	b := NewBroker(e, &fakeNode{m: m, id: "n1"}, rec, BrokerOptions{})
	offsets := func() [2]uint64 {
		got, err := b.FetchOffsets("g", "t")
		if err != nil || len(got) != 2 {
			t.Fatalf("offsets: %+v, %v", got, err)
		}
		return [2]uint64{got[0].Offset, got[1].Offset}
	}
	if got := offsets(); got != [2]uint64{9, 7} {
		t.Fatalf("after a restart with the deferred clamp: %v, want 9 and 7 as committed", got)
	}
	if n := b.ClampLedOffsets(); n != 1 {
		t.Fatalf("ClampLedOffsets lowered %d offsets, want 1", n)
	}
	if got := offsets(); got != [2]uint64{0, 7} {
		t.Fatalf("after ClampLedOffsets: %v, want partition 0 (led here, empty) at 0 and partition 1 kept at 7", got)
	}
}

// groupLagMetric returns node n's sq_consumer_group_lag_records of group,
// by partition.
func groupLagMetric(t *testing.T, n *groupNode, group string) map[string]float64 {
	t.Helper()
	mfs, err := n.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sq_consumer_group_lag_records" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["group"] == group {
				out[labels["partition"]] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestDeletedGroupGone deletes a group through a node that does not
// coordinate it: the coordinator deletes it, and a later use makes it
// anew.
func TestDeletedGroupGone(t *testing.T) {
	m, nodes := newGroupCluster(t, "n1", "n2", "n3")
	m.mustApply(t, placed("t", "n1", "n1", "n2", "n3"))
	if _, err := nodes["n1"].b.CommitOffsets("g", "", -1, []engine.OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	coord, other := coordinatorNode(t, m, nodes, "g")
	if err := other.b.DeleteGroup("g"); err != nil {
		t.Fatalf("delete through %s: %v", other.id, err)
	}
	if _, err := coord.b.Storage.DescribeGroup("g"); codeOf(err) != api.CodeUnknownGroup {
		t.Fatalf("the coordinator %s still has the group: %v", coord.id, err)
	}
	if err := other.b.DeleteGroup("g"); codeOf(err) != api.CodeUnknownGroup {
		t.Fatalf("second delete: %v, want UNKNOWN_GROUP", err)
	}
	if _, err := other.b.CommitOffsets("g", "", -1, []engine.OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	if offs, err := coord.b.Storage.FetchOffsets("g", ""); err != nil || len(offs) != 1 {
		t.Fatalf("the group used again: %+v, %v", offs, err)
	}
}
