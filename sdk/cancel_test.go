package sdk

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// ends waits for the error of a call running on another goroutine and
// fails the test when it has not returned by a generous deadline: the
// call must end because of its context or Close, not of a backoff, a
// retry or a long poll running out (each set to a minute or more here).
func ends(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not end", what)
		return nil
	}
}

// stopWays are the two signals every waiting loop of the SDK must heed:
// the caller's context and Close.
var stopWays = []string{"context", "Close"}

// The reconnect backoff of a Client ends with the context of the request
// that waits in it, and with Close.
func TestReconnectBackoffEnds(t *testing.T) {
	for _, way := range stopWays {
		t.Run(way, func(t *testing.T) {
			s := newFakeServer(t)
			c, err := Dial(testCtx(t), ClientConfig{Addr: s.addr, ReconnectBackoff: time.Hour, ReconnectBackoffMax: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s.stop()
			// The first request finds the connection gone; the dial after
			// it is refused and the next one waits for the backoff.
			waitFor(t, 10*time.Second, "a refused redial", func() bool {
				_, err := c.ListTopics(testCtx(t))
				return errors.Is(err, ErrConnection) && c.failuresNow() > 0
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := c.ListTopics(ctx)
				done <- err
			}()
			stop(way, cancel, c.Close)
			err = ends(t, "a request waiting for the reconnect backoff", done)
			if want := stopErr(way); !errors.Is(err, want) {
				t.Fatalf("request ended with %v, want %v", err, want)
			}
		})
	}
}

// The retries of a Producer end with the context of Send and with Close,
// whatever their backoff.
func TestProducerRetryEnds(t *testing.T) {
	for _, way := range stopWays {
		t.Run(way, func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 1)
			codes := make([]api.Code, 50)
			for i := range codes {
				codes[i] = api.CodeDiskFull
			}
			s.failPublish("t", 0, codes...)
			p := newTestProducer(t, s, func(c *ProducerConfig) { c.RetryBackoff, c.RetryBackoffMax = time.Hour, time.Hour })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := p.Send(ctx, "t", nil, []byte("v"))
				done <- err
			}()
			waitFor(t, 10*time.Second, "a failed publish", func() bool { return s.count(api.Frame_Which_publishRequest) >= 1 })
			stop(way, cancel, p.Close)
			if err := ends(t, "Send waiting to retry", done); err == nil {
				t.Fatal("Send succeeded")
			}
			if n := s.count(api.Frame_Which_publishRequest); n != 1 {
				t.Fatalf("%d publishes, want 1 (no retry after the stop)", n)
			}
		})
	}
}

// Poll waiting for records ends with its context and with Close, and
// Close stops the partition loops in a long poll.
func TestConsumerPollEnds(t *testing.T) {
	for _, way := range stopWays {
		t.Run(way, func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 2)
			c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", MaxWait: time.Hour})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := c.Poll(ctx)
				done <- err
			}()
			waitFor(t, 10*time.Second, "long polls at the server", func() bool { return s.count(api.Frame_Which_fetchRequest) >= 2 })
			stop(way, cancel, c.Close)
			err := ends(t, "Poll", done)
			if want := stopErr(way); !errors.Is(err, want) {
				t.Fatalf("Poll ended with %v, want %v", err, want)
			}
			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			_ = ends(t, "Close", closed)
		})
	}
}

