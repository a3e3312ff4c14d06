package dataplane

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/authn"
	"github.com/seedqueue/sq/internal/outcome"
)

// conn is one client connection: a reader goroutine (serve), one writer
// goroutine, and one goroutine per request in flight. See doc.go for the
// lifecycle.
type conn struct {
	srv    *Server
	nc     net.Conn
	remote string
	// releaseIP gives the connection's place in the server's per-IP count
	// back (removeConn).
	releaseIP func()
	// br reads the connection through a small read-ahead buffer; frames
	// and tails are read from it by readRequest (readframe.go).
	br *bufio.Reader

	// ctx is cancelled when the connection is closed abruptly (Close, a
	// Shutdown deadline, a failed write, a panic): every request waiting
	// in the broker returns. A connection that ends otherwise lets its
	// appends finish, so their outcome does not depend on the cancellation
	// of a wait.
	ctx    context.Context
	cancel context.CancelFunc
	// pollCtx, a child of ctx, is cancelled as soon as the connection
	// starts closing, for any reason: long-poll fetches return at once.
	pollCtx    context.Context
	pollCancel context.CancelFunc
	// readCtx, a child of pollCtx, is cancelled when the reader is told to
	// stop (stopReading): a reader waiting for a slot or for budget returns.
	readCtx    context.Context
	readCancel context.CancelFunc
	// tailBudget bounds the publish tails held in memory by this
	// connection's requests in flight.
	tailBudget *byteBudget

	// slots bounds the requests in flight: the reader takes a slot before
	// it reads a frame and the writer gives it back once the frame's
	// response is written. A full slots channel stops the reader.
	slots chan struct{}
	// out carries responses to the writer. Every response holds a slot,
	// so a send never blocks.
	out chan *response
	// handlers counts request goroutines.
	handlers sync.WaitGroup
	// inflight counts requests read and not yet answered (their response
	// is not yet queued for the writer).
	inflight atomic.Int64
	// lastActive is the Unix nano time of the last frame read or written.
	lastActive atomic.Int64
	// mutedUntil is the Unix nano time until which a byte-rate quota
	// mutes the connection: publishes, fetches and subscriptions wait for
	// it before they are served (quota.go).
	mutedUntil atomic.Int64

	// pubMu guards pubTail: per partition, the link of the last publish
	// read on this connection (removed once it succeeded).
	pubMu   sync.Mutex
	pubTail map[partitionKey]*pubLink

	// subs are the push subscriptions (subscribe.go).
	subs subscriptions

	// sasl is the connection's SASL exchange in progress (sasl.go); only
	// the reader touches it. user is the SCRAM-authenticated user, set
	// once.
	sasl *authn.Exchange
	user atomic.Pointer[string]

	mu        sync.Mutex
	reason    error      // why the connection closes; first one wins
	level     slog.Level // log level of reason
	idleTimer *time.Timer
	done      bool // teardown started: no more timer resets
	// readStopped is set by stopReading: the read deadline stays in the
	// past, whatever the reader sets afterwards.
	readStopped bool
}

// response is one frame queued for the writer, with the fetch result whose
// buffers form its records tail. A nil msg writes nothing but still returns
// the request's slot.
type response struct {
	msg   *capnp.Message
	fetch *engine.FetchResult
	// push marks a push frame of a subscription: it holds no request slot.
	push bool
}

// release frees the message and the fetch buffers after the write.
func (r *response) release() {
	if r.fetch != nil {
		r.fetch.Release()
	}
	if r.msg != nil {
		r.msg.Release()
	}
}

