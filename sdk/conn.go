package sdk

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
)

// defaultMaxInFlight bounds the requests in flight on one connection when
// the server states no maxInFlight in its handshake.
const defaultMaxInFlight = 64

// response is what the reader hands to the goroutine waiting for a request:
// the response frame and its records tail, or the connection's failure.
type response struct {
	f    api.Frame
	tail []byte
	err  error
	// entry is the index, in a publishBatches response, of the result of
	// the batch this response is for (pubbatch.go).
	entry int
}

// call is one request waiting for its response.
type call struct {
	maxTailBytes uint32        // largest records tail accepted in the response
	ch           chan response // buffered 1: the reader never blocks on it
	// stream, for a subscribe, receives every push frame; the call ends
	// with a push without records (subscribe.go).
	stream *pushStream
	// fan, for a publishBatches request, are the calls of its entries:
	// each receives the response (or the failure) with its index as
	// entry, instead of ch. onDone, when set, runs once with the response.
	fan    []*call
	onDone func()
	// delivered makes deliver run once: a publishBatches request that
	// failed while being issued may also be failed by the connection.
	delivered atomic.Bool
}

// deliver hands r, the response to cl or the connection's failure, to its
// waiter (each entry's, for a publishBatches request). Called once per call.
func (cl *call) deliver(r response) {
	if cl.delivered.Swap(true) {
		return
	}
	if cl.onDone != nil {
		cl.onDone()
	}
	if cl.fan == nil {
		cl.ch <- r
		return
	}
	for i, e := range cl.fan {
		r.entry = i
		e.ch <- r
	}
}

// outFrame is one frame queued for the writer goroutine.
type outFrame struct {
	id    uint64 // the frame's correlation id
	msg   *capnp.Message
	tails [][]byte
}

// writeDrain bounds how long a connection whose write failed keeps reading
// the responses to the requests it had already written.
const writeDrain = 5 * time.Second

// conn is one handshaken data-plane connection: one writer goroutine sends
// frames (each frame and its tail in one writev), one reader goroutine
// dispatches responses by correlation id. Every request reaches the writer
// through issue. A conn is never reused after it fails; the Client dials a
// new one.
//
// A failed write ends the sending side only: the request being written
// fails at once (the server cannot have read all of it), while the
// requests written before it keep waiting for their responses, which the
// server may have sent before the connection broke (a server that answers
// every request and then closes while the client is still writing). The
// reader ends the connection once they are answered, at its next read
// error, or after writeDrain.
type conn struct {
	nc     net.Conn
	fr     *api.FrameReader
	limits Limits
	log    *slog.Logger

	sem   chan struct{} // one token per request in flight, cap maxInFlight
	out   chan outFrame
	done  chan struct{} // closed when the connection failed or was closed
	wdone chan struct{} // closed when a write failed: nothing more is sent

	mu      sync.Mutex
	err     error // why the connection ended; set once, with done closed
	werr    error // why the writer stopped; set once, with wdone closed
	nextID  uint64
	pending map[uint64]*call

	wg sync.WaitGroup

	// issued counts the frames issue queued, written those the writer
	// wrote: equal once the writer is idle, as every frame goes through
	// issue.
	issued, written atomic.Uint64

	// throttle is the node's quota throttle (its Client's; nil: none
	// kept): the reader sets it, the Client's publishes and fetches wait
	// it out (throttle.go).
	throttle atomic.Pointer[throttleState]

	// pubq gathers the pipeline's batches into publishBatches requests
	// when the server speaks api.PublishBatchesVersion (pubbatch.go); nil
	// otherwise.
	pubq *pubQueue
}

// dialConn connects to addr (over TLS with tlsCfg when not nil) and
// performs the handshake. The dial plus handshake is bounded by ctx and
// by timeout.
func dialConn(ctx context.Context, dial DialFunc, tlsCfg *tls.Config, sasl SASLMechanism, addr, clientID string, timeout time.Duration, log *slog.Logger) (*conn, error) {
	nc, br, limits, err := dialHandshake(ctx, dial, tlsCfg, addr, clientID, timeout)
	if err != nil {
		return nil, err
	}
	if sasl != nil {
		deadline := time.Now().Add(timeout)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		if err := saslDataPlane(nc, br, limits.MaxFrameBytes, sasl, deadline); err != nil {
			nc.Close()
			if authFailure(err) {
				return nil, permanent{err}
			}
			return nil, err
		}
	}
	return startConn(nc, br, limits, log), nil
}

