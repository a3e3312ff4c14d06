package sdk

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/testnet"
)

// A group member whose server froze (connections open, nothing answered)
// closes within CloseTimeout rather than RequestTimeout (an hour): its
// final commit is sent and not answered, Close returns a
// *CloseCommitError naming both partitions' positions and wrapping
// context.DeadlineExceeded, and with the budget spent it does not try to
// leave the group (it says so in its log): the broker still lists the
// member, for its session timeout to remove, and has stored no offset.
func TestGroupCloseBoundedWhenServerFreezes(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 2)
	b.produce(t, "t", []int{0, 1}, 3)
	px := testnet.StartProxy(t, b.addr)
	var logs logBuffer
	cfg := groupConfig(b, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Hour,
		RequestTimeout: time.Hour, CloseTimeout: 300 * time.Millisecond, Logger: logs.logger()})
	cfg.Addr = px.Addr
	c, err := NewConsumer(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		px.Close() // a Close still waiting for the frozen server fails now
		c.Close()
	})
	want := positionsAfter(pollN(t, c, 6))
	if !maps.Equal(want, map[uint32]uint64{0: 3, 1: 3}) {
		t.Fatalf("positions %v after reading both partitions", want)
	}
	px.Freeze()
	err = closeWithin(t, 30*time.Second, c.Close)
	var ce *CloseCommitError
	if !errors.As(err, &ce) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want a *CloseCommitError wrapping context.DeadlineExceeded", err)
	}
	if !maps.Equal(ce.Positions, want) {
		t.Fatalf("positions not committed %v, want %v", ce.Positions, want)
	}
	if px.Dropped() == 0 {
		t.Fatal("no request reached the frozen server: the commit was not sent")
	}
	if !strings.Contains(logs.String(), "close budget spent; not leaving the group") {
		t.Fatalf("log does not say the leave was skipped:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "leave group failed") {
		t.Fatalf("a leave was tried after the budget was spent:\n%s", logs.String())
	}
	d, err := b.eng.DescribeGroup("g")
	if err != nil {
		t.Fatal(err)
	}
	if got := committedOffsets(d.Offsets); len(d.Members) != 1 || len(got) != 0 {
		t.Fatalf("group has %d members and offsets %v, want the member still listed and no offset", len(d.Members), got)
	}
}

// A normal Close of a group member, and CloseContext with a deadline of
// the caller's, commit the positions and then leave the group.
func TestGroupCloseCommitsAndLeaves(t *testing.T) {
	for _, withCtx := range []bool{false, true} {
		b := startBroker(t)
		b.topic(t, "t", 2)
		b.produce(t, "t", []int{0, 1}, 3)
		c, err := NewConsumer(testCtx(t), groupConfig(b, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Hour}))
		if err != nil {
			t.Fatal(err)
		}
		want := positionsAfter(pollN(t, c, 6))
		err = closeWithin(t, 30*time.Second, func() error {
			if !withCtx {
				return c.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			return c.CloseContext(ctx)
		})
		if err != nil {
			t.Fatalf("Close (context %v): %v", withCtx, err)
		}
		d, err := b.eng.DescribeGroup("g")
		if err != nil {
			t.Fatal(err)
		}
		got := committedOffsets(d.Offsets)
		if len(d.Members) != 0 || !maps.Equal(got, want) {
			t.Fatalf("after Close (context %v): %d members, offsets %v; want none and %v", withCtx, len(d.Members), got, want)
		}
	}
}

// committedOffsets returns the group's committed offset per partition.
func committedOffsets(lags []engine.GroupPartitionLag) map[uint32]uint64 {
	out := map[uint32]uint64{}
	for _, l := range lags {
		if l.CommittedOffset >= 0 {
			out[uint32(l.Partition)] = uint64(l.CommittedOffset)
		}
	}
	return out
}
