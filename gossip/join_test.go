package gossip

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/control"
)

func TestJoinRefusesAnotherClusterID(t *testing.T) {
	a := mustStart(t, testOptions(t, "a", t.TempDir()))
	waitReady(t, a)
	o := testOptions(t, "b", t.TempDir())
	o.ClusterID = "other"
	o.Seeds = []string{a.addr}
	_, err := startTestNode(t, o)
	if err == nil {
		t.Fatal("a node of another cluster joined")
	}
	for _, want := range []string{`"other"`, `"test"`, "cluster"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if len(a.State().Nodes) != 1 {
		t.Errorf("the refused node was registered: %v", a.State().Nodes)
	}
}

// TestJoinRefusesNodeIDWithAnotherDataDir: a node id the cluster
// registers with another data directory is refused, alive or down, and
// the node on its own data directory rejoins.
func TestJoinRefusesNodeIDWithAnotherDataDir(t *testing.T) {
	a := mustStart(t, testOptions(t, "a", t.TempDir()))
	ob := testOptions(t, "b", t.TempDir())
	ob.Seeds = []string{a.addr}
	b := mustStart(t, ob)
	waitReady(t, a, b)
	eventually(t, 10*time.Second, "b alive at a", func() bool { return a.memberState("b") == StateAlive })

	o := testOptions(t, "b", t.TempDir()) // the same id, another data directory
	o.Seeds = []string{a.addr}
	_, err := startTestNode(t, o)
	if err == nil {
		t.Fatal("a second node b joined while b is alive")
	}
	if !strings.Contains(err.Error(), "another data directory") || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("error %q does not say why", err)
	}
	if got := a.State().Nodes["b"].DataDirID; got != b.ident.DataDirID {
		t.Errorf("b's data dir id changed to %s", got)
	}

	// Down, b keeps its id: its partitions' records are in its own data
	// directory, and a process on an empty one would serve them empty.
	b.crash(t)
	eventually(t, 20*time.Second, "b dead at a", func() bool { return a.memberState("b") == StateDead })
	o = testOptions(t, "b", t.TempDir())
	o.Seeds = []string{a.addr}
	_, err = startTestNode(t, o)
	if err == nil {
		t.Fatal("a second node b joined while b was down")
	}
	if !strings.Contains(err.Error(), "registered in cluster") || !strings.Contains(err.Error(), "own data directory") {
		t.Errorf("error %q does not say why", err)
	}
	if got := a.State().Nodes["b"].DataDirID; got != b.ident.DataDirID {
		t.Errorf("b's data dir id changed to %s", got)
	}
	ob.Seeds = []string{a.addr}
	back := mustStart(t, ob) // b on its own data directory
	waitReady(t, back)
}

