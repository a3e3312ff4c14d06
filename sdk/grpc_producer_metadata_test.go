package sdk

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/internal/testnet"
)

// A GrpcProducer whose server is not up yet when SendBatch starts (a
// server restarting) retries reading the topic's metadata within its
// DeliveryTimeout, as it retries a publish and as Producer does, instead
// of failing every record at once with the connection error.
func TestGrpcProducerRetriesMetadataWithinTheDeliveryTimeout(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 2)
	addr := testnet.FreeAddr(t)
	var logs logBuffer
	gp, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: addr}, RetryBackoff: time.Millisecond,
		RetryBackoffMax: 20 * time.Millisecond, Retries: 1 << 30, DeliveryTimeout: time.Minute, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	msgs := []ProducerMessage{{Topic: "t", Key: []byte("a"), Value: []byte("1")}, {Topic: "t", Key: []byte("b"), Value: []byte("2")}}
	type sent struct {
		acks []Ack
		err  error
	}
	done := make(chan sent, 1)
	go func() {
		acks, err := gp.SendBatch(testCtx(t), msgs)
		done <- sent{acks, err}
	}()
	// The server comes up once the producer has failed to reach it.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "retrying metadata") {
		select {
		case s := <-done:
			t.Fatalf("SendBatch returned before the server was up: %v, first ack %v", s.err, s.acks[0].Err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no metadata retry logged within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctl, err := control.New(control.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctl.SetEngine(b.eng)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { _ = ctl.ServeGRPC(ln); close(served) }()
	ctl.SetReady(true)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ctl.Shutdown(ctx)
		<-served
	}()
	var s sent
	select {
	case s = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("SendBatch did not return within 30s of the server coming up")
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	for i, a := range s.acks {
		if a.Err != nil {
			t.Errorf("ack %d: %v, want it acknowledged once the server is up", i, a.Err)
		}
	}
}
