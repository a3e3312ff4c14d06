package control_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/internal/testnet"
	"github.com/seedqueue/sq/sdk"
)

// GrpcConsumer.Close is bounded by CloseTimeout, not RequestTimeout (an
// hour here): against a server that froze, its final commit is sent and
// not answered, and Close returns a *sdk.CloseCommitError naming every
// partition whose position was not stored, wrapping
// context.DeadlineExceeded; the group has no offset. Against a server
// that answers, Close (and CloseContext) commit and return nil.
func TestGrpcConsumerCloseBounded(t *testing.T) {
	for _, frozen := range []bool{true, false} {
		n := startNode(t, control.Options{NodeID: "n1"})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		direct := sdk.GrpcConfig{Addr: n.grpcAddr}
		admin, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: direct})
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if _, err := admin.CreateTopic(ctx, "t", 2, sdk.TopicConfig{}); err != nil {
			t.Fatal(err)
		}
		p, err := sdk.NewGrpcProducer(sdk.GrpcProducerConfig{GrpcConfig: direct})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			if _, err := p.Send(ctx, "t", fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		p.Close()

		px := testnet.StartProxy(t, n.grpcAddr)
		c, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: px.Addr, RequestTimeout: time.Hour},
			Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Hour, MaxWait: 50 * time.Millisecond,
			CloseTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			px.Close() // a Close still waiting for the frozen server fails now
			c.Close()
		})
		want := map[uint32]uint64{}
		for got := 0; got < 6; {
			msgs, err := c.Poll(ctx)
			if err != nil {
				t.Fatalf("Poll: %v", err)
			}
			for _, m := range msgs {
				want[m.Partition] = max(want[m.Partition], m.Offset+1)
			}
			got += len(msgs)
		}
		if frozen {
			px.Freeze()
		}
		done := make(chan error, 1)
		go func() {
			if frozen {
				done <- c.Close()
				return
			}
			cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer ccancel()
			done <- c.CloseContext(cctx)
		}()
		err = endsBy(t, "Close", done)
		committed := map[uint32]uint64{}
		d, derr := n.eng.DescribeGroup("g")
		if derr == nil {
			for _, o := range d.Offsets {
				if o.CommittedOffset >= 0 {
					committed[uint32(o.Partition)] = uint64(o.CommittedOffset)
				}
			}
		}
		if !frozen {
			if err != nil || !maps.Equal(committed, want) {
				t.Fatalf("Close: %v; committed %v, want nil and %v", err, committed, want)
			}
			continue
		}
		var ce *sdk.CloseCommitError
		if !errors.As(err, &ce) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close: %v, want a *sdk.CloseCommitError wrapping context.DeadlineExceeded", err)
		}
		if !maps.Equal(ce.Positions, want) || px.Dropped() == 0 {
			t.Fatalf("positions not committed %v (%d bytes sent to the frozen server), want %v and the commit sent", ce.Positions, px.Dropped(), want)
		}
		if len(committed) != 0 {
			t.Fatalf("the group has offsets %v, want none", committed)
		}
	}
}