// startConn starts the reader and writer of a handshaken connection nc,
// whose buffered reader br holds what the server sent after the handshake.
func startConn(nc net.Conn, br *bufio.Reader, limits Limits, log *slog.Logger) *conn {
	c := &conn{
		nc:      nc,
		limits:  limits,
		log:     log,
		fr:      api.NewFrameReader(br, limits.MaxFrameBytes, math.MaxUint32),
		sem:     make(chan struct{}, limits.MaxInFlight),
		out:     make(chan outFrame),
		done:    make(chan struct{}),
		wdone:   make(chan struct{}),
		pending: make(map[uint64]*call),
		nextID:  1,
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	if limits.ProtocolVersion >= api.PublishBatchesVersion {
		c.pubq = &pubQueue{wake: make(chan struct{}, 1)}
		c.wg.Add(1)
		go c.pubSender()
	}
	return c
}

// dialHandshake connects to addr with dial, sets up TLS with tlsCfg when
// it is not nil (its ServerName, when empty, is addr's host), and
// performs the handshake, all bounded by ctx and by timeout. It returns the connection, with its deadline
// cleared, and the buffered reader holding whatever the server sent after
// the handshake response. Errors: *ConnectTimeoutError when nothing answered
// in time, permanent{*WrongProtocolError} when another protocol answered,
// permanent{*AddrError} when addr is not host:port,
// permanent{...} for a refused handshake, a *TLSError (most of them
// permanent) for a failed TLS handshake, or the dial's or read's error.
func dialHandshake(ctx context.Context, dial DialFunc, tlsCfg *tls.Config, addr, clientID string, timeout time.Duration) (net.Conn, *bufio.Reader, Limits, error) {
	if err := checkAddr(addr, defaultDataPort); err != nil {
		return nil, nil, Limits{}, permanent{err}
	}
	start := time.Now()
	deadline := start.Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	nc, err := dial.dialContext(dctx, addr)
	cancel()
	if err != nil {
		if (isTimeout(err) || errors.Is(err, context.DeadlineExceeded)) && ctx.Err() == nil {
			return nil, nil, Limits{}, &ConnectTimeoutError{Addr: addr, Timeout: timeout, Stage: "dial"}
		}
		return nil, nil, Limits{}, err
	}
	if tlsCfg != nil {
		hctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		tc := tls.Client(nc, withServerName(tlsCfg, addr))
		if err := tc.HandshakeContext(hctx); err != nil {
			nc.Close()
			if ctx.Err() != nil {
				return nil, nil, Limits{}, ctx.Err()
			}
			if isTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
				return nil, nil, Limits{}, &ConnectTimeoutError{Addr: addr, Timeout: timeout, Stage: "TLS handshake"}
			}
			return nil, nil, Limits{}, tlsError(hctx, dial, addr, err)
		}
		nc = tc
	}
	_ = nc.SetDeadline(deadline)
	// Ctrl-C (a cancelled ctx) ends a handshake in progress at once.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	// The buffered reader is shared by the handshake's FrameReader and the
	// one built from the server's limits (bufio.NewReaderSize returns br
	// itself), so nothing read ahead is lost between the two.
	br := bufio.NewReaderSize(nc, 64<<10)
	probeAt := start.Add(min(timeout/2, probeDelayMax))
	limits, err := handshake(ctx, dial, nc, br, addr, clientID, timeout, probeAt, deadline)
	if !stop() || err != nil {
		nc.Close()
		if err == nil || ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, nil, Limits{}, err
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, br, limits, nil
}

// handshake sends the handshake request on nc and reads the server's
// limits. Before decoding the answer it looks at its first bytes
// (awaitAnswer), so that another protocol is reported as such.
func handshake(ctx context.Context, dial DialFunc, nc net.Conn, br *bufio.Reader, addr, clientID string, timeout time.Duration, probeAt, deadline time.Time) (Limits, error) {
	msg, f, err := api.NewFrameMessage(0)
	if err != nil {
		return Limits{}, err
	}
	req, err := f.NewHandshakeRequest()
	if err != nil {
		return Limits{}, err
	}
	if err := req.SetClientId(clientID); err != nil {
		return Limits{}, err
	}
	// The lowest version and the highest: a server that predates
	// maxProtocolVersion reads the lowest, which every server speaks.
	req.SetProtocolVersion(api.MinProtocolVersion)
	req.SetMaxProtocolVersion(api.ProtocolVersion)
	if err := api.WriteFrame(nc, msg); err != nil {
		if isTimeout(err) && ctx.Err() == nil {
			return Limits{}, &ConnectTimeoutError{Addr: addr, Timeout: timeout, Stage: "handshake"}
		}
		return Limits{}, fmt.Errorf("handshake: %w", err)
	}
	if _, err := awaitAnswer(ctx, dial, nc, br.Peek, addr, timeout, probeAt, deadline); err != nil {
		return Limits{}, err
	}
	_ = nc.SetReadDeadline(deadline)
	fr := api.NewFrameReader(br, api.DefaultMaxFrameBytes, 0)
	_, rf, err := fr.ReadFrame()
	if err != nil {
		if isTimeout(err) && ctx.Err() == nil {
			return Limits{}, &ConnectTimeoutError{Addr: addr, Timeout: timeout, Stage: "handshake"}
		}
		return Limits{}, fmt.Errorf("handshake: %w", err)
	}
	if rf.Which() == api.Frame_Which_errorResponse {
		we, _ := rf.ErrorResponse()
		return Limits{}, permanent{fmt.Errorf("handshake: %w", wireErr(we))}
	}
	if rf.Which() != api.Frame_Which_handshakeResponse {
		return Limits{}, permanent{fmt.Errorf("handshake: %w: %v", ErrUnexpectedResponse, rf.Which())}
	}
	hr, err := rf.HandshakeResponse()
	if err != nil {
		return Limits{}, err
	}
	we, _ := hr.Error()
	if err := api.FromWire(we); err != nil {
		return Limits{}, permanent{fmt.Errorf("handshake: %w", err)}
	}
	lim := Limits{
		MaxRecordBytes: hr.MaxRecordBytes(),
		MaxBatchBytes:  hr.MaxBatchBytes(),
		MaxFrameBytes:  hr.MaxFrameBytes(),
		MaxInFlight:    hr.MaxInFlight(),
		// 0 from no server; read as 1, the only version then.
		ProtocolVersion: max(hr.ProtocolVersion(), api.MinProtocolVersion),
	}
	lim.ServerVersion, _ = hr.ServerVersion()
	lim.NodeID, _ = hr.NodeId()
	return lim.withDefaults(), nil
}

// permanent marks a handshake failure that redialing will not cure (for
// example UNSUPPORTED_VERSION): it is not wrapped in ErrConnection.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// wireErr converts an errorResponse into an error, never nil.
func wireErr(we api.WireError) error {
	if err := api.FromWire(we); err != nil {
		return err
	}
	return api.NewError(api.CodeInvalidRequest, "server could not parse the request")
}

// issue is the one way a request reaches the wire: it registers cl under
// a fresh correlation id, builds the frame with build and queues it, with
// tail as its records tail, for the writer. A cl with a response channel or
// a stream takes an in-flight token first (the server's maxInFlight); the
// reader gives it back with the response. A nil cl is a request without a
// response (credit grants): no token, nothing registered. It returns once
// the frame is queued; the frames of successive calls are written in that
// order. Errors: ctx's error, or ErrConnection once the connection (or its
// writer) has failed.
func (c *conn) issue(ctx context.Context, cl *call, build func(api.Frame) error, tail ...[]byte) (uint64, error) {
	if len(tail) == 1 && len(tail[0]) == 0 {
		tail = nil
	}
	if cl != nil {
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.done:
			return 0, c.failure()
		case <-c.wdone:
			return 0, c.failure()
		}
	}
	c.mu.Lock()
	if c.err != nil || c.werr != nil {
		c.mu.Unlock()
		if cl != nil {
			<-c.sem
		}
		return 0, c.failure()
	}
	id := c.nextID
	c.nextID++
	if cl != nil {
		c.pending[id] = cl
	}
	c.mu.Unlock()

	msg, f, err := api.NewFrameMessage(id)
	if err == nil {
		err = build(f)
	}
	if err != nil {
		c.forget(id)
		return 0, fmt.Errorf("sdk: encode request: %w", err)
	}
	select {
	case c.out <- outFrame{id: id, msg: msg, tails: tail}:
		c.issued.Add(1)
		return id, nil
	case <-ctx.Done():
		c.forget(id)
		return 0, ctx.Err()
	case <-c.done:
		return 0, c.failure()
	case <-c.wdone:
		c.forget(id)
		return 0, c.failure()
	}
}

