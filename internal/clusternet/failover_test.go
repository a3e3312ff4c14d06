package clusternet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/clusternet"
	"github.com/seedqueue/sq/internal/testutil"
)

// startIn runs sq-server with args in namespace ns, outside the harness's
// one-process-per-node bookkeeping, waits for its data plane and stops it
// (SIGTERM, then SIGKILL) when the test ends.
func startIn(t *testing.T, ns *clusternet.Namespace, args ...string) {
	t.Helper()
	cmd := ns.Command(context.Background(), bins.server, args...)
	log := testutil.NewLogBuffer()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("sq-server %v log:\n%s", args, tailOf(log.String(), 4000))
		}
	})
	eventually(t, "sq-server "+strings.Join(args, " ")+" listening", func() error {
		select {
		case <-done:
			return fmt.Errorf("exited: %s", tailOf(log.String(), 2000))
		default:
		}
		if !strings.Contains(log.String(), "data plane listening") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// partitionRow is one partition of `sq topic describe --format json`.
type partitionRow struct {
	Partition   int      `json:"partition"`
	Leader      string   `json:"leader"`
	LeaderEpoch uint32   `json:"leader_epoch"`
	Replicas    []string `json:"replicas"`
}

// describe returns the partitions of topic as node n describes them.
func describe(t *testing.T, c *clusternet.Cluster, n *clusternet.Node, topic string) ([]partitionRow, error) {
	t.Helper()
	r := runSQ(t, c.Client(), n.Addr, "", "--control", grpcAddr(n), "topic", "describe", topic, "--format", "json")
	if r.code != 0 {
		return nil, fmt.Errorf("describe on node %d: exit %d: %s", n.Index, r.code, r.stderr)
	}
	var out struct {
		Partitions []partitionRow `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		return nil, fmt.Errorf("describe output %q: %v", r.stdout, err)
	}
	return out.Partitions, nil
}

// TestControllerKilled kills the controller of a 3-node cluster with
// SIGKILL: the other two elect a new one, and topic creation keeps working
// with 2 of 3.
func TestControllerKilled(t *testing.T) {
	c := newCluster(t, 3)
	startCluster(t, c)
	var ctl int
	eventually(t, "one controller", func() (err error) { ctl, err = controllerOf(t, c, 1, 2, 3); return err })
	c.Node(ctl).Kill()
	var rest []int
	for i := 1; i <= 3; i++ {
		if i != ctl {
			rest = append(rest, i)
		}
	}
	var next int
	eventually(t, "a new controller", func() (err error) { next, err = controllerOf(t, c, rest...); return err })
	if next == ctl {
		t.Fatalf("controller is still node %d after its kill", ctl)
	}
	for _, i := range rest {
		n := c.Node(i)
		sqOK(t, c.Client(), n.Addr, "", "--control", grpcAddr(n), "topic", "create", fmt.Sprintf("after-kill-%d", i), "--partitions", "3")
	}
	waitAgree(t, c, rest...)
}

// TestMinorityCannotChangeMetadata splits a 3-node cluster 2 | 1: the
// minority node refuses a topic create with NO_QUORUM and its view of the
// leaders does not move; the majority keeps working; after healing all
// three agree on the metadata (applied index and hash).
func TestMinorityCannotChangeMetadata(t *testing.T) {
	c := newCluster(t, 3)
	startCluster(t, c)
	n1 := c.Node(1)
	sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "create", "before", "--partitions", "6", "--replication-factor", "3")
	waitAgree(t, c, 1, 2, 3)
	// The minority is node 3 unless it is the controller; then node 1.
	minority := 3
	if ctl, err := controllerOf(t, c, 1, 2, 3); err == nil && ctl == 3 {
		minority = 1
	}
	var majority []int
	for i := 1; i <= 3; i++ {
		if i != minority {
			majority = append(majority, i)
		}
	}
	m := c.Node(minority)
	before, err := describe(t, c, m, "before")
	if err != nil {
		t.Fatal(err)
	}
	c.Isolate(minority)
	eventually(t, "the minority refuses a create with NO_QUORUM", func() error {
		r := runSQ(t, c.Client(), m.Addr, "", "--control", grpcAddr(m), "topic", "create", "minority", "--partitions", "1")
		if r.code == 0 {
			return fmt.Errorf("the minority created a topic")
		}
		if !strings.Contains(r.stderr, "NO_QUORUM") {
			return fmt.Errorf("stderr %q lacks NO_QUORUM", r.stderr)
		}
		return nil
	})
	// The majority sees the minority dead and moves the (empty) partitions
	// it led; the minority's own view must not move.
	a := c.Node(majority[0])
	sqOK(t, c.Client(), a.Addr, "", "--control", grpcAddr(a), "topic", "create", "majority", "--partitions", "2")
	after, err := describe(t, c, m, "before")
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if after[i].Leader != before[i].Leader || after[i].LeaderEpoch != before[i].LeaderEpoch {
			t.Errorf("minority moved partition %d: %+v -> %+v", i, before[i], after[i])
		}
	}
	c.Heal()
	waitAgree(t, c, 1, 2, 3)
	if _, err := describe(t, c, m, "majority"); err != nil {
		t.Errorf("the healed minority lacks the majority's topic: %v", err)
	}
}

// TestLeaderChangesAreControllerDecisions kills a node that leads empty
// partitions: the controller moves each to a live replica with a bumped
// leader epoch, and every node describes the same leaders.
func TestLeaderChangesAreControllerDecisions(t *testing.T) {
	c := newCluster(t, 3)
	startCluster(t, c)
	n1 := c.Node(1)
	sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "create", "empty", "--partitions", "6", "--replication-factor", "3")
	waitAgree(t, c, 1, 2, 3)
	before, err := describe(t, c, n1, "empty")
	if err != nil {
		t.Fatal(err)
	}
	victim := 2
	if ctl, err := controllerOf(t, c, 1, 2, 3); err == nil && ctl == 2 {
		victim = 3
	}
	c.Node(victim).Kill()
	dead := fmt.Sprintf("node-%d", victim)
	var rest []int
	for i := 1; i <= 3; i++ {
		if i != victim {
			rest = append(rest, i)
		}
	}
	eventually(t, "partitions led by the killed node move", func() error {
		after, err := describe(t, c, c.Node(rest[0]), "empty")
		if err != nil {
			return err
		}
		for i, p := range after {
			switch {
			case before[i].Leader == dead && (p.Leader == dead || p.LeaderEpoch != before[i].LeaderEpoch+1):
				return fmt.Errorf("partition %d: %+v (was %+v)", i, p, before[i])
			case before[i].Leader != dead && (p.Leader != before[i].Leader || p.LeaderEpoch != before[i].LeaderEpoch):
				return fmt.Errorf("partition %d moved without cause: %+v (was %+v)", i, p, before[i])
			}
		}
		return nil
	})
	waitAgree(t, c, rest...)
	a, _ := describe(t, c, c.Node(rest[0]), "empty")
	b, _ := describe(t, c, c.Node(rest[1]), "empty")
	for i := range a {
		if a[i].Leader != b[i].Leader || a[i].LeaderEpoch != b[i].LeaderEpoch {
			t.Errorf("partition %d: node %d says %+v, node %d says %+v", i, rest[0], a[i], rest[1], b[i])
		}
	}
}
