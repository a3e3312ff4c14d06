// Package telemetry sets up OpenTelemetry export for sq-server (docs/architecture.md §5).
//
// When OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT /
// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) is set, Setup starts an OTLP/gRPC
// trace exporter behind a batching tracer provider and an OTLP/gRPC metric
// exporter that periodically sends every metric of the server's Prometheus
// registry (through the OpenTelemetry Prometheus bridge, so each sq_* metric
// is counted once, on the hot path, for both Prometheus and OTLP). The
// resource carries service.name from OTEL_SERVICE_NAME, default "sq-server",
// service.version, and OTEL_RESOURCE_ATTRIBUTES. The other standard
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, insecure, certificate)
// are read by the exporters; see
// https://opentelemetry.io/docs/specs/otel/protocol/exporter/.
//
// When none is set, Setup returns a Telemetry with a nil Tracer: no
// exporter, no provider and no goroutine runs, and the engine observer
// skips span creation with one nil check.
package telemetry
