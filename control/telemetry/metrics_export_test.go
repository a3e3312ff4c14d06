package telemetry_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"

	"github.com/seedqueue/sq/control/telemetry"
)

// metricsReceiver is an in-process OTLP/gRPC metrics collector that
// records the metric names it receives.
type metricsReceiver struct {
	collectormetrics.UnimplementedMetricsServiceServer
	mu    sync.Mutex
	names map[string]float64 // last value of sums and gauges
}

func (r *metricsReceiver) Export(_ context.Context, req *collectormetrics.ExportMetricsServiceRequest) (*collectormetrics.ExportMetricsServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rm := range req.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				v := -1.0
				if s := m.GetSum(); s != nil && len(s.DataPoints) > 0 {
					v = s.DataPoints[0].GetAsDouble()
				}
				r.names[m.Name] = v
			}
		}
	}
	return &collectormetrics.ExportMetricsServiceResponse{}, nil
}

func TestPrometheusMetricsExportedOverOTLP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &metricsReceiver{names: map[string]float64{}}
	gs := grpc.NewServer()
	collectormetrics.RegisterMetricsServiceServer(gs, rcv)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()

	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sq_published_records_total", Help: "test"}, []string{"topic"})
	reg.MustRegister(c)
	c.WithLabelValues("t").Add(42)
	env := map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://" + ln.Addr().String()}
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.Options{Gatherer: reg, MetricInterval: time.Hour, Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Tracer != nil {
		t.Error("tracing on with only the metrics endpoint set")
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(sctx); err != nil { // collects and exports once
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if v, ok := rcv.names["sq_published_records_total"]; !ok || v != 42 {
		t.Fatalf("received metrics %v, want sq_published_records_total = 42", rcv.names)
	}
}