// roundTrip sends one request, built by build on a fresh frame, with tail as
// its records tail, and waits for the response. maxTailBytes bounds the
// response's records tail. It respects the server's maxInFlight.
func (c *conn) roundTrip(ctx context.Context, build func(api.Frame) error, tail []byte, maxTailBytes uint32) (response, error) {
	cl, err := c.start(ctx, build, tail, maxTailBytes)
	if err != nil {
		return response{}, err
	}
	// Once sent, the in-flight token is returned by the reader when the
	// response arrives (the server is still working on the request even if
	// this caller gives up), or by the end of the connection.
	select {
	case r := <-cl.ch:
		return r, r.err
	case <-ctx.Done():
		return response{}, ctx.Err()
	}
}

// start sends one request, as roundTrip does, and returns its call once
// the frame is handed to the writer; the response arrives on the call's
// channel (the connection's failure too).
func (c *conn) start(ctx context.Context, build func(api.Frame) error, tail []byte, maxTailBytes uint32) (*call, error) {
	cl := &call{maxTailBytes: maxTailBytes, ch: make(chan response, 1)}
	if _, err := c.issue(ctx, cl, build, tail); err != nil {
		return nil, err
	}
	return cl, nil
}

// forget unregisters a request that was never handed to the writer.
func (c *conn) forget(id uint64) {
	c.mu.Lock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ok {
		<-c.sem
	}
}

