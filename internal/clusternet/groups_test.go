package clusternet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// TestConsumerGroupAcrossNodes: two members of one group, connected to
// different nodes of a 3-node cluster, share the 6 partitions of a topic
// through the group's one coordinator; what they commit through their
// nodes is read through the third node, and every node describes the
// group alike.
func TestConsumerGroupAcrossNodes(t *testing.T) {
	c := newCluster(t, 3)
	startCluster(t, c)
	n1 := c.Node(1)
	sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "create", "grouped", "--partitions", "6", "--replication-factor", "3")
	waitAgree(t, c, 1, 2, 3)
	dial := sdk.DialFunc(c.Client().DialContext)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prod, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: c.Node(3).Addr, Dialer: dial, Partitioner: byKey})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	member := func(node int) *sdk.Consumer {
		cons, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: c.Node(node).Addr, Dialer: dial, Topic: "grouped",
			ConsumerGroup: "across", HeartbeatInterval: 100 * time.Millisecond, MaxWait: 100 * time.Millisecond})
		if err != nil {
			t.Fatalf("member through node %d: %v", node, err)
		}
		return cons
	}
	a, b := member(1), member(2)
	defer a.Close()
	defer b.Close()
	seen := map[string]int{}
	poll := func(cons *sdk.Consumer) {
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer pcancel()
		ms, err := cons.Poll(pctx)
		if err != nil && pctx.Err() == nil {
			t.Fatalf("Poll: %v", err)
		}
		for _, m := range ms {
			seen[string(m.Value)]++
		}
	}
	eventually(t, "the members to split the 6 partitions", func() error {
		poll(a)
		poll(b)
		pa, pb := a.Assignment(), b.Assignment()
		if len(pa) != 3 || len(pb) != 3 {
			return fmt.Errorf("assignments %v and %v", pa, pb)
		}
		for _, p := range pa {
			for _, q := range pb {
				if p == q {
					return fmt.Errorf("partition %d assigned to both: %v and %v", p, pa, pb)
				}
			}
		}
		return nil
	})
	// Records produced once the group is stable: each is read once, by
	// the member that holds its partition.
	all := []int{0, 1, 2, 3, 4, 5}
	for i := range 5 {
		produce(t, prod, "grouped", all, fmt.Sprint("r", i))
	}
	eventually(t, "the members to read the 30 records", func() error {
		poll(a)
		poll(b)
		if len(seen) != 30 {
			return fmt.Errorf("%d of 30 records read", len(seen))
		}
		return nil
	})
	for v, n := range seen {
		if n != 1 {
			t.Errorf("record %s read %d times", v, n)
		}
	}
	for _, cons := range []*sdk.Consumer{a, b} {
		if err := cons.Commit(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	// The commits, made through nodes 1 and 2, read through node 3, and
	// the group described alike by every node.
	type offset struct {
		Partition       int    `json:"partition"`
		CommittedOffset *int64 `json:"committed_offset"`
		Lag             *int64 `json:"lag"`
		MemberID        string `json:"member_id"`
	}
	var first string
	for _, n := range c.Nodes() {
		out := sqOK(t, c.Client(), n.Addr, "", "--control", grpcAddr(n), "group", "describe", "across", "--format", "json")
		var d struct {
			MemberCount int      `json:"member_count"`
			Offsets     []offset `json:"offsets"`
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("describe through node %d: %v\n%s", n.Index, err, out)
		}
		if d.MemberCount != 2 || len(d.Offsets) != 6 {
			t.Fatalf("describe through node %d: %s", n.Index, out)
		}
		for _, o := range d.Offsets {
			if o.CommittedOffset == nil || *o.CommittedOffset != 5 || o.Lag == nil || *o.Lag != 0 || o.MemberID == "" {
				t.Fatalf("through node %d, partition %d: %s", n.Index, o.Partition, out)
			}
		}
		if first == "" {
			first = out
		} else if strings.TrimSpace(out) != strings.TrimSpace(first) {
			t.Fatalf("node %d describes the group otherwise:\n%s\nnode 1:\n%s", n.Index, out, first)
		}
	}
	offs, err := func() ([]sdk.OffsetCommit, error) {
		cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: c.Node(3).Addr, Dialer: dial})
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		return cl.FetchOffsets(ctx, "across", "grouped")
	}()
	if err != nil || len(offs) != 6 {
		t.Fatalf("offsets through node 3: %+v, %v", offs, err)
	}
}

