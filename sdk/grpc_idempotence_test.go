package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// publishSpy is a client interceptor for a GrpcProducer: it records every
// Publish attempt as the server received it and every InitProducerId, and
// lets a test change the outcome of one call (fault). It stands for a
// network that loses a response, or a server that refuses.
type publishSpy struct {
	mu    sync.Mutex
	sent  []*sqv1.PublishRequest // every Publish attempt, as sent
	inits int                    // InitProducerId calls
	// fault, when set, runs each call instead of invoke: it may call
	// invoke (the server handles the call) and return another error.
	fault func(method string, req any, invoke func() error) error
}

func (s *publishSpy) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	s.mu.Lock()
	switch r := req.(type) {
	case *sqv1.PublishRequest:
		s.sent = append(s.sent, proto.Clone(r).(*sqv1.PublishRequest))
	case *sqv1.InitProducerIdRequest:
		s.inits++
	}
	fault := s.fault
	s.mu.Unlock()
	invoke := func() error { return invoker(ctx, method, req, reply, cc, opts...) }
	if fault != nil {
		return fault(method, req, invoke)
	}
	return invoke()
}

// setFault sets the spy's fault (nil: none).
func (s *publishSpy) setFault(f func(method string, req any, invoke func() error) error) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

// attempts returns the Publish attempts of the records valued v.
func (s *publishSpy) attempts(v string) []*sqv1.PublishRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*sqv1.PublishRequest
	for _, r := range s.sent {
		if len(r.Records) > 0 && string(r.Records[0].Value) == v {
			out = append(out, r)
		}
	}
	return out
}

// initCalls returns how many InitProducerId calls were made.
func (s *publishSpy) initCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inits
}

// newSpiedGrpcProducer returns a GrpcProducer for addr whose calls go
// through spy, with millisecond retry backoffs; it closes with the test.
func newSpiedGrpcProducer(t *testing.T, addr string, spy *publishSpy, mod func(*GrpcProducerConfig)) *GrpcProducer {
	t.Helper()
	cfg := GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: addr, DialOptions: []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(spy.intercept)}},
		RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	p, err := NewGrpcProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// partitionValues returns the values partition 0 of topic holds, read
// over Cap'n Proto from addr.
func partitionValues(t *testing.T, addr, topic string) []string {
	t.Helper()
	ctx := testCtx(t)
	c, err := Dial(ctx, ClientConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var vals []string
	for off := uint64(0); ; {
		res, err := c.Fetch(ctx, FetchRequest{Topic: topic, Offset: off})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) == 0 {
			return vals
		}
		for _, m := range res.Messages {
			vals = append(vals, string(m.Value))
			off = m.Offset + 1
		}
	}
}

