package sdk

import (
	"testing"
	"time"
)

// Close of a group member whose server is gone does not wait out the
// reconnection backoff to send a LeaveGroup that cannot succeed: with a
// backoff and request timeout of an hour, Close returns at once (the
// guard below is far shorter than the hour it would wait otherwise).
func TestCloseSkipsLeaveWhenUnreachable(t *testing.T) {
	b := startRestartable(t)
	b.topic(t, "t", 2)
	ctx := testCtx(t)
	c, err := NewConsumer(ctx, ConsumerConfig{Addr: b.addr, Topic: "t", ConsumerGroup: "g",
		HeartbeatInterval: 10 * time.Millisecond, RequestTimeout: time.Hour,
		ReconnectBackoff: time.Hour, ReconnectBackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Assignment(); len(got) != 2 {
		t.Fatalf("assignment %v, want both partitions", got)
	}
	b.stop()
	waitFor(t, 10*time.Second, "a failed dial", c.client.unreachable)
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for the reconnection backoff of an unreachable server")
	}
}