// errIdle and errShutdown are close reasons recorded before the reader is
// stopped by a past read deadline.
var (
	errIdle     = errors.New("idle timeout")
	errShutdown = errors.New("server shutting down")
	// errHandshakeFailed ends a connection whose handshake was refused; the
	// reply has been queued.
	errHandshakeFailed = errors.New("handshake refused")
)

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	pollCtx, pollCancel := context.WithCancel(ctx)
	readCtx, readCancel := context.WithCancel(pollCtx)
	c := &conn{
		srv:    s,
		nc:     nc,
		remote: remoteAddr(nc),
		br:     bufio.NewReaderSize(nc, readBufferBytes),
		ctx:    ctx,
		cancel: cancel,

		pollCtx:    pollCtx,
		pollCancel: pollCancel,
		readCtx:    readCtx,
		readCancel: readCancel,
		tailBudget: newByteBudget(s.opts.MaxInFlightBytesPerConn, 0),
		slots:      make(chan struct{}, s.opts.MaxInFlightPerConn),
		out:        make(chan *response, s.opts.MaxInFlightPerConn),
	}
	c.lastActive.Store(time.Now().UnixNano())
	return c
}

func remoteAddr(nc net.Conn) string {
	if a := nc.RemoteAddr(); a != nil {
		return a.String()
	}
	return "unknown"
}

// serve runs the connection to its end: it starts the writer, reads
// frames until an error or a stop, then tears down in order (end the long
// polls, wait for the requests, flush their responses, close the socket)
// and logs one line with the reason.
func (c *conn) serve() {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	err := c.readLoopSafe()
	c.setReason(c.classify(err))

	c.mu.Lock()
	c.done = true
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	c.mu.Unlock()

	c.pollCancel()
	c.handlers.Wait()
	close(c.out)
	<-writerDone
	c.cancel()
	c.closeGracefully()
	c.srv.removeConn(c)

	c.mu.Lock()
	reason, level := c.reason, c.level
	c.mu.Unlock()
	if reason == nil {
		reason = errors.New("unknown")
	}
	c.srv.opts.Logger.Log(context.Background(), level, "dataplane: connection closed",
		"remote", c.remote, "reason", reason.Error())
}

// closeLinger bounds how long a closing connection keeps reading (and
// discarding) what the client still sends after the last response.
const closeLinger = time.Second

// closeGracefully half-closes the connection, then reads and discards what
// the client still sends, for up to closeLinger, before closing it. Closing
// a socket that holds unread bytes makes the kernel answer with RST, and a
// RST can destroy responses the client has received but not yet read: an
// acknowledged publish whose acknowledgement the producer never sees. With
// the half-close the client reads every response, then EOF, and closes.
func (c *conn) closeGracefully() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.nc.SetReadDeadline(time.Now().Add(closeLinger))
		_, _ = io.Copy(io.Discard, c.nc)
	}
	c.nc.Close()
}

// readLoopSafe runs readLoop and turns a panic into a close reason, so a
// bug in decoding one client's frames never takes the server down.
func (c *conn) readLoopSafe() (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.srv.opts.Logger.Error("dataplane: panic reading a frame", "remote", c.remote,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("panic reading a frame: %v", p)
		}
	}()
	return c.readLoop()
}

// classify returns the close reason and its log level for the reader's
// error. A reason recorded earlier (shutdown, idle, forced close, failed
// write) takes precedence in setReason.
func (c *conn) classify(err error) (error, slog.Level) { //nolint:staticcheck // ST1008: the error is the close reason, a value, not classify's failure
	switch {
	case errors.Is(err, io.EOF):
		return errors.New("client closed the connection"), slog.LevelDebug
	case outcome.ClientGone(err) != "":
		// A reset or broken connection is the client going away (a
		// process killed, Ctrl-C), not a fault of the server's.
		return fmt.Errorf("client went away: %w", err), slog.LevelDebug
	case errors.Is(err, errHandshakeFailed):
		return err, slog.LevelInfo
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("read timed out: %w", err), slog.LevelWarn
	default:
		return err, slog.LevelWarn
	}
}

// setReason records why the connection closes, unless a reason is already
// recorded.
func (c *conn) setReason(err error, level slog.Level) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reason == nil {
		c.reason, c.level = err, level
	}
}

