package sdk

import (
	"testing"
	"time"
)

// A position a GrpcConsumer lost when it was removed from its group is
// not reported once a later commit stored it or a later one (the member
// joined again, read the records again and committed them), as Consumer
// does: Close with AutoCommit then returns nil.
func TestGrpcConsumerForgetsALostPositionStoredSince(t *testing.T) {
	const n = 10
	b := startBroker(t)
	b.topic(t, "t", 1)
	b.produce(t, "t", []int{0}, n)
	grpcAddr := serveGrpc(t, b)
	ctx := testCtx(t)
	c, err := NewGrpcConsumer(ctx, GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: grpcAddr}, Topic: "t", ConsumerGroup: "g",
		SessionTimeout: groupSession, HeartbeatInterval: groupHeartbeat, MaxWait: 20 * time.Millisecond,
		AutoCommit: true, AutoCommitInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := 0
	poll := func() {
		msgs, err := c.Poll(ctx)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		read += len(msgs)
	}
	waitFor(t, 10*time.Second, "the records read", func() bool { poll(); return read == n })
	d, err := b.eng.DescribeGroup("g")
	if err != nil || len(d.Members) != 1 {
		t.Fatalf("DescribeGroup: %+v, %v", d, err)
	}
	// Removed from the group before it committed: position 0@10 is lost,
	// and the member joins again and reads the records again.
	if err := b.eng.LeaveGroup("g", d.Members[0].MemberID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the records read again", func() bool { poll(); return read == 2*n })
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v; want nil, the position is committed by the member it joined again as", err)
	}
	offs, err := b.eng.FetchOffsets("g", "t")
	if err != nil || len(offs) != 1 || offs[0].Offset != n {
		t.Fatalf("committed %+v, %v; want partition 0 at %d", offs, err, n)
	}
}
