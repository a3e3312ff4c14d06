package sdk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/seedqueue/sq/api"
)

// DefaultAddr is the data-plane address used when a config leaves Addr
// empty: the server's default --capnp-host.
const DefaultAddr = "127.0.0.1:6064"

// Defaults of ClientConfig (and of the same fields of ProducerConfig and
// ConsumerConfig).
const (
	DefaultDialTimeout         = 10 * time.Second
	DefaultRequestTimeout      = 30 * time.Second
	DefaultReconnectBackoff    = 50 * time.Millisecond
	DefaultReconnectBackoffMax = 2 * time.Second
)

// ClientConfig configures a Client. The zero value is valid: every zero
// field takes the default named in its comment.
type ClientConfig struct {
	// Addr is the server's data-plane address, host:port. Default
	// DefaultAddr ("127.0.0.1:6064").
	Addr string
	// ClientID names this client in the server's logs and metrics, and in
	// group descriptions; valid UTF-8 (a group join with any other bytes
	// fails with INVALID_REQUEST). Default "sq-go".
	ClientID string
	// DialTimeout bounds one TCP dial plus handshake; a server that does not
	// answer within it fails the dial with a *ConnectTimeoutError. Default
	// 10s.
	DialTimeout time.Duration
	// RequestTimeout bounds one request from send to response, on top of a
	// fetch's MaxWait, when the caller's context has no earlier deadline.
	// Default 30s.
	RequestTimeout time.Duration
	// ReconnectBackoff is the wait before the first redial after a failed
	// dial; it doubles per consecutive failure up to ReconnectBackoffMax,
	// with jitter. Defaults 50ms and 2s.
	ReconnectBackoff    time.Duration
	ReconnectBackoffMax time.Duration
	// Logger receives connection events. Default: discard.
	Logger *slog.Logger
	// Dialer opens the TCP connections (DialFunc). Default: net.Dialer.
	Dialer DialFunc
	// TLSConfig, when set, makes every connection TLS (tls.Client over
	// the dialed connection; 1.2 at least unless MinVersion says more):
	// to the bootstrap node and to partition leaders. Its ServerName,
	// when empty, is the host of the address dialed, and its RootCAs
	// (nil: the system roots) verify the server's certificate; set
	// Certificates (or GetClientCertificate) for a server that requires
	// client certificates (--tls-client-ca). A failed TLS handshake is a
	// *TLSError (ErrTLS). Nil: plaintext.
	TLSConfig *tls.Config

	// throttleStats are shared by the Clients made from this config
	// (newClient sets them; Client.ThrottleStats).
	throttleStats *throttleCounters
	// SASL, when set, authenticates every connection after its handshake
	// (SCRAM{User, Password}); a refusal fails the dial with an error
	// matching api.ErrAuthenticationFailed, not retried. Nil: the
	// connection is anonymous (or authenticated by its client
	// certificate).
	SASL SASLMechanism
}

