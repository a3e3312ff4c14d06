package control_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/sdk"
)

// endsBy waits for a call on another goroutine, failing the test when it
// has not returned by a generous deadline (its own waits are an hour).
func endsBy(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not end", what)
		return nil
	}
}

// The SDK's subscribers over both planes end with their context and with
// Close while the server holds them in a long poll, and their server-side
// loops end with them: GrpcConsumer.Poll, Consumer.Poll (push
// subscriptions) and Subscription.Next.
func TestSDKSubscribersEnd(t *testing.T) {
	type subscriber struct {
		wait  func(ctx context.Context) error // the call that waits for records
		close func() error
	}
	kinds := []struct {
		name  string
		start func(t *testing.T, n *node) subscriber
	}{
		{"GrpcConsumer", func(t *testing.T, n *node) subscriber {
			c, err := sdk.NewGrpcConsumer(context.Background(), sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}, Topic: "t", MaxWait: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return subscriber{func(ctx context.Context) error { _, err := c.Poll(ctx); return err }, c.Close}
		}},
		{"Consumer", func(t *testing.T, n *node) subscriber {
			c, err := sdk.NewConsumer(context.Background(), sdk.ConsumerConfig{Addr: n.capnpAddr, Topic: "t", MaxWait: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return subscriber{func(ctx context.Context) error { _, err := c.Poll(ctx); return err }, c.Close}
		}},
		{"Subscription", func(t *testing.T, n *node) subscriber {
			c, err := sdk.Dial(context.Background(), sdk.ClientConfig{Addr: n.capnpAddr})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			sub, err := c.Subscribe(context.Background(), "t", 0, 0, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			return subscriber{func(ctx context.Context) error { _, err := sub.Next(ctx); return err }, c.Close}
		}},
	}
	for _, k := range kinds {
		for _, way := range []string{"context", "Close"} {
			t.Run(k.name+"/"+way, func(t *testing.T) {
				n := startNode(t, control.Options{})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "t", Partitions: 2}); err != nil {
					t.Fatal(err)
				}
				s := k.start(t, n)
				done := make(chan error, 1)
				go func() { done <- s.wait(ctx) }()
				eventually(t, "a long poll at the server", func() bool { return n.eng.InFlight() > 0 })
				closed := make(chan error, 1)
				if way == "context" {
					cancel()
				} else {
					go func() { closed <- s.close() }()
				}
				err := endsBy(t, "the waiting call", done)
				if way == "context" && !errors.Is(err, context.Canceled) {
					t.Fatalf("ended with %v, want context.Canceled", err)
				}
				if way == "Close" {
					if err == nil {
						t.Fatal("ended without an error at Close")
					}
					_ = endsBy(t, "Close", closed)
					// The server's loops for this subscriber end too.
					eventually(t, "the server's long polls to end", func() bool { return n.eng.InFlight() == 0 })
				}
			})
		}
	}
}