func TestRestartRejoinsWithTheSameID(t *testing.T) {
	a := mustStart(t, testOptions(t, "a", t.TempDir()))
	ob := testOptions(t, "b", t.TempDir())
	ob.Seeds = []string{a.addr}
	b := mustStart(t, ob)
	waitReady(t, a, b)
	dirID := b.ident.DataDirID
	b.stop(t)
	eventually(t, 10*time.Second, "b gone at a", func() bool { return !a.Alive("b") })

	b2 := mustStart(t, ob) // the same data directory, new ports
	waitReady(t, b2)
	if b2.ident.DataDirID != dirID {
		t.Fatalf("data dir id %s after restart, was %s", b2.ident.DataDirID, dirID)
	}
	eventually(t, 10*time.Second, "b alive again at a with its new addresses", func() bool {
		n := a.State().Nodes["b"]
		return a.memberState("b") == StateAlive && n.GRPCAddr == b2.addr && n.RaftAddr == b2.raftAddr
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := b2.ProposeCommand(ctx, createCmd("t", 2)); err != nil || res.Err != nil {
		t.Fatalf("create after the restart: %v %v", err, res.Err)
	}
	sameState(t, "t", a, b2)
}

func TestIdentityOfTheDataDir(t *testing.T) {
	dir := t.TempDir()
	a := mustStart(t, testOptions(t, "a", dir))
	waitReady(t, a)
	a.stop(t)
	for _, tc := range []struct {
		name, node, cluster string
		want                []string
	}{
		{"node id", "z", "test", []string{`"a"`, `"z"`, "--node-id"}},
		{"cluster id", "a", "prod", []string{`"test"`, `"prod"`, "--cluster-id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t, tc.node, dir)
			o.ClusterID = tc.cluster
			_, err := startTestNode(t, o)
			if err == nil {
				t.Fatal("started with another identity")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

func TestProposeWithoutQuorumIsNoQuorum(t *testing.T) {
	// The survivor's ProposeTimeout is set before it starts: its
	// goroutines read its options, so they are never changed once it runs.
	o := testOptions(t, "n1", t.TempDir())
	o.ProposeTimeout = 2 * time.Second
	survivor := mustStart(t, o)
	nodes := []*clusterNode{survivor}
	for _, id := range []string{"n2", "n3"} {
		o := testOptions(t, id, t.TempDir())
		o.Seeds = []string{survivor.addr}
		nodes = append(nodes, mustStart(t, o))
	}
	waitReady(t, nodes...)
	eventually(t, 20*time.Second, "the survivor registered every node", func() bool { return len(survivor.State().Nodes) == len(nodes) })
	for _, n := range nodes[1:] {
		n.stop(t)
	}
	_, err := survivor.ProposeCommand(context.Background(), createCmd("t", 1))
	if !api.IsRetriable(err) || api.AsError(err).Code != api.CodeNoQuorum {
		t.Fatalf("propose on a minority: %v, want NO_QUORUM", err)
	}
	// The retried error (itself NO_QUORUM) is wrapped without repeating
	// its code, locally and on the wire.
	for _, text := range []string{err.Error(), api.AsError(err).WireText()} {
		if n := strings.Count(text, "NO_QUORUM"); n != 1 || !strings.Contains(text, "not committed within") {
			t.Errorf("propose on a minority says %q: want NO_QUORUM once and the timeout", text)
		}
	}
}

func TestJoinersBeyondMaxVotersAreNonvoters(t *testing.T) {
	oa := testOptions(t, "a", t.TempDir())
	oa.MaxVoters = 1
	a := mustStart(t, oa)
	ob := testOptions(t, "b", t.TempDir())
	ob.Seeds = []string{a.addr}
	b := mustStart(t, ob)
	waitReady(t, a, b)
	mr, err := b.Members(context.Background())
	if err != nil || len(mr.Members) != 2 {
		t.Fatalf("members %v, %v", mr, err)
	}
	for _, m := range mr.Members {
		if m.Voter != (m.NodeId == "a") || m.Controller != (m.NodeId == "a") {
			t.Errorf("member %v: want a the only voter and the controller", m)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := b.ProposeCommand(ctx, createCmd("t", 2)); err != nil || res.Err != nil {
		t.Fatalf("create on a non-voter: %v %v", err, res.Err)
	}
	if got := b.State().Topics["t"].Config.ReplicationFactor; got != 2 {
		t.Errorf("replication factor %d, want min(3, 2 live nodes)", got)
	}
}

// A catalog error from a peer names its code once ("NO_QUORUM: ...", not
// "NO_QUORUM: NO_QUORUM: ..."), keeps its code and leader, and a join
// refused by a seed says which seed and why.
func TestPeerErrorsNameTheirCodeOnce(t *testing.T) {
	sent := api.NewError(api.CodeNotLeader, "node n2 is not the controller")
	sent.LeaderID = "n1"
	got := fromStatus(control.ToStatus(sent))
	e := api.AsError(got)
	if e.Code != api.CodeNotLeader || e.LeaderID != "n1" {
		t.Fatalf("decoded %#v", e)
	}
	if got.Error() != sent.Error() {
		t.Fatalf("decoded %q, sent %q", got, sent)
	}
	if strings.Count(got.Error(), "NOT_LEADER") != 1 {
		t.Fatalf("%q names its code more than once", got)
	}

	a := mustStart(t, testOptions(t, "a", t.TempDir()))
	waitReady(t, a)
	o := testOptions(t, "b", t.TempDir())
	o.ClusterID = "other"
	o.Seeds = []string{a.addr}
	_, err := startTestNode(t, o)
	if err == nil {
		t.Fatal("joined another cluster")
	}
	for _, w := range []string{a.addr, "--cluster-id", "INVALID_REQUEST"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %s", err, w)
		}
	}
	for _, twice := range []string{"INVALID_REQUEST: INVALID_REQUEST", "gossip: gossip:"} {
		if strings.Contains(err.Error(), twice) {
			t.Errorf("error %q repeats %q", err, twice)
		}
	}
}