func (c ClientConfig) withDefaults() ClientConfig {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.ClientID == "" {
		c.ClientID = "sq-go"
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.ReconnectBackoff <= 0 {
		c.ReconnectBackoff = DefaultReconnectBackoff
	}
	if c.ReconnectBackoffMax < c.ReconnectBackoff {
		c.ReconnectBackoffMax = max(DefaultReconnectBackoffMax, c.ReconnectBackoff)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c.TLSConfig = withMinTLS(c.TLSConfig)
	return c
}

// withServerName returns cfg, or a clone of it with ServerName set to
// addr's host when cfg has none, as crypto/tls.Dial does.
func withServerName(cfg *tls.Config, addr string) *tls.Config {
	if cfg.ServerName != "" {
		return cfg
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	c := cfg.Clone()
	c.ServerName = host
	return c
}

// withMinTLS returns cfg, or a clone of it with MinVersion TLS 1.2 when
// it allows less; nil stays nil.
func withMinTLS(cfg *tls.Config) *tls.Config {
	if cfg == nil || cfg.MinVersion >= tls.VersionTLS12 {
		return cfg
	}
	c := cfg.Clone()
	c.MinVersion = tls.VersionTLS12
	return c
}

// Limits are the server's data-plane limits stated in its handshake. Zero
// values in the handshake are replaced by the api defaults.
type Limits struct {
	MaxRecordBytes uint32 // key + value + headers of one record
	MaxBatchBytes  uint32 // one batch, and the records tail of a publish
	MaxFrameBytes  uint32 // the Cap'n Proto part of one frame
	MaxInFlight    uint32 // requests the server serves at once per connection
	// ProtocolVersion is the data-plane protocol version the connection
	// speaks, negotiated in the handshake (api.ProtocolVersion); from
	// api.PublishBatchesVersion on, the produce pipeline sends the batches
	// of many partitions in one publishBatches request.
	ProtocolVersion uint16
	ServerVersion   string
	NodeID          string
}

func (l Limits) withDefaults() Limits {
	if l.MaxRecordBytes == 0 {
		l.MaxRecordBytes = api.DefaultMaxRecordBytes
	}
	if l.MaxBatchBytes == 0 {
		l.MaxBatchBytes = api.DefaultMaxBatchBytes
	}
	if l.MaxFrameBytes == 0 {
		l.MaxFrameBytes = api.DefaultMaxFrameBytes
	}
	if l.MaxInFlight == 0 {
		l.MaxInFlight = defaultMaxInFlight
	}
	return l
}

// Client is a low-level data-plane client: one multiplexed TCP connection
// on which requests are pipelined (up to the server's maxInFlight) and
// answered in any order. When the connection is lost, requests in flight
// fail with ErrConnection and the next request redials, waiting an
// exponential, capped, jittered backoff after consecutive failed dials.
// Client never retries a request itself; Producer and Consumer do.
//
// A Client is safe for concurrent use.
type Client struct {
	cfg ClientConfig

	dialSem     chan struct{}   // held while dialing, so one goroutine dials
	closeCtx    context.Context // cancelled by Close; aborts a dial in progress
	closeCancel context.CancelFunc
	closed      <-chan struct{} // closeCtx.Done()

	mu        sync.Mutex
	cur       *conn
	draining  []*conn // replaced connections whose readers still wait for responses
	limits    Limits
	failures  int       // consecutive failed dials
	nextDial  time.Time // no dial before this
	closeOnce sync.Once

	// throttle is the quota throttle of the node, kept across its
	// connections (throttle.go).
	throttle throttleState
}

// Dial connects to cfg.Addr and performs the handshake, both within
// cfg.DialTimeout. It fails with ErrInvalidConfig when cfg.Validate
// refuses cfg, with an error wrapping ErrConnection when the
// server cannot be reached (it does not wait for a server to come up), a
// *ConnectTimeoutError (ErrConnectTimeout, also ErrConnection) when the
// address accepts but does not answer in time, a *WrongProtocolError
// (ErrNotDataPlane) when another protocol answers (for example the gRPC
// control plane's HTTP/2), or with the server's *api.Error (for example
// UNSUPPORTED_VERSION).
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := newClient(cfg)
	if _, err := c.conn(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// newClient returns a Client for cfg that dials at its first request.
// Until its first handshake its Limits are the api defaults.
func newClient(cfg ClientConfig) *Client {
	c := &Client{
		cfg:     cfg.withDefaults(),
		dialSem: make(chan struct{}, 1),
		limits:  Limits{}.withDefaults(),
	}
	if c.cfg.throttleStats == nil {
		c.cfg.throttleStats = &throttleCounters{}
	}
	c.throttle.stats = c.cfg.throttleStats
	c.closeCtx, c.closeCancel = context.WithCancel(context.Background())
	c.closed = c.closeCtx.Done()
	return c
}

// Addr returns the address the Client connects to (ClientConfig.Addr):
// for a LeaderClient, the partition leader's data-plane address.
func (c *Client) Addr() string { return c.cfg.Addr }

// Limits returns the limits of the server's latest handshake.
func (c *Client) Limits() Limits {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limits
}

// Close closes the connection. Requests in flight fail with ErrClosed.
// Close is idempotent and always returns nil.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closeCancel()
		c.mu.Lock()
		cur := c.cur
		c.cur = nil
		draining := c.draining
		c.draining = nil
		c.mu.Unlock()
		if cur != nil {
			cur.close(ErrClosed)
		}
		for _, cn := range draining {
			cn.close(ErrClosed)
		}
		// Wait for a dial in progress (aborted by closeCtx) to end.
		c.dialSem <- struct{}{}
	})
	return nil
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// conn returns the live connection, dialing a new one if there is none.
func (c *Client) conn(ctx context.Context) (*conn, error) {
	if cn := c.live(); cn != nil {
		return cn, nil
	}
	select {
	case c.dialSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, ErrClosed
	}
	defer func() { <-c.dialSem }()
	if c.isClosed() {
		return nil, ErrClosed
	}
	if cn := c.live(); cn != nil {
		return cn, nil
	}
	// Close aborts the backoff wait and the dial.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.closeCtx, cancel)()
	c.mu.Lock()
	wait := time.Until(c.nextDial)
	old := c.cur
	c.cur = nil
	if old != nil && !old.ended() {
		// Its writer failed; its reader still delivers the responses to
		// what it had sent, and ends the connection by itself.
		c.draining = append(c.draining, old)
		old = nil
	}
	live := c.draining[:0]
	for _, cn := range c.draining {
		if !cn.ended() {
			live = append(live, cn)
		}
	}
	clear(c.draining[len(live):])
	c.draining = live
	c.mu.Unlock()
	if old != nil {
		old.close(errors.New("replaced"))
	}
	if err := sleep(ctx, wait); err != nil {
		if c.isClosed() {
			return nil, ErrClosed
		}
		return nil, err
	}
	cn, err := dialConn(ctx, c.cfg.Dialer, c.cfg.TLSConfig, c.cfg.SASL, c.cfg.Addr, c.cfg.ClientID, c.cfg.DialTimeout, c.cfg.Logger)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.failures++
		d := backoff(c.failures, c.cfg.ReconnectBackoff, c.cfg.ReconnectBackoffMax)
		c.nextDial = time.Now().Add(d)
		c.cfg.Logger.Warn("sdk: connect failed", "addr", c.cfg.Addr, "attempt", c.failures, "retry_in", d, "err", err)
		if c.isClosed() {
			return nil, ErrClosed
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		var p permanent
		if errors.As(err, &p) {
			return nil, p.error
		}
		if errors.Is(err, ErrConnectTimeout) {
			return nil, err // names the address and the bound; matches ErrConnection
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrConnection, c.cfg.Addr, err)
	}
	if c.isClosed() {
		cn.close(ErrClosed)
		return nil, ErrClosed
	}
	if c.failures > 0 {
		c.cfg.Logger.Info("sdk: reconnected", "addr", c.cfg.Addr, "after_attempts", c.failures)
	}
	c.failures = 0
	c.nextDial = time.Time{}
	cn.throttle.Store(&c.throttle)
	c.cur = cn
	c.limits = cn.limits
	return cn, nil
}

// live returns the current connection if it has not failed.
func (c *Client) live() *conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil && !c.cur.broken() {
		return c.cur
	}
	return nil
}

// roundTrip sends one request on the live connection (dialing if needed),
// bounded by ctx and RequestTimeout+extra, and returns its response.
//
// A request that outlives RequestTimeout+extra while the caller's context
// is still live means the server stopped answering: the connection is
// closed (as Kafka clients do), so requests it holds cannot pin the
// in-flight slots, and the error wraps ErrConnection.
func (c *Client) roundTrip(parent context.Context, extra time.Duration, build func(api.Frame) error, tail []byte, maxTailBytes uint32) (response, error) {
	timeout := c.cfg.RequestTimeout + extra
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	cn, err := c.conn(ctx)
	if err != nil {
		return response{}, connectTimedOut(parent, err, timeout)
	}
	r, err := cn.roundTrip(ctx, build, tail, maxTailBytes)
	if err != nil {
		if c.isClosed() {
			return response{}, ErrClosed
		}
		if errors.Is(err, context.DeadlineExceeded) && parent.Err() == nil {
			cause := fmt.Errorf("no response within %v", timeout)
			cn.fail(cause)
			c.cfg.Logger.Warn("sdk: request timed out, closing the connection", "addr", c.cfg.Addr, "timeout", timeout)
			return response{}, fmt.Errorf("%w: %w", ErrConnection, cause)
		}
		return response{}, err
	}
	if r.f.Which() == api.Frame_Which_errorResponse {
		we, _ := r.f.ErrorResponse()
		return response{}, wireErr(we)
	}
	return r, nil
}

// connectTimedOut returns err, the failure of a request's wait for a
// connection, as a connection failure when the request's own timeout (and
// not the caller's context, parent) cut the wait short: the server could
// not be reached within timeout (a dial in progress or backing off held
// the request), which a caller retries or routes around as any other
// ErrConnection, not a context error of its own.
func connectTimedOut(parent context.Context, err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) && parent.Err() == nil {
		return fmt.Errorf("%w: no connection within %v", ErrConnection, timeout)
	}
	return err
}

// expect checks that a response frame is of the wanted kind.
func expect(f api.Frame, want api.Frame_Which) error {
	if got := f.Which(); got != want {
		return fmt.Errorf("%w: got %v, want %v", ErrUnexpectedResponse, got, want)
	}
	return nil
}
