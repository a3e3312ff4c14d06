package control

import (
	"errors"
	"log/slog"
	"time"

	"github.com/seedqueue/sq/api"

	"go.opentelemetry.io/otel/trace"
)

// Defaults of the gRPC connection limits.
const (
	// DefaultMaxConnections is the default of Options.MaxConnections, the
	// data plane's default too.
	DefaultMaxConnections = 10000
	// DefaultMaxConcurrentStreams is the default of
	// Options.MaxConcurrentStreams: HTTP/2's recommended minimum (RFC 9113
	// §6.5.2).
	DefaultMaxConcurrentStreams = 100
)

// Options configure a Server. The zero value is valid after Defaults.
type Options struct {
	// NodeID and ClusterID identify this node in Cluster responses.
	// Defaults "node-1" and "default".
	NodeID    string
	ClusterID string
	// Version is the server build version (Cluster.NodeInfo, sq_build_info).
	Version string
	// GRPCAddr, CapnpAddr and HTTPAddr are the configured listen addresses,
	// reported by Cluster.NodeInfo and Cluster.Members until the listener
	// of the plane is known (ServeGRPC, ServeHTTP, CountConns), whose bound
	// address is reported from then on.
	GRPCAddr  string
	CapnpAddr string
	HTTPAddr  string
	// MaxBatchBytes is the engine's batch limit; gRPC messages up to it
	// plus 1 MiB of framing are accepted. Default api.DefaultMaxBatchBytes.
	MaxBatchBytes int
	// Tracer makes the spans of publish, fetch and commit. Nil (the
	// default) makes none and costs nothing on the hot path.
	Tracer trace.Tracer
	// SubscribeMaxWait is the long poll of one Subscribe fetch; the stream
	// goes on after it. Default 1s.
	SubscribeMaxWait time.Duration
	// SubscribeMaxBytes is the default soft cap of one Subscribe read, in
	// bytes (at least one batch); what a read returns is sent as responses
	// below GrpcMaxMessageBytes. Default 1 MiB.
	SubscribeMaxBytes int
	// MaxConnections bounds the open gRPC connections. A connection
	// accepted beyond it is closed at once, before the HTTP/2 preface, and
	// counted in sq_grpc_rejected_connections_total; a WARN line says so at
	// most once per second. Default DefaultMaxConnections.
	MaxConnections int
	// MaxConcurrentStreams bounds the calls in progress on one gRPC
	// connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; grpc-go's default
	// is unlimited). With MaxConnections and MaxBatchBytes it bounds what
	// clients can make the control plane hold: a message is buffered as its
	// bytes arrive, up to MaxBatchBytes plus 1 MiB per call. Default
	// DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Defaults fills every zero field with its default.
func (o *Options) Defaults() {
	if o.NodeID == "" {
		o.NodeID = "node-1"
	}
	if o.ClusterID == "" {
		o.ClusterID = "default"
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = api.DefaultMaxBatchBytes
	}
	if o.SubscribeMaxWait == 0 {
		o.SubscribeMaxWait = time.Second
	}
	if o.SubscribeMaxBytes == 0 {
		o.SubscribeMaxBytes = 1 << 20
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports every invalid field at once (errors.Join).
func (o *Options) Validate() error {
	var errs []error
	if o.SubscribeMaxWait < 0 || o.SubscribeMaxWait > 30*time.Second {
		errs = append(errs, errors.New("control: SubscribeMaxWait must be in [0, 30s]"))
	}
	if o.MaxBatchBytes < 1 {
		errs = append(errs, errors.New("control: MaxBatchBytes must be positive"))
	}
	if o.SubscribeMaxBytes < 1 {
		errs = append(errs, errors.New("control: SubscribeMaxBytes must be positive"))
	}
	if o.MaxConnections < 1 {
		errs = append(errs, errors.New("control: MaxConnections must be positive"))
	}
	return errors.Join(errs...)
}
