package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/control/telemetry"
	"github.com/seedqueue/sq/engine"
)

// receiver is an in-process OTLP/gRPC trace collector.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	got   chan struct{}
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	select {
	case r.got <- struct{}{}:
	default:
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func startReceiver(t *testing.T) (*receiver, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{got: make(chan struct{}, 1)}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, r)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return r, "http://" + ln.Addr().String()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestDisabledWithoutEndpoint(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Enabled() || tel.Tracer != nil {
		t.Fatal("telemetry enabled without OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestPublishSpanReachesCollector(t *testing.T) {
	rcv, endpoint := startReceiver(t)
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.Options{Version: "t", Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if tel.ServiceName != telemetry.DefaultServiceName {
		t.Errorf("service name %q, want %q", tel.ServiceName, telemetry.DefaultServiceName)
	}
	srv, err := control.New(control.Options{Tracer: tel.Tracer, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), Logger: quiet(), Observer: srv.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if _, err := eng.CreateTopic("traced", 2, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var b batch.Builder
	b.Add(nil, []byte("a"), nil, 0)
	b.Add(nil, []byte("b"), nil, 0)
	buf, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Append(ctx, "traced", 1, buf); err != nil {
		t.Fatal(err)
	}
	traced := srv.Traced(eng)
	if _, err := traced.JoinGroup("g", "", "client-1", []string{"traced"}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := traced.CommitOffsets("solo", "", -1, []engine.OffsetCommit{{Topic: "traced", Partition: 1, Offset: 1}}); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(sctx); err != nil { // flushes the batcher
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var span *tracepb.Span
	names := map[string]bool{}
	for _, s := range rcv.spans {
		names[s.Name] = true
		if s.Name == "publish traced" {
			span = s
		}
	}
	for _, want := range []string{"join g", "commit solo"} {
		if !names[want] {
			t.Errorf("no %q span among %v", want, names)
		}
	}
	if span == nil {
		t.Fatalf("no \"publish traced\" span among %d received", len(rcv.spans))
	}
	attrs := map[string]string{}
	for _, kv := range span.Attributes {
		attrs[kv.Key] = kv.Value.GetStringValue()
	}
	want := map[string]string{
		"messaging.system":                   "sq",
		"messaging.operation.name":           "publish",
		"messaging.operation.type":           "send",
		"messaging.destination.name":         "traced",
		"messaging.destination.partition.id": "1",
	}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("attribute %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
		}
	}
	if _, ok := attrs["messaging.batch.message_count"]; !ok {
		t.Errorf("no messaging.batch.message_count in %v", attrs)
	}
	if span.Kind != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Errorf("span kind %v, want PRODUCER", span.Kind)
	}
}