// stopReading ends the reader at its next read by setting a read deadline
// in the past; queued and in-flight requests are still answered. Once the
// reader has ended (the connection is closing) it does nothing: the socket
// is then being drained for closeLinger (closeGracefully), and cutting that
// short would reset the connection under responses the client has not yet
// read (Shutdown calls closeIfIdle every few milliseconds until the
// connection is gone).
func (c *conn) stopReading(reason error, level slog.Level) {
	c.setReason(reason, level)
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	c.readStopped = true
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	c.mu.Unlock()
	c.readCancel()
}

// setReadDeadline sets the read deadline of the socket unless the reader
// has been told to stop.
func (c *conn) setReadDeadline(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.readStopped {
		_ = c.nc.SetReadDeadline(t)
	}
}

// forceClose closes the socket and cancels every request at once.
func (c *conn) forceClose(reason error) {
	c.setReason(reason, slog.LevelInfo)
	c.cancel()
	c.nc.Close()
}

// closeIfIdle stops a connection with no request in flight; Shutdown calls
// it until every connection has gone.
func (c *conn) closeIfIdle() {
	if c.inflight.Load() == 0 {
		c.stopReading(errShutdown, slog.LevelDebug)
	}
}

// startIdleTimer arms the idle timer once the handshake is done (the
// handshake has its own timeout).
func (c *conn) startIdleTimer() {
	d := c.srv.opts.IdleTimeout
	if d <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		c.idleTimer = time.AfterFunc(d, c.checkIdle)
	}
}

// checkIdle runs on the idle timer: it stops a connection that has had no
// request in flight and no traffic for IdleTimeout, else re-arms itself.
func (c *conn) checkIdle() {
	d := c.srv.opts.IdleTimeout
	next := d
	if c.inflight.Load() == 0 {
		since := time.Since(time.Unix(0, c.lastActive.Load()))
		if since >= d {
			c.stopReading(errIdle, slog.LevelInfo)
			return
		}
		next = d - since
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		c.idleTimer.Reset(next)
	}
}

func (c *conn) touch() { c.lastActive.Store(time.Now().UnixNano()) }

// acquire takes a request slot, waiting while MaxInFlightPerConn requests
// are in flight. It fails when the connection is closing.
func (c *conn) acquire() error {
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-c.readCtx.Done():
		return errors.New("connection closing")
	}
}

// send queues r, the answer to one request, for the writer. The caller
// holds the request's slot, which passes to the writer.
func (c *conn) send(r *response) {
	c.inflight.Add(-1)
	c.out <- r
}

// readLoop reads the handshake and then requests until the stream ends,
// a frame is malformed or the connection is stopped. Each request runs on
// its own goroutine.
func (c *conn) readLoop() error {
	if err := c.handshake(); err != nil {
		return err
	}
	c.startIdleTimer()
	for {
		if err := c.acquire(); err != nil {
			return err
		}
		req, err := c.readRequest(time.Time{})
		if err != nil {
			<-c.slots
			return err
		}
		if req.tailLen > c.srv.maxBatchBytes {
			c.releaseRequest(&req)
			c.send(c.buildError(req, tailTooLarge(req.tailLen, c.srv.maxBatchBytes)))
			return fmt.Errorf("%w: records tail of %d bytes, limit %d", api.ErrFrameTooLarge, req.tailLen, c.srv.maxBatchBytes)
		}
		if c.srv.shutting.Load() {
			c.releaseRequest(&req)
			c.releaseTail(req.tail)
			c.send(c.buildError(req, api.NewError(api.CodeShuttingDown, "server is shutting down")))
			continue
		}
		if c.authGate(&req) {
			continue
		}
		switch req.kind {
		case api.Frame_Which_publishRequest:
			req.prev, req.link = c.chainPublish(partitionKey{req.topic, req.partition})
		case api.Frame_Which_publishBatchesRequest:
			for i := range req.entries {
				e := &req.entries[i]
				e.prev, e.link = c.chainPublish(partitionKey{e.topic, e.partition})
			}
		}
		c.handlers.Add(1)
		go c.handle(req)
	}
}

