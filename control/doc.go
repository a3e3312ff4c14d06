// Package control is SQ's control plane (docs/architecture.md §5): the gRPC services of
// api/sq.proto (topics, groups, cluster, and publish/subscribe for clients
// that cannot speak Cap'n Proto) with the standard grpc.health.v1 service
// and server reflection, and the HTTP endpoints /healthz, /readyz and
// /metrics (Prometheus text format).
//
// The composition root (cmd/sq-server) creates the Server with New before
// the engine exists, serves HTTP at once (/healthz 200, /readyz 503) and
// installs Server.Observer as the engine's observer, so the append, fetch
// and fsync paths feed the metrics and the traces. After engine.Open
// (recovery) it calls SetEngine, serves gRPC, and SetReady(true) once every
// listener is up; StartShutdown turns readiness and health off again before
// the listeners stop.
//
// # Errors
//
// Engine errors are *api.Error values; they reach gRPC clients as a status
// whose code follows the catalog (ToStatus) and whose details carry a
// google.rpc.ErrorInfo with Reason = the catalog NAME and metadata "code"
// (the catalog number), plus "range_start"/"range_end" for range errors.
// The SDK (sdk.GrpcProducer, sdk.Admin, ...) turns such a status back into
// an *api.Error.
//
// # Metrics
//
// Every metric is named sq_* with its unit in the name; labels are at most
// topic and partition (never per record or client). See docs/operations.md
// for the list.
package control
