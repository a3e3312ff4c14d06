package control_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/sdk"
)

// sum adds every sample of family name (0 when it has none).
func sum(fams map[string]*dto.MetricFamily, name string) float64 {
	total := 0.0
	if f := fams[name]; f != nil {
		for _, m := range f.Metric {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// TestObserverSortsClientGoneFromErrors: each way a request can end
// without success lands in the error counters by catalog NAME when it is
// the server's, and in the canceled counters with code CANCELED or
// DEADLINE_EXCEEDED when the client went away; spans mark only the
// server's as errors.
func TestObserverSortsClientGoneFromErrors(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	n := startNode(t, control.Options{Tracer: tp.Tracer("test")})
	obs := n.srv.Observer()
	for i, tc := range []struct {
		err      error
		family   string // counter that must move by one
		code     string
		spanFail bool
	}{
		{context.Canceled, "canceled", "CANCELED", false},
		{fmt.Errorf("wait: %w", context.Canceled), "canceled", "CANCELED", false},
		{context.DeadlineExceeded, "canceled", "DEADLINE_EXCEEDED", false},
		{io.EOF, "canceled", "CANCELED", false},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), "canceled", "CANCELED", false},
		{fmt.Errorf("write: %w", syscall.EPIPE), "canceled", "CANCELED", false},
		{status.Error(grpccodes.Canceled, "context canceled"), "canceled", "CANCELED", false},
		{status.Error(grpccodes.DeadlineExceeded, "deadline"), "canceled", "DEADLINE_EXCEEDED", false},
		{api.NewError(api.CodeDiskFull, "full"), "errors", "DISK_FULL", true},
		{api.NewError(api.CodeUnknownTopic, "no such topic"), "errors", "UNKNOWN_TOPIC", true},
		{errors.New("boom"), "errors", "UNKNOWN", true},
		{syscall.EIO, "errors", "UNKNOWN", true},
	} {
		for _, op := range []string{"publish", "fetch"} {
			before := scrape(t, n)
			rec.Reset()
			if op == "publish" {
				obs.AppendDone(context.Background(), engine.AppendEvent{Topic: "t", Err: tc.err, Start: time.Now()})
			} else {
				obs.FetchDone(context.Background(), engine.FetchEvent{Topic: "t", Err: tc.err, Start: time.Now()})
			}
			after := scrape(t, n)
			errs, canceled := "sq_"+op+"_errors_total", "sq_"+op+"_canceled_total"
			moved, still := canceled, errs
			if tc.family == "errors" {
				moved, still = errs, canceled
			}
			if d := value(after, moved, map[string]string{"code": tc.code}) - max(0, value(before, moved, map[string]string{"code": tc.code})); d != 1 {
				t.Errorf("case %d %s (%v): %s{code=%q} moved by %v, want 1", i, op, tc.err, moved, tc.code, d)
			}
			if d := sum(after, still) - sum(before, still); d != 0 {
				t.Errorf("case %d %s (%v): %s moved by %v, want 0", i, op, tc.err, still, d)
			}
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("case %d %s: %d spans, want 1", i, op, len(spans))
			}
			failed := spans[0].Status().Code == codes.Error
			if failed != tc.spanFail {
				t.Errorf("case %d %s (%v): span status error = %v, want %v", i, op, tc.err, failed, tc.spanFail)
			}
			var outcome, errType string
			for _, a := range spans[0].Attributes() {
				switch a.Key {
				case "sq.outcome":
					outcome = a.Value.AsString()
				case "error.type":
					errType = a.Value.AsString()
				}
			}
			if tc.spanFail && (errType != tc.code || outcome != "") {
				t.Errorf("case %d %s: span error.type %q sq.outcome %q, want %q and none", i, op, errType, outcome, tc.code)
			}
			if !tc.spanFail && (outcome != tc.code || errType != "") {
				t.Errorf("case %d %s: span sq.outcome %q error.type %q, want %q and none", i, op, outcome, errType, tc.code)
			}
		}
	}
}

// TestClientCancelIsNotAnError: long-poll fetches whose client goes away
// (a gRPC Subscribe cancelled by its client, a Cap'n Proto connection
// closed during a fetch, as Ctrl-C on `sq consume --follow` does) move
// sq_fetch_canceled_total{code="CANCELED"} and never the error counter.
func TestClientCancelIsNotAnError(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx := context.Background()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "c", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	canceled := func() float64 {
		return max(0, value(scrape(t, n), "sq_fetch_canceled_total", map[string]string{"code": "CANCELED"}))
	}

	// Cap'n Proto: three fetches wait at the high watermark, then the
	// client closes its connection.
	cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 3)
	for p := range 3 {
		go func() {
			_, err := cl.Fetch(ctx, sdk.FetchRequest{Topic: "c", Partition: uint32(p), MaxWait: time.Minute})
			done <- err
		}()
	}
	eventually(t, "three fetches waiting", func() bool { return n.eng.InFlight() == 3 })
	cl.Close()
	for range 3 {
		if err := <-done; err != nil {
			t.Logf("fetch after the client closed: %v", err)
		}
	}
	eventually(t, "three canceled fetches counted", func() bool { return canceled() == 3 })

	// gRPC: a Subscribe waiting for records is cancelled by its client.
	// Its long poll is re-issued every SubscribeMaxWait, so try until a
	// cancel lands during one.
	msg := sqv1.NewMessagingClient(n.conn)
	eventually(t, "a cancelled Subscribe counted", func() bool {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if _, err := msg.Subscribe(sctx, &sqv1.SubscribeRequest{Topic: "c", Partition: 1, From: sqv1.StartFrom_START_FROM_LATEST}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for n.eng.InFlight() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		cancel()
		eventuallyQuiet(n)
		return canceled() > 3
	})
	fams := scrape(t, n)
	if s := sum(fams, "sq_fetch_errors_total"); s != 0 {
		t.Errorf("sq_fetch_errors_total = %v after clients cancelled, want 0", s)
	}
	if s := sum(fams, "sq_publish_errors_total"); s != 0 {
		t.Errorf("sq_publish_errors_total = %v, want 0", s)
	}
}

// eventuallyQuiet waits (bounded) until no fetch runs in n's engine.
func eventuallyQuiet(n *node) {
	deadline := time.Now().Add(10 * time.Second)
	for n.eng.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}
