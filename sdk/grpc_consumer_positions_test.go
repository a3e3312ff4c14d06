package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/internal/testnet"
)

// serveGrpc serves b's engine on a gRPC control plane on loopback and
// returns its address.
func serveGrpc(t *testing.T, b *broker) string {
	t.Helper()
	ctl, err := control.New(control.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctl.SetEngine(b.eng)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = ctl.ServeGRPC(ln); close(done) }()
	ctl.SetReady(true)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ctl.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String()
}

// A GrpcConsumer that stops calling Poll leaves its group after
// MaxPollInterval, as Consumer does: its partition moves to the other
// member (a Cap'n Proto Consumer); when it polls again it rejoins, and
// Commit (or Close, with AutoCommit) reports the position it had returned
// and not stored, wrapping ErrMaxPollIntervalExceeded, once.
func TestGrpcConsumerMaxPollIntervalLeavesAndRejoins(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close bool
	}{{"commit", false}, {"close", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const (
				maxPoll = 400 * time.Millisecond
				n       = 100
			)
			b := startBroker(t)
			b.topic(t, "t", 2)
			grpcAddr := serveGrpc(t, b)
			ctx := testCtx(t)
			var logs logBuffer
			aClock := newTestClock()
			acfg := GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: grpcAddr}, Topic: "t", ConsumerGroup: "g",
				SessionTimeout: groupSession, HeartbeatInterval: groupHeartbeat, MaxWait: 20 * time.Millisecond,
				MaxPollInterval: maxPoll, AutoCommit: true, AutoCommitInterval: time.Nanosecond, MaxPollRecords: 10,
				Logger: logs.logger()}
			acfg.now = aClock.Now
			a, err := NewGrpcConsumer(ctx, acfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			bm := startMember(t, b, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Nanosecond})
			admin := bm.c.Client()
			aSeen := map[uint32][]uint64{}
			pollA := func() []Message {
				msgs, err := a.Poll(ctx)
				if err != nil {
					t.Fatalf("Poll: %v", err)
				}
				for _, m := range msgs {
					aSeen[m.Partition] = append(aSeen[m.Partition], m.Offset)
				}
				return msgs
			}
			waitFor(t, 10*time.Second, "one partition each", func() bool {
				pollA()
				return len(a.Assignment()) == 1 && len(bm.c.Assignment()) == 1
			})
			pa := a.Assignment()[0]
			b.produce(t, "t", []int{0, 1}, n)
			var last []Message
			waitFor(t, 10*time.Second, "records for A", func() bool {
				last = pollA()
				return len(last) > 0
			})
			lostAt := last[len(last)-1].Offset + 1

			// At MaxPollInterval A stays; its heartbeat loop looked at the
			// clock (several reads) without leaving.
			aClock.Advance(maxPoll)
			reads := aClock.Reads()
			waitFor(t, 10*time.Second, "A's heartbeat loop to look at the clock", func() bool { return aClock.Reads() >= reads+3 })
			a.mu.Lock()
			left := a.group.left
			a.mu.Unlock()
			if left || len(groupMembers(admin, "g")) != 2 || strings.Contains(logs.String(), "MaxPollInterval") {
				t.Fatalf("A left the group at MaxPollInterval, not after it:\n%s", logs.String())
			}
			// Past it, A leaves; B then owns and reads both partitions.
			aClock.Advance(time.Millisecond)
			waitFor(t, 10*time.Second, "A to leave the group", func() bool { return len(groupMembers(admin, "g")) == 1 })
			if !strings.Contains(logs.String(), "MaxPollInterval") {
				t.Errorf("no warning about MaxPollInterval in the log:\n%s", logs.String())
			}
			waitAssigned(t, "B to own both partitions", 10*time.Second, []*member{bm}, 2)
			waitFor(t, 10*time.Second, "B to read and commit A's partition", func() bool {
				bm.mu.Lock()
				s := bm.seen[pa]
				done := len(s) > 0 && s[len(s)-1] == n-1
				bm.mu.Unlock()
				c := groupCommitted(admin, "g")
				return done && c[0] == n && c[1] == n
			})

			// A polls again: it rejoins with one partition, at the group's
			// committed offset.
			waitFor(t, 10*time.Second, "A to rejoin", func() bool {
				pollA()
				return len(a.Assignment()) == 1 && len(bm.c.Assignment()) == 1 && len(groupMembers(admin, "g")) == 2
			})
			if tc.close {
				err = a.Close()
				var ce *CloseCommitError
				if !errors.As(err, &ce) || ce.Positions[pa] != lostAt {
					t.Errorf("Close: %v, want a *CloseCommitError naming partition %d at %d", err, pa, lostAt)
				}
			} else {
				err = a.Commit(ctx)
			}
			if !errors.Is(err, ErrMaxPollIntervalExceeded) {
				t.Fatalf("Commit or Close after rejoining: %v, want ErrMaxPollIntervalExceeded", err)
			}
			if want := fmt.Sprintf("%d@%d", pa, lostAt); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name position %s", err, want)
			}
			if !tc.close {
				if err := a.Commit(ctx); err != nil {
					t.Errorf("second Commit: %v (the loss is reported once)", err)
				}
			}
			// At least once: every record was read by A or B.
			bm.mu.Lock()
			defer bm.mu.Unlock()
			for p := range uint32(2) {
				got := map[uint64]bool{}
				for _, off := range append(append([]uint64(nil), aSeen[p]...), bm.seen[p]...) {
					got[off] = true
				}
				for off := range uint64(n) {
					if !got[off] {
						t.Errorf("partition %d offset %d never read", p, off)
					}
				}
			}
		})
	}
}

