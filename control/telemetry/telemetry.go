package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	promb "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME is unset.
const DefaultServiceName = "sq-server"

// InstrumentationName names the tracer of the SQ server.
const InstrumentationName = "github.com/seedqueue/sq"

// Options configure Setup.
type Options struct {
	// Version is service.version.
	Version string
	// Gatherer is the Prometheus registry whose metrics are exported over
	// OTLP; nil exports no metrics.
	Gatherer promclient.Gatherer
	// MetricInterval is the export period of metrics. Default 30s (or
	// OTEL_METRIC_EXPORT_INTERVAL in ms).
	MetricInterval time.Duration
	// Getenv reads the environment. Default: none set (tests pass a map);
	// the server passes os.Getenv.
	Getenv func(string) string
}

// Telemetry is the running OpenTelemetry export.
type Telemetry struct {
	// Tracer makes the server's spans; nil when tracing is off.
	Tracer trace.Tracer
	// ServiceName is the resource's service.name ("" when off).
	ServiceName string
	shutdown    []func(context.Context) error
}

// Enabled reports whether an exporter runs.
func (t *Telemetry) Enabled() bool { return len(t.shutdown) > 0 }

// Shutdown flushes and stops the exporters. It is safe on a disabled
// Telemetry.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	t.shutdown = nil
	return errors.Join(errs...)
}

// Setup starts OTLP/gRPC export of traces and metrics when the standard
// endpoint variables ask for it; otherwise it returns a disabled
// Telemetry. Errors come from building the exporters (a bad endpoint URL),
// never from an unreachable collector: export failures are retried and
// reported through the OpenTelemetry error handler.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	tracesOn := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	metricsOn := opts.Gatherer != nil && (getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "")
	t := &Telemetry{}
	if !tracesOn && !metricsOn {
		return t, nil
	}
	t.ServiceName = getenv("OTEL_SERVICE_NAME")
	if t.ServiceName == "" {
		t.ServiceName = DefaultServiceName
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(t.ServiceName), semconv.ServiceVersion(opts.Version)))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if tracesOn {
		exp, err := otlptracegrpc.New(ctx, traceOptions(getenv)...)
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.Tracer = tp.Tracer(InstrumentationName, trace.WithInstrumentationVersion(opts.Version))
		t.shutdown = append(t.shutdown, tp.Shutdown)
	}
	if metricsOn {
		exp, err := otlpmetricgrpc.New(ctx, metricOptions(getenv)...)
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: OTLP metric exporter: %w", err)
		}
		ropts := []sdkmetric.PeriodicReaderOption{sdkmetric.WithProducer(promb.NewMetricProducer(promb.WithGatherer(opts.Gatherer)))}
		if opts.MetricInterval > 0 {
			ropts = append(ropts, sdkmetric.WithInterval(opts.MetricInterval))
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, ropts...)))
		t.shutdown = append(t.shutdown, mp.Shutdown)
	}
	return t, nil
}

// traceOptions passes the endpoint explicitly so that Getenv (not only the
// process environment) decides; the exporter reads the other variables.
func traceOptions(getenv func(string) string) []otlptracegrpc.Option {
	if u := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); u != "" {
		return []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(u)}
	}
	return []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))}
}

func metricOptions(getenv func(string) string) []otlpmetricgrpc.Option {
	if u := getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"); u != "" {
		return []otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpointURL(u)}
	}
	return []otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpointURL(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))}
}
