package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/acl"
	"github.com/seedqueue/sq/internal/authn"
	"github.com/seedqueue/sq/internal/quota"
)

// Defaults applied by Options.Defaults to zero fields.
const (
	// DefaultAddr is the data-plane listen address (docs/architecture.md §4: port 6064).
	DefaultAddr = ":6064"
	// DefaultMaxInFlightPerConn bounds the requests served at once on one
	// connection.
	DefaultMaxInFlightPerConn = 256
	// DefaultMaxInFlightBytesPerConn bounds the publish tails one
	// connection holds in memory: 64 MiB, four batches of the default
	// 16 MiB limit.
	DefaultMaxInFlightBytesPerConn = 64 << 20
	// DefaultMaxFetchWait caps a fetch's maxWaitMs long poll.
	DefaultMaxFetchWait = 30 * time.Second
	// DefaultHandshakeTimeout bounds the wait for a new connection's
	// handshake request.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a connection with no request in flight and
	// no frame received for this long (Kafka's connections.max.idle.ms).
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultWriteTimeout bounds the write of one response frame with its
	// records tail; a client that stops reading is disconnected after it.
	DefaultWriteTimeout = 60 * time.Second
	// DefaultMaxInFlightRequestBytes bounds the request bytes held by all
	// connections together: 256 MiB (Kafka's queued.max.request.bytes).
	DefaultMaxInFlightRequestBytes = 256 << 20
	// DefaultFrameReadTimeout bounds the read of one frame, from its first
	// byte to the last byte of its records tail.
	DefaultFrameReadTimeout = 30 * time.Second
	// DefaultMaxConnections bounds the open data-plane connections.
	DefaultMaxConnections = 10000
)

// maxInFlightLimit is the largest MaxInFlightPerConn Validate accepts: each
// in-flight request may hold a frame and a records tail in memory.
const maxInFlightLimit = 1 << 16

// MinInFlightRequestBytes is the least Options.MaxInFlightRequestBytes New
// accepts for the given frame and batch limits: room for one largest
// frame's charge (8 times its size, for its decoded fields) and one largest
// batch, each with the fixed charge of a request (8 KiB).
func MinInFlightRequestBytes(maxFrameBytes, maxBatchBytes uint32) int64 {
	return frameCharge(uint64(maxFrameBytes)) + int64(maxBatchBytes) + requestOverheadBytes
}

// Options configure a Server. The zero value is valid after Defaults.
type Options struct {
	// Addr is the TCP address ListenAndServe listens on, "host:port".
	// Default DefaultAddr.
	Addr string
	// AdvertisedAddr is the data-plane address returned in metadata
	// responses (dataAddress). Empty means the listener's address.
	AdvertisedAddr string
	// NodeID names this node in handshake and metadata responses.
	NodeID string
	// ClusterID is the cluster id metadata responses carry when the Broker
	// is not a ClusterBroker (which names its own). Empty by default.
	ClusterID string
	// ServerVersion is the build version sent in the handshake response.
	ServerVersion string
	// MaxFrameBytes bounds the Cap'n Proto part of one frame, in bytes,
	// segment table included. Default api.DefaultMaxFrameBytes (1 MiB). The
	// records tail is bounded separately by the broker's MaxBatchBytes.
	MaxFrameBytes uint32
	// MaxInFlightPerConn bounds the requests served at once per connection;
	// when it is reached the server stops reading that connection until a
	// response has been written (back-pressure). Default
	// DefaultMaxInFlightPerConn, at most 65536.
	MaxInFlightPerConn int
	// MaxInFlightBytesPerConn bounds the bytes of publish tails one
	// connection's requests hold in memory, from the read of a tail until
	// its append returns; when it is reached the server stops reading that
	// connection. One tail larger than the bound is read when nothing else
	// is held. Default DefaultMaxInFlightBytesPerConn (64 MiB).
	MaxInFlightBytesPerConn int64
	// MaxFetchWait caps the long poll of one fetch (maxWaitMs). Default
	// DefaultMaxFetchWait (30 s).
	MaxFetchWait time.Duration
	// HandshakeTimeout bounds the wait for the first frame of a connection.
	// Default DefaultHandshakeTimeout (10 s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that has had no request in flight and
	// no frame for this long. Default DefaultIdleTimeout (10 min); negative
	// disables it.
	IdleTimeout time.Duration
	// WriteTimeout bounds the write of one response. Default
	// DefaultWriteTimeout (60 s); negative disables it.
	WriteTimeout time.Duration
	// MaxInFlightRequestBytes bounds, in bytes, what the requests of all
	// connections together hold in memory (Kafka's
	// queued.max.request.bytes): the Cap'n Proto part of each frame being
	// read or served (charged 8 times its size, for its decoded fields),
	// the records tail of each publish from its read until its append
	// returns, and 8 KiB per request and per push subscription. A connection takes its share before it allocates a
	// buffer; when the budget is spent it stops reading (TCP flow control
	// slows the client) until earlier requests are answered. Default
	// DefaultMaxInFlightRequestBytes (256 MiB); New refuses a budget that
	// cannot hold one largest frame and one largest batch.
	MaxInFlightRequestBytes int64
	// FrameReadTimeout bounds the read of one frame once its first byte has
	// arrived: the stream header, the Cap'n Proto part and the records
	// tail. Time spent waiting for MaxInFlightRequestBytes or
	// MaxInFlightBytesPerConn is not counted. A connection that exceeds it
	// is closed. The first frame is bounded by HandshakeTimeout instead.
	// Default DefaultFrameReadTimeout (30 s).
	FrameReadTimeout time.Duration
	// MaxConnections bounds the open connections. A connection accepted
	// beyond it is closed at once, before anything is read, and counted in
	// Stats; a WARN line says so at most once per second. Default
	// DefaultMaxConnections (10,000).
	MaxConnections int
	// MaxConnectionsPerIP bounds the open connections of one client IP
	// address (Kafka's max.connections.per.ip): one more from that
	// address is closed at once, as beyond MaxConnections, and counted in
	// Stats.RejectedConnectionsPerIP. 0 (the default) sets no bound.
	MaxConnectionsPerIP int
	// Authorizer, when enabled, checks every request against the ACLs
	// (authz.go; docs/security.md, "Authorization"): a request it refuses
	// is answered with AUTHORIZATION_FAILED, and listings hold only what
	// the connection's principal may describe. Nil (the default) or
	// disabled: every request is allowed.
	Authorizer *acl.Authorizer
	// Authenticator runs the SASL exchanges of SaslAuthenticate requests
	// (SCRAM-SHA-256, sasl.go). Nil: every exchange is refused with
	// AUTHENTICATION_FAILED (no user store).
	Authenticator *authn.Authenticator
	// AuthRequired refuses every request of a connection that is not
	// authenticated (by a SASL exchange or a verified client certificate)
	// with AUTHENTICATION_FAILED, but the handshake and SaslAuthenticate.
	AuthRequired bool
	// Logger receives one line per closed connection and per unexpected
	// error. Default slog.Default().
	Logger *slog.Logger
	// Quotas, when set, measures publishes and fetches (and pushes)
	// against the byte-rate quotas of the connection's principal and
	// throttles the connection that goes over (quota.go). Replica fetches
	// are never measured. Nil: no quotas.
	Quotas *quota.Manager
}