// createGrpcTopic creates topic with one partition over gRPC at addr.
func createGrpcTopic(t *testing.T, addr, topic string) {
	t.Helper()
	admin, err := NewAdmin(AdminConfig{GrpcConfig{Addr: addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(testCtx(t), topic, 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
}

// TestGrpcProducerIdempotentRetry: against a real node, a Publish the
// node stored but whose response was lost (Unavailable, or the request
// timeout) is retried by the GrpcProducer with the same producer id,
// epoch and sequence, and the node answers with the original offset: the
// record is stored once. With DisableIdempotence the same loss stores it
// twice (at-least-once) and no request carries a producer id.
func TestGrpcProducerIdempotentRetry(t *testing.T) {
	tests := []struct {
		name    string
		lost    codes.Code // the status the client gets instead of the response
		disable bool
		stored  int // times the marker is stored
	}{
		{"response lost", codes.Unavailable, false, 1},
		{"request timeout", codes.DeadlineExceeded, false, 1},
		{"response lost, idempotence disabled", codes.Unavailable, true, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := startFaultyNode(t)
			ctx := testCtx(t)
			createGrpcTopic(t, n.grpcAddr, "t")
			spy := &publishSpy{}
			p := newSpiedGrpcProducer(t, n.grpcAddr, spy, func(c *GrpcProducerConfig) { c.DisableIdempotence = tc.disable })
			if _, err := p.Send(ctx, "t", nil, []byte("first")); err != nil {
				t.Fatal(err)
			}
			var once sync.Once
			spy.setFault(func(method string, req any, invoke func() error) error {
				err := invoke()
				if r, ok := req.(*sqv1.PublishRequest); ok && err == nil && string(r.Records[0].Value) == "marker" {
					once.Do(func() { err = status.Error(tc.lost, "injected: the response was lost") })
				}
				return err
			})
			ack, err := p.Send(ctx, "t", nil, []byte("marker"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Send(ctx, "t", nil, []byte("last")); err != nil {
				t.Fatal(err)
			}
			at := spy.attempts("marker")
			if len(at) != 2 {
				t.Fatalf("the marker was published %d times, want 2 (a retry)", len(at))
			}
			if !tc.disable {
				if !at[0].Idempotent || !proto.Equal(at[0], at[1]) || at[0].BaseSequence != 1 {
					t.Errorf("attempts %v and %v: want the same stamp, sequence 1", at[0], at[1])
				}
				if ack.Offset != 1 {
					t.Errorf("acknowledged at offset %d, want 1 (the first attempt's)", ack.Offset)
				}
			} else if at[0].Idempotent || at[0].ProducerId != 0 {
				t.Errorf("with DisableIdempotence the request carries a stamp: %v", at[0])
			}
			want := "first," + strings.Repeat("marker,", tc.stored) + "last"
			if got := strings.Join(partitionValues(t, n.capnpAddr, "t"), ","); got != want {
				t.Errorf("partition holds %s, want %s", got, want)
			}
			if k, want := spy.initCalls(), map[bool]int{false: 1, true: 0}[tc.disable]; k != want {
				t.Errorf("InitProducerId called %d times, want %d", k, want)
			}
		})
	}
}

// TestGrpcProducerConcurrentSendsKeepSequences: concurrent SendBatch
// calls to one partition take turns (one request in flight per
// partition), so the node never sees a sequence out of order and stores
// every record once.
func TestGrpcProducerConcurrentSendsKeepSequences(t *testing.T) {
	n := startFaultyNode(t)
	ctx := testCtx(t)
	createGrpcTopic(t, n.grpcAddr, "t")
	spy := &publishSpy{}
	p := newSpiedGrpcProducer(t, n.grpcAddr, spy, nil)
	const callers, sends = 6, 15
	errs := make(chan error, callers*sends)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range sends {
				msgs := []ProducerMessage{{Topic: "t", Value: fmt.Appendf(nil, "%d-%d-a", c, i)}, {Topic: "t", Value: fmt.Appendf(nil, "%d-%d-b", c, i)}}
				acks, err := p.SendBatch(ctx, msgs)
				if err == nil {
					err = errors.Join(acks[0].Err, acks[1].Err)
				}
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	vals := partitionValues(t, n.capnpAddr, "t")
	seen := map[string]bool{}
	for _, v := range vals {
		if seen[v] {
			t.Fatalf("%s stored twice", v)
		}
		seen[v] = true
	}
	if len(vals) != 2*callers*sends {
		t.Fatalf("%d records stored, want %d", len(vals), 2*callers*sends)
	}
	if k := spy.initCalls(); k != 1 {
		t.Errorf("InitProducerId called %d times, want 1 (one identity for the run)", k)
	}
}

// TestGrpcProducerRefusedSequence: a request the node refuses for its
// sequence (here its stamp is altered on the way, as if an earlier request
// were lost) fails with an error wrapping OUT_OF_ORDER_SEQUENCE that says
// it was not stored, and the partition goes on with a new producer id.
func TestGrpcProducerRefusedSequence(t *testing.T) {
	n := startFaultyNode(t)
	ctx := testCtx(t)
	createGrpcTopic(t, n.grpcAddr, "t")
	spy := &publishSpy{}
	p := newSpiedGrpcProducer(t, n.grpcAddr, spy, nil)
	if _, err := p.Send(ctx, "t", nil, []byte("first")); err != nil {
		t.Fatal(err)
	}
	spy.setFault(func(method string, req any, invoke func() error) error {
		if r, ok := req.(*sqv1.PublishRequest); ok && string(r.Records[0].Value) == "gap" {
			r.BaseSequence += 5
		}
		return invoke()
	})
	_, err := p.Send(ctx, "t", nil, []byte("gap"))
	if !errors.Is(err, api.ErrOutOfOrderSequence) || !strings.Contains(err.Error(), "not stored") {
		t.Fatalf("Send with a gap: %v, want OUT_OF_ORDER_SEQUENCE, not stored", err)
	}
	spy.setFault(nil)
	if _, err := p.Send(ctx, "t", nil, []byte("after")); err != nil {
		t.Fatalf("Send after the refusal: %v", err)
	}
	if at := spy.attempts("after"); len(at) != 1 || at[0].BaseSequence != 0 || at[0].ProducerId == spy.attempts("first")[0].ProducerId {
		t.Errorf("the request after the refusal: %v; want a new producer id at sequence 0", at)
	}
	if got := strings.Join(partitionValues(t, n.capnpAddr, "t"), ","); got != "first,after" {
		t.Errorf("partition holds %s, want first,after", got)
	}
}

// TestGrpcProducerWithoutProducerIDs: a server whose InitProducerId is
// Unimplemented (it does not grant ids) gets unstamped requests, with one
// warning, and the records are acknowledged.
func TestGrpcProducerWithoutProducerIDs(t *testing.T) {
	n := startFaultyNode(t)
	ctx := testCtx(t)
	createGrpcTopic(t, n.grpcAddr, "t")
	spy := &publishSpy{}
	spy.setFault(func(method string, req any, invoke func() error) error {
		if _, ok := req.(*sqv1.InitProducerIdRequest); ok {
			return status.Error(codes.Unimplemented, "InitProducerId: this server does not grant producer ids")
		}
		return invoke()
	})
	var logs logBuffer
	p := newSpiedGrpcProducer(t, n.grpcAddr, spy, func(c *GrpcProducerConfig) { c.Logger = logs.logger() })
	for _, v := range []string{"a", "b"} {
		if _, err := p.Send(ctx, "t", nil, []byte(v)); err != nil {
			t.Fatal(err)
		}
		if at := spy.attempts(v); len(at) != 1 || at[0].Idempotent {
			t.Errorf("publish of %s: %v, want one unstamped request", v, at)
		}
	}
	if k := spy.initCalls(); k != 1 {
		t.Errorf("InitProducerId called %d times, want 1 (idempotence off after it)", k)
	}
	if k := strings.Count(logs.String(), "does not grant idempotent producer ids"); k != 1 {
		t.Errorf("%d warnings, want 1:\n%s", k, logs.String())
	}
}
