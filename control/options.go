package control

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/acl"
	"github.com/seedqueue/sq/internal/authn"
	"github.com/seedqueue/sq/internal/quota"

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
	// DefaultMaxInflightRequestBytes is the default of
	// Options.MaxInflightRequestBytes: 256 MiB, the data plane's default
	// request budget.
	DefaultMaxInflightRequestBytes = 256 << 20
	// DefaultRecvTimeout is the default of Options.RecvTimeout, the data
	// plane's default frame read timeout.
	DefaultRecvTimeout = 30 * time.Second
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
	// TLS, when set, is the server TLS configuration of both the gRPC
	// plane (through credentials.NewTLS, which adds the "h2" ALPN
	// protocol) and the HTTP endpoints (ServeHTTP): each then accepts TLS
	// connections only. Nil (the default): plaintext. Build it with
	// certificates that may change between handshakes (GetCertificate,
	// GetConfigForClient) to rotate them without a restart.
	TLS *tls.Config
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
	// MaxConnectionsPerIP bounds the open gRPC connections of one client
	// IP address (Kafka's max.connections.per.ip): one more is closed at
	// once as beyond MaxConnections, counted in
	// sq_grpc_rejected_connections_per_ip_total. 0 (the default) sets no
	// bound.
	MaxConnectionsPerIP int
	// MaxConcurrentStreams bounds the calls in progress on one gRPC
	// connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; grpc-go's default
	// is unlimited). With MaxConnections and MaxBatchBytes it bounds what
	// clients can make the control plane hold: a message is buffered as its
	// bytes arrive, up to MaxBatchBytes plus 1 MiB per call. Default
	// DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32
	// MaxInflightRequestBytes bounds, in bytes, the request messages all
	// gRPC calls together may hold: a call is charged twice the receive
	// limit (MaxBatchBytes plus 1 MiB: the bytes as they arrived and their
	// contiguous copy while decoding) when its headers arrive, before any
	// byte of its message is read, and gives it back once its message is
	// received (a call whose client streams messages: when it ends); a
	// request whose decoded form is larger than 64 KiB is charged its
	// estimated decoded size until its handler is done with it; Subscribe
	// responses take up to half. A call that finds no room waits for it
	// before its message is read (at most 64 such calls; beyond, THROTTLED:
	// gRPC RESOURCE_EXHAUSTED, retriable). At least 2 × (MaxBatchBytes +
	// 1 MiB). Default DefaultMaxInflightRequestBytes.
	MaxInflightRequestBytes int64
	// RecvTimeout bounds the wait for a call's request message from its
	// headers, or from the moment it got its charge when it waited for
	// one (for a call whose client streams messages: also from its
	// previous message); past it the call is cancelled and its charge
	// given back, so a client that stalls mid-message cannot hold the
	// budget. It also bounds a Subscribe response's wait for room (then
	// THROTTLED). Default DefaultRecvTimeout.
	RecvTimeout time.Duration
	// Authorizer, when enabled, checks every sq.v1 call against the
	// ACLs (authz.go; docs/security.md, "Authorization"): a call it
	// refuses fails with AUTHORIZATION_FAILED (gRPC PermissionDenied), and
	// listings hold only what the caller may describe. Nil (the default)
	// or disabled: every call is allowed.
	Authorizer *acl.Authorizer
	// Authenticator runs the SCRAM exchanges of Users.Authenticate and
	// checks the passwords of /metrics (authn.go). Nil: no user store;
	// Authenticate fails with AUTHENTICATION_FAILED.
	Authenticator *authn.Authenticator
	// Sessions holds the tokens Authenticate issues. Default
	// authn.NewSessions(0, 0, Now).
	Sessions *authn.Sessions
	// AuthRequired refuses every call that is not authenticated (by a
	// session token or a verified client certificate) with
	// AUTHENTICATION_FAILED, but grpc.health.v1 and Users.Authenticate.
	AuthRequired bool
	// MetricsAuth makes /metrics require a verified client certificate
	// or HTTP Basic credentials of a SCRAM user; /healthz and /readyz
	// stay anonymous.
	MetricsAuth bool
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Quotas, when set, measures Publish, PublishStream and Subscribe
	// against the byte-rate quotas of the caller's principal and holds the
	// calls that go over back (throttle.go). The server that stores the
	// quotas fills it (quota.Manager.SetTable). Nil: no quotas.
	Quotas *quota.Manager
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
	if o.MaxInflightRequestBytes == 0 {
		o.MaxInflightRequestBytes = DefaultMaxInflightRequestBytes
	}
	if o.RecvTimeout == 0 {
		o.RecvTimeout = DefaultRecvTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sessions == nil {
		o.Sessions = authn.NewSessions(0, 0, o.Now)
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
	if o.MaxConnectionsPerIP < 0 {
		errs = append(errs, errors.New("control: MaxConnectionsPerIP must not be negative"))
	}
	if need := recvCharge(o.MaxBatchBytes); o.MaxInflightRequestBytes < need {
		errs = append(errs, fmt.Errorf("control: MaxInflightRequestBytes %d must hold one request's charge, 2 × (MaxBatchBytes + 1 MiB) = %d", o.MaxInflightRequestBytes, need))
	}
	if o.RecvTimeout < 0 {
		errs = append(errs, errors.New("control: RecvTimeout must be positive"))
	}
	return errors.Join(errs...)
}