// TestGrpcConsumerMarkProcessed: with AutoCommitMarked a GrpcConsumer
// commits, per partition, the position after the last record marked, never
// what Poll returned beyond it, and nothing for a partition without marks;
// MarkProcessed refuses what it cannot mark, each with its error.
func TestGrpcConsumerMarkProcessed(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 2)
	b.topic(t, "other", 1)
	b.produce(t, "t", []int{0, 1}, 20)
	grpcAddr := serveGrpc(t, b)
	ctx := testCtx(t)
	c, err := NewGrpcConsumer(ctx, GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: grpcAddr}, Topic: "t", ConsumerGroup: "g",
		AutoCommitMarked: true, AutoCommitInterval: time.Hour, MaxWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []Message
	waitFor(t, 10*time.Second, "records of partition 0", func() bool {
		msgs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
		for _, m := range got {
			if m.Partition == 0 && m.Offset >= 5 {
				return true
			}
		}
		return false
	})
	var p0 []Message
	for _, m := range got {
		if m.Partition == 0 {
			p0 = append(p0, m)
		}
	}
	if err := c.MarkProcessed(p0[3]); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkProcessed(p0[1]); err != nil { // an earlier mark does not move it back
		t.Fatal(err)
	}
	for _, bad := range []struct {
		name string
		msg  Message
		want error
	}{
		{"other topic", Message{Topic: "other", Partition: 0, Offset: 0}, ErrNotAssigned},
		{"partition not held", Message{Topic: "t", Partition: 7, Offset: 0}, ErrNotAssigned},
		{"not returned yet", Message{Topic: "t", Partition: 0, Offset: 1_000}, ErrInvalidPosition},
	} {
		if err := c.MarkProcessed(bad.msg); !errors.Is(err, bad.want) {
			t.Errorf("MarkProcessed(%s): %v, want %v", bad.name, err, bad.want)
		}
	}
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	admin, err := Dial(ctx, ClientConfig{Addr: b.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	committed := groupCommitted(admin, "g")
	if committed[0] != 4 {
		t.Errorf("partition 0 committed at %d, want 4 (after the last record marked)", committed[0])
	}
	if off, ok := committed[1]; ok && off >= 0 {
		t.Errorf("partition 1 committed at %d without any record marked", off)
	}

	plain, err := NewGrpcConsumer(ctx, GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: grpcAddr}, Topic: "t", ConsumerGroup: "g2", MaxWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.MarkProcessed(p0[0]); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("MarkProcessed without AutoCommitMarked: %v, want ErrInvalidConfig", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkProcessed(p0[0]); !errors.Is(err, ErrClosed) {
		t.Errorf("MarkProcessed after Close: %v, want ErrClosed", err)
	}
}

// TestGrpcProducerSendBatchIsBoundedByTheDeliveryTimeout: SendBatch of a
// GrpcProducer against a server gone or silent returns on its own, with
// every record failed by the delivery timeout, as Producer's does.
func TestGrpcProducerSendBatchIsBoundedByTheDeliveryTimeout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(px *testnet.Proxy)
	}{
		{"server gone", func(px *testnet.Proxy) { px.Close() }},
		{"server silent", func(px *testnet.Proxy) { px.Freeze() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t)
			b.topic(t, "t", 2)
			px := testnet.StartProxy(t, serveGrpc(t, b))
			gp, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: px.Addr, RequestTimeout: 200 * time.Millisecond},
				Retries: 1 << 30, RetryBackoff: time.Millisecond, RetryBackoffMax: 20 * time.Millisecond, DeliveryTimeout: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer gp.Close()
			if _, err := gp.Send(testCtx(t), "t", nil, []byte("first")); err != nil {
				t.Fatal(err)
			}
			tc.break_(px)
			msgs := make([]ProducerMessage, 50)
			for i := range msgs {
				msgs[i] = ProducerMessage{Topic: "t", Key: []byte{byte(i)}, Value: []byte("v")}
			}
			var acks []Ack
			returnsWithin(t, "SendBatch", func() { acks, err = gp.SendBatch(context.Background(), msgs) })
			if err != nil {
				t.Fatalf("SendBatch: %v (per-record failures belong in the acks)", err)
			}
			for i, a := range acks {
				if !errors.Is(a.Err, ErrDeliveryTimeout) {
					t.Fatalf("ack %d: %v, want ErrDeliveryTimeout", i, a.Err)
				}
			}
		})
	}
}
