package telemetry_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
)

// tracerCases are the configurations compared: telemetry off (nil tracer,
// what sq-server runs without OTEL_EXPORTER_OTLP_ENDPOINT) and a no-op
// tracer (the cost of the span calls themselves).
var tracerCases = []struct {
	name   string
	tracer trace.Tracer
}{
	{"tracer=off", nil},
	{"tracer=noop", noop.NewTracerProvider().Tracer("bench")},
}

// BenchmarkObserverAppendDone measures the observer call made once per
// appended batch.
func BenchmarkObserverAppendDone(b *testing.B) {
	for _, tc := range tracerCases {
		b.Run(tc.name, func(b *testing.B) {
			srv, err := control.New(control.Options{Tracer: tc.tracer, Logger: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			obs := srv.Observer()
			ev := engine.AppendEvent{Topic: "bench", Partition: 3, Records: 10, Bytes: 1100, Start: time.Now(), Duration: time.Millisecond}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				obs.AppendDone(ctx, ev)
			}
		})
	}
}

// BenchmarkEngineAppend appends 10-record batches of 100-byte values under
// sync policy "none" (no fdatasync, so the observer's share is visible):
// without an observer, with the metrics observer and telemetry off, and
// with a no-op tracer.
func BenchmarkEngineAppend(b *testing.B) {
	cases := append([]struct {
		name   string
		tracer trace.Tracer
	}{{"observer=none", nil}}, tracerCases...)
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			opts := engine.Options{DataDir: b.TempDir(), SyncPolicy: "none", Logger: quiet()}
			if tc.name != "observer=none" {
				srv, err := control.New(control.Options{Tracer: tc.tracer, Logger: quiet()})
				if err != nil {
					b.Fatal(err)
				}
				opts.Observer = srv.Observer()
			}
			eng, err := engine.Open(opts)
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			if _, err := eng.CreateTopic("bench", 1, engine.TopicConfig{}); err != nil {
				b.Fatal(err)
			}
			var bb batch.Builder
			value := make([]byte, 100)
			for range 10 {
				bb.Add(nil, value, nil, 1)
			}
			proto, err := bb.Build()
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, len(proto))
			ctx := context.Background()
			b.SetBytes(int64(len(proto)))
			b.ReportAllocs()
			for b.Loop() {
				copy(buf, proto)
				if _, err := eng.Append(ctx, "bench", 0, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