// failure returns why the connection ended (or its writer stopped),
// wrapped in ErrConnection.
func (c *conn) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return fmt.Errorf("%w: %w", ErrConnection, c.werr)
	}
	return fmt.Errorf("%w: %w", ErrConnection, c.err)
}

// broken reports whether the connection can no longer send: it has ended,
// or its writer has failed (its reader may still be draining responses).
func (c *conn) broken() bool {
	select {
	case <-c.done:
		return true
	case <-c.wdone:
		return true
	default:
		return false
	}
}

// ended reports whether the connection has ended, reader included.
func (c *conn) ended() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// writeFailed stops the sending side after the write of request id failed
// with cause: that request fails at once, new requests fail with
// ErrConnection, and the requests written before keep waiting for their
// responses for at most writeDrain (see conn).
func (c *conn) writeFailed(id uint64, cause error) {
	c.mu.Lock()
	if c.err != nil || c.werr != nil {
		c.mu.Unlock()
		return
	}
	c.werr = cause
	close(c.wdone)
	cl := c.pending[id]
	delete(c.pending, id)
	drained := c.drainedLocked()
	c.mu.Unlock()
	if cl != nil {
		err := fmt.Errorf("%w: %w", ErrConnection, cause)
		if cl.stream != nil {
			cl.stream.put(response{err: err})
		} else {
			cl.deliver(response{err: err})
		}
	}
	if drained {
		c.fail(cause)
		return
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(writeDrain))
}

// drainedLocked reports whether the writer has failed and no request
// written before waits for a response any more (subscriptions do not
// count: their pushes never end by themselves). c.mu is held.
func (c *conn) drainedLocked() bool {
	if c.werr == nil {
		return false
	}
	for _, cl := range c.pending {
		if cl.stream == nil {
			return false
		}
	}
	return true
}

// fail ends the connection once: every waiting request gets ErrConnection.
func (c *conn) fail(cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = cause
	pending := c.pending
	c.pending = nil
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
	err := fmt.Errorf("%w: %w", ErrConnection, cause)
	for _, cl := range pending {
		if cl.stream != nil {
			cl.stream.put(response{err: err})
			continue
		}
		cl.deliver(response{err: err})
	}
}

// close ends the connection and waits for its goroutines.
func (c *conn) close(cause error) {
	c.fail(cause)
	c.wg.Wait()
}

func (c *conn) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case of := <-c.out:
			err := api.WriteFrame(c.nc, of.msg, of.tails...)
			if err != nil {
				c.writeFailed(of.id, fmt.Errorf("write: %w", err))
				return
			}
			c.written.Add(1)
		case <-c.done:
			return
		}
	}
}

func (c *conn) readLoop() {
	defer c.wg.Done()
	for {
		_, f, err := c.fr.ReadFrame()
		if err != nil {
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		id := f.CorrelationId()
		n := api.TailLength(f)
		c.noteThrottle(f)
		c.mu.Lock()
		cl := c.pending[id]
		more := cl != nil && cl.stream != nil && n > 0 && f.Which() == api.Frame_Which_pushBatches
		if !more {
			delete(c.pending, id)
		}
		drained := c.drainedLocked()
		c.mu.Unlock()
		limit := c.limits.MaxBatchBytes
		if cl != nil {
			limit = cl.maxTailBytes
		}
		if n > limit {
			c.fail(fmt.Errorf("%w: response %d has a records tail of %d bytes, limit %d", api.ErrFrameTooLarge, id, n, limit))
			return
		}
		tail, err := c.fr.ReadTail(n, nil)
		if err != nil {
			c.fail(err)
			return
		}
		if cl == nil {
			c.log.Warn("sdk: response for no pending request", "correlation_id", id, "kind", f.Which().String())
			continue
		}
		if cl.stream != nil {
			// A subscription holds no in-flight token (openStream).
			cl.stream.put(response{f: f, tail: tail})
			continue
		}
		<-c.sem
		cl.deliver(response{f: f, tail: tail})
		if drained {
			c.fail(c.failure())
			return
		}
	}
}