// TestGroupOffsetsSurviveCoordinatorFailover: a group's committed offsets
// are replicated in __sq_offsets. Each node in turn is killed with
// SIGKILL (one of them coordinates the group): through a live node the
// offsets committed before are read back once a new coordinator has
// taken over, a new commit is acknowledged, and the node restarts on its
// data directory before the next is killed.
func TestGroupOffsetsSurviveCoordinatorFailover(t *testing.T) {
	c := newCluster(t, 3)
	// A commit, like any acks-all append, waits for a killed follower to
	// leave the in-sync set: after 3 s here, 30 s by default.
	startCluster(t, c, "--replica-lag-time-max-ms", "3000")
	n1 := c.Node(1)
	sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "create", "kept", "--partitions", "3", "--replication-factor", "3")
	waitAgree(t, c, 1, 2, 3)
	dial := sdk.DialFunc(c.Client().DialContext)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	prod, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: c.Node(3).Addr, Dialer: dial, Partitioner: byKey})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		produce(t, prod, "kept", []int{0, 1, 2}, fmt.Sprint("r", i))
	}
	prod.Close()
	client := func(node int) *sdk.Client {
		cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: c.Node(node).Addr, Dialer: dial})
		if err != nil {
			t.Fatalf("dial node %d: %v", node, err)
		}
		return cl
	}
	commit := func(node int, off uint64) error {
		cl := client(node)
		defer cl.Close()
		var in []sdk.OffsetCommit
		for p := range 3 {
			in = append(in, sdk.OffsetCommit{Topic: "kept", Partition: uint32(p), Offset: off + uint64(p)})
		}
		out, err := cl.CommitOffsets(ctx, "keeper", in)
		if err != nil {
			return err
		}
		for _, o := range out {
			if o.Err != nil {
				return o.Err
			}
		}
		return nil
	}
	read := func(node int, want uint64) error {
		cl := client(node)
		defer cl.Close()
		offs, err := cl.FetchOffsets(ctx, "keeper", "kept")
		if err != nil {
			return err
		}
		if len(offs) != 3 {
			return fmt.Errorf("offsets %+v, want 3", offs)
		}
		for _, o := range offs {
			if o.Offset != want+uint64(o.Partition) {
				return fmt.Errorf("partition %d at %d, want %d", o.Partition, o.Offset, want+uint64(o.Partition))
			}
		}
		return nil
	}
	eventually(t, "the first commit", func() error { return commit(1, 1) })
	want := uint64(1)
	for k := 1; k <= 3; k++ {
		live := 1 + k%3
		c.Node(k).Kill()
		eventually(t, fmt.Sprintf("the offsets through node %d with node %d killed", live, k), func() error { return read(live, want) })
		eventually(t, fmt.Sprintf("a commit through node %d with node %d killed", live, k), func() error { return commit(live, want+1) })
		want++
		eventually(t, "the new commit read back", func() error { return read(live, want) })
		c.Node(k).Restart()
		waitAgree(t, c, 1, 2, 3)
	}
	for _, n := range c.Nodes() {
		eventually(t, fmt.Sprintf("the offsets through node %d", n.Index), func() error { return read(n.Index, want) })
	}
	// The offsets topic is internal: not listed, not usable by clients.
	out := sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "list")
	if strings.Contains(out, "__sq_offsets") {
		t.Fatalf("topic list shows the offsets topic:\n%s", out)
	}
}