// Defaults fills zero fields with their defaults.
func (o *Options) Defaults() {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.MaxFrameBytes == 0 {
		o.MaxFrameBytes = api.DefaultMaxFrameBytes
	}
	if o.MaxInFlightPerConn == 0 {
		o.MaxInFlightPerConn = DefaultMaxInFlightPerConn
	}
	if o.MaxInFlightBytesPerConn == 0 {
		o.MaxInFlightBytesPerConn = DefaultMaxInFlightBytesPerConn
	}
	if o.MaxFetchWait == 0 {
		o.MaxFetchWait = DefaultMaxFetchWait
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxInFlightRequestBytes == 0 {
		o.MaxInFlightRequestBytes = DefaultMaxInFlightRequestBytes
	}
	if o.FrameReadTimeout == 0 {
		o.FrameReadTimeout = DefaultFrameReadTimeout
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports every invalid field at once, joined with errors.Join.
// Call it after Defaults.
func (o *Options) Validate() error {
	var errs []error
	if o.Addr == "" {
		errs = append(errs, errors.New("dataplane: Addr is empty"))
	}
	// A frame must at least hold the stream header and a root pointer.
	if o.MaxFrameBytes < 64 {
		errs = append(errs, fmt.Errorf("dataplane: MaxFrameBytes %d is below 64", o.MaxFrameBytes))
	}
	if o.MaxInFlightPerConn < 1 || o.MaxInFlightPerConn > maxInFlightLimit {
		errs = append(errs, fmt.Errorf("dataplane: MaxInFlightPerConn %d outside [1, %d]", o.MaxInFlightPerConn, maxInFlightLimit))
	}
	if o.MaxInFlightBytesPerConn < 0 {
		errs = append(errs, fmt.Errorf("dataplane: MaxInFlightBytesPerConn %d is negative", o.MaxInFlightBytesPerConn))
	}
	if o.MaxFetchWait < 0 {
		errs = append(errs, fmt.Errorf("dataplane: MaxFetchWait %v is negative", o.MaxFetchWait))
	}
	if o.HandshakeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("dataplane: HandshakeTimeout %v is not positive", o.HandshakeTimeout))
	}
	if o.MaxInFlightRequestBytes < 0 {
		errs = append(errs, fmt.Errorf("dataplane: MaxInFlightRequestBytes %d is negative", o.MaxInFlightRequestBytes))
	}
	if o.FrameReadTimeout <= 0 {
		errs = append(errs, fmt.Errorf("dataplane: FrameReadTimeout %v is not positive", o.FrameReadTimeout))
	}
	if o.MaxConnections < 1 {
		errs = append(errs, fmt.Errorf("dataplane: MaxConnections %d is below 1", o.MaxConnections))
	}
	if o.MaxConnectionsPerIP < 0 {
		errs = append(errs, fmt.Errorf("dataplane: MaxConnectionsPerIP %d is negative", o.MaxConnectionsPerIP))
	}
	if o.Logger == nil {
		errs = append(errs, errors.New("dataplane: Logger is nil"))
	}
	return errors.Join(errs...)
}
