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
)

// hangGuard bounds a call that must return on its own: the tests below give
// the SDK retries that, without the delivery timeout, would go on for
// hours, so a call that is not bounded fails the test here instead of
// hanging it.
const hangGuard = 60 * time.Second

// returnsWithin runs f and fails the test when it has not returned within
// hangGuard.
func returnsWithin(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatalf("%s did not return within %v", what, hangGuard)
	}
}

// endlessRetries is a producer configuration that retries for ever, but
// for its DeliveryTimeout.
func endlessRetries(c *ProducerConfig) {
	c.Retries = 1 << 30
	c.RetryBackoff = time.Millisecond
	c.RetryBackoffMax = 20 * time.Millisecond
	c.ReconnectBackoff = time.Millisecond
	c.ReconnectBackoffMax = 20 * time.Millisecond
	c.DeliveryTimeout = 500 * time.Millisecond
	c.RequestTimeout = 200 * time.Millisecond
}

// stallRequests makes the fake server hold every request of the given kind
// unanswered until the test ends (the connection stays open and silent,
// as a server that stopped does).
func stallRequests(t *testing.T, s *fakeServer, kind api.Frame_Which) {
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	s.setHook(func(f api.Frame) {
		if f.Which() == kind {
			<-release
		}
	})
}

// TestBatchProducerCloseIsBoundedByTheDeliveryTimeout: with the server
// gone (stopped: connections refused) or silent (requests never answered),
// Close returns on its own and every buffered record is reported through
// OnError with an error wrapping ErrDeliveryTimeout, although the retries
// alone would go on for ever.
func TestBatchProducerCloseIsBoundedByTheDeliveryTimeout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, s *fakeServer)
		// cause is the failure wrapped beside ErrDeliveryTimeout.
		cause error
	}{
		{"server stopped", func(t *testing.T, s *fakeServer) { s.stop() }, ErrConnection},
		{"server silent", func(t *testing.T, s *fakeServer) { stallRequests(t, s, api.Frame_Which_publishRequest) }, ErrConnection},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 3)
			var failed, acked atomic.Int64
			var errMu sync.Mutex
			var errs []error
			bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) {
				endlessRetries(&c.ProducerConfig)
				c.BatchRecords = 5
				c.MaxInFlightPerPartition = 2
				c.OnAck = func(a BatchAck) { acked.Add(int64(len(a.Messages))) }
				c.OnError = func(e BatchError) {
					failed.Add(int64(len(e.Messages)))
					errMu.Lock()
					errs = append(errs, e.Err)
					errMu.Unlock()
				}
			})
			ctx := testCtx(t)
			// One record while the server works loads the topic.
			if err := bp.Send(ctx, "t", []byte("k"), []byte("first")); err != nil {
				t.Fatal(err)
			}
			if err := bp.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			tc.break_(t, s)
			const n = 200
			for i := range n {
				if err := bp.Send(ctx, "t", []byte{byte(i)}, []byte("v")); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
			}
			returnsWithin(t, "Close", func() { _ = bp.Close() })
			if got := failed.Load() + acked.Load(); got != n+1 {
				t.Fatalf("%d records acknowledged or failed, want %d", got, n+1)
			}
			if failed.Load() != n {
				t.Fatalf("%d records failed, want the %d sent after the server broke", failed.Load(), n)
			}
			errMu.Lock()
			defer errMu.Unlock()
			for _, err := range errs {
				if !errors.Is(err, ErrDeliveryTimeout) {
					t.Fatalf("batch error %v: does not wrap ErrDeliveryTimeout", err)
				}
			}
			// The first batch to fail ran out of time while retrying, so its
			// error names the failure behind the timeout.
			if !errors.Is(errs[0], tc.cause) {
				t.Fatalf("first batch error %v: does not wrap %v", errs[0], tc.cause)
			}
		})
	}
}