// partitionKey names one partition of one topic.
type partitionKey struct {
	topic     string
	partition uint32
}

// pubLink is one publish in a connection's chain of publishes to one
// partition. queued is closed once the publish is queued in the engine
// (pending set) or refused before that (err set).
type pubLink struct {
	queued  chan struct{}
	pending *engine.Pending
	err     error
}

// chainPublish links a publish behind the previous publish to the same
// partition read on this connection, so that a client pipelining batches
// to one partition gets them appended in the order it sent them (as a
// Kafka producer does): each is queued in the engine once the previous one
// is queued, without waiting for its commit. Publishes to different
// partitions run at once. The reader calls it in stream order, and for the
// entries of a publishBatches request in their order.
func (c *conn) chainPublish(k partitionKey) (prev, link *pubLink) {
	link = &pubLink{queued: make(chan struct{})}
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	if c.pubTail == nil {
		c.pubTail = make(map[partitionKey]*pubLink)
	}
	prev = c.pubTail[k]
	c.pubTail[k] = link
	return prev, link
}

// unchainPublish forgets the partition once its last publish succeeded. A
// failed last publish stays, so that chained publishes the client sent
// before it saw the failure fail too.
func (c *conn) unchainPublish(req request, err error) {
	if err != nil {
		return
	}
	k := partitionKey{req.topic, req.partition}
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	if c.pubTail[k] == req.link {
		delete(c.pubTail, k)
	}
}

func tailTooLarge(n, limit uint32) error {
	return api.NewError(api.CodeMessageTooLarge, "records tail of %d bytes over the batch limit of %d", n, limit)
}

// handshake reads the first frame, which must be a handshake request, and
// answers it. A refused handshake queues its reply and returns an error so
// that the connection closes once the reply is written.
func (c *conn) handshake() error {
	if err := c.acquire(); err != nil {
		return err
	}
	req, err := c.readRequest(time.Now().Add(c.srv.opts.HandshakeTimeout))
	if err != nil {
		<-c.slots
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no handshake within %v: %w", c.srv.opts.HandshakeTimeout, err)
		}
		return err
	}
	// The handshake is answered at once: it holds no budget meanwhile.
	c.releaseRequest(&req)
	if req.kind != api.Frame_Which_handshakeRequest {
		c.send(c.buildError(req, api.NewError(api.CodeInvalidRequest, "the first frame must be a handshake request, got %v", req.kind)))
		return fmt.Errorf("%w: first frame is %v", errHandshakeFailed, req.kind)
	}
	resp, refusal := c.buildHandshake(req)
	c.send(resp)
	if refusal != nil {
		return fmt.Errorf("%w: %w", errHandshakeFailed, refusal)
	}
	return nil
}

// writeLoop writes each queued response, frame and tail in one writev, and
// returns its slot. After a failed write it closes the connection and only
// drains the queue. It returns when out is closed.
func (c *conn) writeLoop() {
	failed := false
	for r := range c.out {
		if !failed && r.msg != nil {
			if err := c.write(r); err != nil {
				failed = true
				if outcome.ClientGone(err) != "" {
					c.setReason(fmt.Errorf("client went away: write response: %w", err), slog.LevelDebug)
				}
				c.forceClose(fmt.Errorf("write response: %w", err))
			}
		}
		r.release()
		c.touch()
		if !r.push {
			<-c.slots
		}
	}
}

func (c *conn) write(r *response) error {
	if d := c.srv.opts.WriteTimeout; d > 0 {
		_ = c.nc.SetWriteDeadline(time.Now().Add(d))
	}
	if r.fetch != nil && len(r.fetch.Bufs) > 0 {
		return api.WriteFrame(c.nc, r.msg, r.fetch.Bufs...)
	}
	return api.WriteFrame(c.nc, r.msg)
}
