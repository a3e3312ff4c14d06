package clusternet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// TestKeylessProduceWithANodeKilled kills (SIGKILL) one node of three, a
// topic's 6 partitions spread over them: a keyless producer connected to
// another node keeps getting every record acknowledged, by the leaders
// still alive, its batches that met the dead leader moved to them.
func TestKeylessProduceWithANodeKilled(t *testing.T) {
	c := newCluster(t, 3)
	startCluster(t, c)
	n1 := c.Node(1)
	sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "create", "keyless", "--partitions", "6", "--replication-factor", "1")
	waitAgree(t, c, 1, 2, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prod, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n1.Addr, Dialer: sdk.DialFunc(c.Client().DialContext)})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	send := func(round int) map[uint32]int {
		t.Helper()
		var msgs []sdk.ProducerMessage
		for i := range 5 {
			msgs = append(msgs, sdk.NewProducerMessage("keyless", fmt.Appendf(nil, "r%d-%d", round, i)))
		}
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		defer ccancel()
		acks, err := prod.SendBatch(cctx, msgs)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		parts := map[uint32]int{}
		for _, a := range acks {
			parts[a.Partition]++
		}
		return parts
	}
	before := map[uint32]int{}
	for round := range 12 {
		for p, n := range send(round) {
			before[p] += n
		}
	}
	if len(before) != 6 {
		t.Fatalf("keyless records before the kill reached partitions %v, want all 6", before)
	}
	// The victim: neither the producer's node nor the controller (whose
	// death would only add an election).
	victim := 2
	if ctl, err := controllerOf(t, c, 1, 2, 3); err == nil && ctl == 2 {
		victim = 3
	}
	rows, err := describe(t, c, n1, "keyless")
	if err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("node-%d", victim)
	led := map[uint32]bool{}
	for i, r := range rows {
		if r.Leader == dead {
			led[uint32(i)] = true
		}
	}
	if len(led) == 0 {
		t.Fatalf("node %d leads no partition: %+v", victim, rows)
	}
	c.Node(victim).Kill()
	after := map[uint32]int{}
	for round := 12; round < 52; round++ {
		for p, n := range send(round) {
			after[p] += n
		}
	}
	t.Logf("records per partition after node %d (leading %v) was killed: %v", victim, led, after)
	for p := range after {
		if led[p] {
			t.Errorf("%d records acknowledged on partition %d, led by the killed node", after[p], p)
		}
	}
}
