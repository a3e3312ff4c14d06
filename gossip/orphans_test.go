package gossip

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

// A node that joins a cluster that has no topic at all still finds the
// topics of its data directory that the metadata does not know: every
// applied command leaves the (empty) topics alike, and the first pass
// must run anyway. They are listed once, logged once and kept.
func TestReconcileOrphansInAClusterWithoutTopics(t *testing.T) {
	m := newFakeMeta(t, "n1")
	n := newTestNode(t, m, "n1", "", false)
	if got := n.rec.Orphaned(); got != nil {
		t.Fatalf("orphans before the first pass: %q", got)
	}
	for _, name := range []string{"b-old", "a-old"} {
		if _, err := n.eng.CreateTopic(name, 1, engine.TopicConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	prev := m.state0()
	m.mustApply(t, meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: "n2", DataAddr: "n2:6064", GRPCAddr: "n2:6060"}})
	n.rec.OnApply(prev, m.state0())
	if got := n.rec.Orphaned(); !slices.Equal(got, []string{"a-old", "b-old"}) {
		t.Fatalf("orphans %q, want a-old and b-old", got)
	}
	prev = m.state0()
	m.mustApply(t, meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: "n3", DataAddr: "n3:6064", GRPCAddr: "n3:6060"}})
	n.rec.OnApply(prev, m.state0())
	if got := strings.Count(n.logs.String(), "orphaned topic"); got != 2 {
		t.Errorf("%d log lines about orphaned topics, want one per topic:\n%s", got, n.logs.String())
	}
	for _, name := range []string{"a-old", "b-old"} {
		if _, err := n.eng.DescribeTopic(name); err != nil {
			t.Errorf("orphaned topic %s was not kept: %v", name, err)
		}
	}
	// Once the cluster creates a topic of that name it is no orphan of
	// another name; deleting the local copy empties the list.
	if err := n.eng.DeleteTopic("a-old"); err != nil {
		t.Fatal(err)
	}
	m.mustApply(t, placed("c", "n1", "n1"))
	n.rec.OnApply(nil, m.state0())
	if got := n.rec.Orphaned(); !slices.Equal(got, []string{"b-old"}) {
		t.Fatalf("orphans %q, want b-old", got)
	}
}

// Cluster.Info lists the node's orphaned topics.
func TestInfoReportsOrphanedTopics(t *testing.T) {
	dir := t.TempDir()
	eng := openEngine(t, t.TempDir())
	rec := NewReconciler(eng, ReconcilerOptions{NodeID: "a", Logger: testLogger(t)})
	o := testOptions(t, "a", dir)
	o.OnApply, o.OrphanedTopics = rec.OnApply, rec.Orphaned
	a := mustStart(t, o)
	waitReady(t, a)
	info := func() *sqv1.ClusterInfoResponse {
		r, err := a.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if got := info().OrphanedTopics; len(got) != 0 {
		t.Fatalf("orphans before any local topic: %q", got)
	}
	if _, err := eng.CreateTopic("stray", 2, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := a.ProposeCommand(ctx, createCmd("known", 1)); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	eventually(t, 10*time.Second, "the stray topic listed", func() bool {
		return slices.Equal(info().OrphanedTopics, []string{"stray"})
	})
}