// A server that ends every subscription at once, without records or an
// error, does not make the consumer spin: each new subscription waits for
// the reconnect backoff, and Close ends the loop.
func TestConsumerResubscribesAfterBackoff(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.mu.Lock()
	s.endSubscriptions = true
	s.mu.Unlock()
	start := time.Now()
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", ReconnectBackoff: 20 * time.Millisecond, ReconnectBackoffMax: 20 * time.Millisecond})
	waitFor(t, 10*time.Second, "three subscriptions", func() bool { return s.count(api.Frame_Which_subscribeRequest) >= 3 })
	// Each wait is at least half the backoff (equal jitter).
	n := s.count(api.Frame_Which_subscribeRequest)
	if most := int(time.Since(start)/(10*time.Millisecond)) + 2; n > most {
		t.Fatalf("%d subscriptions in %v: the consumer spins (at most %d)", n, time.Since(start), most)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	_ = ends(t, "Close", closed)
}

// stop stops a waiting call the given way: cancel its context, or Close
// what it runs on.
func stop(way string, cancel context.CancelFunc, closeFn func() error) {
	if way == "context" {
		cancel()
		return
	}
	go func() { _ = closeFn() }()
}

// stopErr is the error a call stopped the given way returns.
func stopErr(way string) error {
	if way == "context" {
		return context.Canceled
	}
	return ErrClosed
}

// failuresNow returns the consecutive failed dials of c.
func (c *Client) failuresNow() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failures
}

// CloseContext of a BatchProducer ends with its context while a batch
// waits to be retried or waits for its response, and reports every record
// left through OnError; Close alone would wait out the retries.
func TestBatchProducerCloseContextEnds(t *testing.T) {
	for _, stuck := range []string{"retrying", "awaiting a response"} {
		t.Run(stuck, func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 1)
			release := make(chan struct{})
			var once sync.Once
			unblock := func() { once.Do(func() { close(release) }) }
			t.Cleanup(unblock) // before the server stops (cleanups run last first)
			if stuck == "retrying" {
				codes := make([]api.Code, 50)
				for i := range codes {
					codes[i] = api.CodeDiskFull
				}
				s.failPublish("t", 0, codes...)
			} else {
				s.setHook(func(f api.Frame) {
					if f.Which() == api.Frame_Which_publishRequest {
						<-release
					}
				})
			}
			var failed atomic.Int64
			bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) {
				c.RetryBackoff, c.RetryBackoffMax, c.RequestTimeout = time.Hour, time.Hour, time.Hour
				c.DeliveryTimeout = 2 * time.Hour // else a retry an hour away fails at once
				c.OnError = func(e BatchError) { failed.Add(int64(len(e.Messages))) }
			})
			const records = 3
			for range records {
				if err := bp.Send(testCtx(t), "t", nil, []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, 10*time.Second, "a publish at the server", func() bool { return s.count(api.Frame_Which_publishRequest) >= 1 })
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- bp.CloseContext(ctx) }()
			cancel()
			if err := ends(t, "CloseContext", done); !errors.Is(err, context.Canceled) {
				t.Fatalf("CloseContext = %v, want context.Canceled", err)
			}
			if n := failed.Load(); n != records {
				t.Fatalf("%d records reported to OnError, want %d", n, records)
			}
			if n := bp.Buffered(); n != 0 {
				t.Fatalf("%d records still buffered after CloseContext", n)
			}
		})
	}
}

// The retries of a GrpcProducer (here against an address nobody listens
// on: Unavailable, retriable) end with the context of the send and with
// Close, whatever their backoff.
func TestGrpcProducerRetryEnds(t *testing.T) {
	for _, way := range stopWays {
		t.Run(way, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			var logs logBuffer
			cfg := GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: addr}, RetryBackoff: time.Hour, RetryBackoffMax: time.Hour}
			cfg.Logger = logs.logger()
			p, err := NewGrpcProducer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				// A delivery deadline past the hour of backoff, so the retry waits.
				_, err := p.publish(ctx, &sqv1.PublishRequest{Topic: "t", Records: []*sqv1.Record{{Value: []byte("v")}}}, time.Now().Add(2*time.Hour), false, nil)
				done <- err
			}()
			// Without a server the first attempt fails at once; the send
			// then waits an hour for its retry unless stopped.
			waitFor(t, 10*time.Second, "a failed attempt", func() bool { return strings.Contains(logs.String(), "retrying publish") })
			stop(way, cancel, p.Close)
			if err := ends(t, "a publish waiting to retry", done); err == nil {
				t.Fatal("publish succeeded without a server")
			}
		})
	}
}
