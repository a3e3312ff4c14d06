package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seedqueue/sq/sdk"
)

// TestProduceWithALeaderDown: with node b (the leader of partition 1)
// stopped, sq produce given node a acknowledges every keyless record, on
// partition 0; records that could not reach a leader name that leader's
// address, not the --server node's.
func TestProduceWithALeaderDown(t *testing.T) {
	c := startSplitCluster(t)
	c.stops[1]()
	var in strings.Builder
	for i := range 20 {
		fmt.Fprintf(&in, "r%d\n", i)
	}
	out, errOut, err := runSQInput(t, in.String(), "--server", c.nodes[0].DataAddr, "produce", "-t", "orders")
	if err != nil {
		t.Fatalf("keyless produce with a leader down: %v\n%s", err, errOut)
	}
	if want := "produced 20 records to orders: partition 0 offsets 0-19"; !strings.Contains(out, want) {
		t.Fatalf("produce said %q, want %q", out, want)
	}

	s := &produceSession{addr: c.nodes[0].DataAddr, failed: 1, sent: 1, in: produceInput{}}
	s.failedAt.add(3)
	s.firstErr = fmt.Errorf("%w: dial refused", sdk.ErrConnection)
	s.firstErr = &sdk.LeaderConnectionError{Topic: "orders", Partition: 1, Leader: c.nodes[1].DataAddr, Err: s.firstErr}
	msg := s.notAcked().Error()
	if !strings.Contains(msg, "the leader of orders partition 1, "+c.nodes[1].DataAddr+", could not be reached") || strings.Contains(msg, c.nodes[0].DataAddr) {
		t.Fatalf("not-acknowledged message %q: want it to name the leader %s, not the server %s", msg, c.nodes[1].DataAddr, c.nodes[0].DataAddr)
	}
	if !errors.Is(s.notAcked(), sdk.ErrConnection) {
		t.Fatalf("%v does not wrap ErrConnection", s.notAcked())
	}
}