// TestBatchProducerFlushWithoutDeadlineIsBounded: Flush with a context
// that never ends still returns once the buffered records ran out of
// their delivery timeout, and a Send blocked on a full buffer is released
// by the records that failed.
func TestBatchProducerFlushWithoutDeadlineIsBounded(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	var failed atomic.Int64
	bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) {
		endlessRetries(&c.ProducerConfig)
		c.BufferBytes = 2 << 10 // a few records fill it
		c.OnError = func(e BatchError) { failed.Add(int64(len(e.Messages))) }
	})
	if err := bp.Send(testCtx(t), "t", nil, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := bp.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	s.stop()
	const n = 100
	returnsWithin(t, "Send into a full buffer", func() {
		for i := range n {
			if err := bp.Send(context.Background(), "t", nil, make([]byte, 200)); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
	})
	returnsWithin(t, "Flush", func() {
		if err := bp.Flush(context.Background()); err != nil {
			t.Errorf("Flush: %v", err)
		}
	})
	if failed.Load() != n {
		t.Fatalf("%d records failed, want %d", failed.Load(), n)
	}
}

// TestProducerSendBatchIsBoundedByTheDeliveryTimeout: SendBatch against a
// stopped or silent server returns on its own with every record failed by
// the delivery timeout, whose error names the connection failure.
func TestProducerSendBatchIsBoundedByTheDeliveryTimeout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, s *fakeServer)
	}{
		{"server stopped", func(t *testing.T, s *fakeServer) { s.stop() }},
		{"server silent", func(t *testing.T, s *fakeServer) { stallRequests(t, s, api.Frame_Which_publishRequest) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 2)
			cfg := ProducerConfig{Addr: s.addr}
			endlessRetries(&cfg)
			p, err := NewProducer(testCtx(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if _, err := p.Send(testCtx(t), "t", nil, []byte("first")); err != nil {
				t.Fatal(err)
			}
			tc.break_(t, s)
			msgs := make([]ProducerMessage, 50)
			for i := range msgs {
				msgs[i] = ProducerMessage{Topic: "t", Key: []byte{byte(i)}, Value: []byte("v")}
			}
			var acks []Ack
			returnsWithin(t, "SendBatch", func() { acks, err = p.SendBatch(context.Background(), msgs) })
			if !errors.Is(err, ErrDeliveryTimeout) {
				t.Fatalf("SendBatch: %v, want ErrDeliveryTimeout", err)
			}
			for i, a := range acks {
				if !errors.Is(a.Err, ErrDeliveryTimeout) {
					t.Fatalf("ack %d: %v, want ErrDeliveryTimeout", i, a.Err)
				}
			}
		})
	}
}

// TestDialIsCutShortByItsContext: a listener that accepts and never
// answers the handshake holds Dial only until its context ends, not for
// the whole DialTimeout.
func TestDialIsCutShortByItsContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			accepted <- nc
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	testDone := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(testDone)
	wg.Go(func() {
		var nc net.Conn
		select {
		case nc = <-accepted:
		case <-testDone:
			return
		}
		defer nc.Close()
		cancel() // the handshake is under way: the server never answers it
		<-testDone
	})
	returnsWithin(t, "Dial", func() {
		_, err = Dial(ctx, ClientConfig{Addr: ln.Addr().String(), DialTimeout: time.Hour})
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial: %v, want context.Canceled", err)
	}
}

// A send whose retry wait is cut short by its context fails with an error
// that wraps both the context's error and the failure being retried, so a
// caller can tell an interrupted send to a dead server from one that was
// merely interrupted.
func TestProducerRetryCutShortKeepsTheCause(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	var logs logBuffer
	p := newTestProducer(t, s, func(c *ProducerConfig) {
		c.Retries = 1 << 30
		c.RetryBackoff, c.RetryBackoffMax = time.Hour, time.Hour
		c.DeliveryTimeout = 2 * time.Hour
		c.Logger = logs.logger()
	})
	if _, err := p.Send(testCtx(t), "t", nil, []byte("first")); err != nil {
		t.Fatal(err)
	}
	s.stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err = p.Send(ctx, "t", nil, []byte("v"))
	}()
	waitFor(t, 10*time.Second, "a retry waiting", func() bool { return strings.Contains(logs.String(), "sdk: retrying") })
	cancel()
	returnsWithin(t, "Send", func() { <-done })
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrConnection) {
		t.Fatalf("Send: %v, want an error wrapping context.Canceled and ErrConnection", err)
	}
}
