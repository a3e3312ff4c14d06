package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/connlimit"
	"github.com/seedqueue/sq/internal/ratelog"
)

// Broker is the part of the engine the data plane serves. *engine.Engine
// implements it; tests may substitute a fake. Every error is an *api.Error
// (or wraps one) with a catalog code, sent to the client with api.ToWire.
type Broker interface {
	// Limits returns the record and batch size limits stated in the
	// handshake; MaxBatchBytes also bounds a publish's records tail.
	Limits() engine.Limits
	// CreateTopic creates a topic with the given number of partitions.
	CreateTopic(name string, partitions int, cfg engine.TopicConfig) (engine.TopicInfo, error)
	// DescribeTopic returns a topic with one PartitionInfo per partition.
	DescribeTopic(name string) (engine.TopicInfo, error)
	// ListTopics returns every topic, without partition details.
	ListTopics() []engine.TopicInfo
	// Append validates and appends one batch, taking ownership of batch.
	Append(ctx context.Context, topic string, partition int, batch []byte) (engine.AppendResult, error)
	// Fetch reads whole batches from offset, waiting up to maxWait for data
	// when none is readable. The result's Bufs stay valid until Release.
	Fetch(ctx context.Context, topic string, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error)
	// FetchID is Fetch of the topic with id (KIP-516): a set id that is not
	// the topic's current one fails with UNKNOWN_TOPIC_ID; the zero id
	// finds the topic by name. The result carries the topic's id.
	FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error)
	// CommitOffsets stores committed offsets; each returned entry carries
	// its own Err.
	CommitOffsets(group, memberID string, generation int32, offsets []engine.OffsetCommit) ([]engine.OffsetCommit, error)
	// FetchOffsets returns a group's committed offsets, for one topic or
	// (topic "") for all.
	FetchOffsets(group, topic string) ([]engine.OffsetCommit, error)
	// DeleteTopic deletes a topic and its data; readers in the middle of a
	// fetch finish safely and then get UNKNOWN_TOPIC.
	DeleteTopic(name string) error
	// ListOffsets looks up an offset by broker append time (Unix ms; -1
	// latest, -2 earliest) and returns it with the append time of the batch
	// found (-1 when none).
	ListOffsets(topic string, partition int, timestamp int64) (offset uint64, ts int64, err error)
}

var _ Broker = (*engine.Engine)(nil)

// AsyncAppender is implemented by a Broker that can queue a batch without
// waiting for its commit (engine.Engine.AppendAsync). The server then
// queues the publishes of one connection to one partition in the order
// read and waits for their commits in parallel, so that a client's
// pipelined batches share group commits. A Broker without it appends each
// publish once the previous one to the partition has returned.
type AsyncAppender interface {
	// AppendAsync queues batch behind after (nil: not chained) and returns
	// once it is queued; the Pending's Wait returns the outcome. The
	// broker holds batch until the Pending's Done is closed, and not at
	// all when it returns an error: the server then gives the buffer back
	// to its pool (conn.releaseTail).
	AppendAsync(ctx context.Context, topic string, partition int, batch []byte, after *engine.Pending) (*engine.Pending, error)
}

var _ AsyncAppender = (*engine.Engine)(nil)

// ErrServerClosed is returned by Serve and ListenAndServe after Shutdown or
// Close.
var ErrServerClosed = errors.New("dataplane: server closed")

// Server serves the Cap'n Proto data plane (docs/architecture.md §4) for a Broker. Create
// one with New; its methods are safe for concurrent use.
type Server struct {
	broker Broker
	opts   Options
	// maxBatchBytes is the broker's MaxBatchBytes clamped to a u32: the
	// largest records tail read or written.
	maxBatchBytes uint32
	// budget bounds the request bytes held by every connection together
	// (Options.MaxInFlightRequestBytes).
	budget *byteBudget
	// largestCharge is the largest single charge of a request: what
	// subscriptions must leave free in budget.
	largestCharge int64
	// rejected counts connections closed at accept by MaxConnections;
	// lastRejectLog is the Unix nano time of the last WARN about them and
	// loggedRejected the count it reported.
	rejected       atomic.Uint64
	lastRejectLog  atomic.Int64
	loggedRejected atomic.Uint64
	// perIP counts the open connections of each client IP address
	// (Options.MaxConnectionsPerIP; nil without a bound), and
	// rejectedPerIP the connections closed at accept by it.
	perIP         *connlimit.PerIP
	rejectedPerIP atomic.Uint64
	// rejectLogEvery is the least time between two such lines
	// (rejectLogInterval; tests lengthen it).
	rejectLogEvery time.Duration

	// draining is closed when Shutdown starts: new requests are refused
	// with SHUTTING_DOWN and long-poll fetches return at once.
	drainCtx context.Context
	drain    context.CancelFunc
	shutting atomic.Bool

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closed    bool
	// connWG counts connection and accept goroutines.
	connWG sync.WaitGroup

	// releaseBuffer gives a publish's records tail back to the pool of
	// batch buffers: batch.ReleaseBuffer (tests poison what it is given).
	releaseBuffer func([]byte)
}

// New returns a Server for broker. It applies opts.Defaults and fails with
// the errors of opts.Validate.
func New(broker Broker, opts Options) (*Server, error) {
	if broker == nil {
		return nil, errors.New("dataplane: nil broker")
	}
	opts.Defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	lim := broker.Limits()
	maxBatch := uint32(math.MaxUint32)
	if lim.MaxBatchBytes > 0 && uint64(lim.MaxBatchBytes) < math.MaxUint32 {
		maxBatch = uint32(lim.MaxBatchBytes)
	}
	// A largest frame and a largest tail must fit together, each with its
	// charge; a smaller budget would let a single request exceed it.
	if need := MinInFlightRequestBytes(opts.MaxFrameBytes, maxBatch); opts.MaxInFlightRequestBytes < need {
		return nil, fmt.Errorf("dataplane: MaxInFlightRequestBytes %d cannot hold one largest frame (%d bytes, charged %d times) and batch (%d) with their overhead: at least %d",
			opts.MaxInFlightRequestBytes, opts.MaxFrameBytes, decodeFactor, maxBatch, need)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		broker:         broker,
		opts:           opts,
		maxBatchBytes:  maxBatch,
		budget:         newByteBudget(opts.MaxInFlightRequestBytes, smallRequestBytes),
		largestCharge:  max(frameCharge(uint64(opts.MaxFrameBytes)), int64(maxBatch)+requestOverheadBytes),
		rejectLogEvery: rejectLogInterval,
		drainCtx:       ctx,
		drain:          cancel,
		listeners:      make(map[net.Listener]struct{}),
		conns:          make(map[*conn]struct{}),
		perIP:          connlimit.NewPerIP(opts.MaxConnectionsPerIP),
		releaseBuffer:  batch.ReleaseBuffer,
	}, nil
}

// ListenAndServe listens on Options.Addr and calls Serve. It returns
// ErrServerClosed after Shutdown or Close, or the listen or accept error.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln and serves each on its own goroutines
// until Shutdown or Close, then returns ErrServerClosed. ln is closed when
// Serve returns. Temporary accept errors are retried with a backoff of up
// to 1 s; any other accept error is returned.
func (s *Server) Serve(ln net.Listener) error {
	if !s.trackListener(ln) {
		ln.Close()
		return ErrServerClosed
	}
	defer s.untrackListener(ln)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return ErrServerClosed
			}
			if isTemporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.opts.Logger.Warn("dataplane: accept failed, retrying", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c, full, perIP := s.newConn(nc)
		if full || perIP {
			s.reject(nc, perIP)
			continue
		}
		if c == nil {
			nc.Close()
			return ErrServerClosed
		}
		go func() {
			defer s.connWG.Done()
			c.serve()
		}()
	}
}

// isTemporary reports an accept error worth retrying: a timeout, or one
// that reports itself temporary (EMFILE, ENFILE, ECONNABORTED) through the
// deprecated Temporary method, as net/http does.
func isTemporary(err error) bool {
	var t interface {
		Timeout() bool
		Temporary() bool
	}
	return errors.As(err, &t) && (t.Timeout() || t.Temporary())
}

// Addr returns the address of the first listener Serve is serving, or nil.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.listeners {
		return ln.Addr()
	}
	return nil
}

func (s *Server) trackListener(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.listeners[ln] = struct{}{}
	return true
}

func (s *Server) untrackListener(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.listeners[ln]; ok {
		delete(s.listeners, ln)
		ln.Close()
	}
}

// newConn registers a connection, or returns nil when the server is
// closed, full when MaxConnections are open, or perIP when its client's
// IP address has MaxConnectionsPerIP open. The caller runs c.serve and
// then calls connWG.Done.
func (s *Server) newConn(nc net.Conn) (c *conn, full, perIP bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false, false
	}
	if len(s.conns) >= s.opts.MaxConnections {
		return nil, true, false
	}
	release, ok := s.perIP.Acquire(nc.RemoteAddr())
	if !ok {
		return nil, false, true
	}
	c = newConn(s, nc)
	c.releaseIP = release
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	return c, false, false
}

// rejectLogInterval is the least time between two WARN lines about
// connections refused by MaxConnections.
const rejectLogInterval = time.Second

// reject closes a connection accepted beyond MaxConnections (or, with
// perIP, beyond MaxConnectionsPerIP of its address) at once, with no read
// and no reply, and logs at most one line per rejectLogInterval with the
// number refused since the previous line.
func (s *Server) reject(nc net.Conn, perIP bool) {
	defer nc.Close()
	if perIP {
		s.rejectedPerIP.Add(1)
	}
	total := s.rejected.Add(1)
	now := time.Now().UnixNano()
	last := s.lastRejectLog.Load()
	if now-last < int64(s.rejectLogEvery) || !s.lastRejectLog.CompareAndSwap(last, now) {
		return
	}
	since := total - s.loggedRejected.Swap(total)
	// Limited here, once a second with the count since the last line: the
	// server's log limiter must not drop lines in between.
	if perIP {
		s.opts.Logger.Log(ratelog.Unlimited(context.Background()), slog.LevelWarn, "dataplane: connection refused: too many connections from one IP address",
			"remote", remoteAddr(nc), "max_connections_per_ip", s.opts.MaxConnectionsPerIP, "refused_since_last_log", since, "refused_total", total)
		return
	}
	s.opts.Logger.Log(ratelog.Unlimited(context.Background()), slog.LevelWarn, "dataplane: connection refused: too many connections",
		"remote", remoteAddr(nc), "max_connections", s.opts.MaxConnections, "refused_since_last_log", since, "refused_total", total)
}

// Stats is a snapshot of the data plane's connections and request budget,
// for metrics.
type Stats struct {
	// Connections is the number of open connections.
	Connections int
	// MaxConnections is Options.MaxConnections.
	MaxConnections int
	// RejectedConnections counts connections closed at accept because
	// MaxConnections were open, or MaxConnectionsPerIP of their address,
	// since New.
	RejectedConnections uint64
	// RejectedConnectionsPerIP counts those of RejectedConnections closed
	// because of MaxConnectionsPerIP.
	RejectedConnectionsPerIP uint64
	// InFlightRequestBytes is the part of MaxInFlightRequestBytes held by
	// requests now, in bytes.
	InFlightRequestBytes int64
	// MaxInFlightRequestBytes is Options.MaxInFlightRequestBytes.
	MaxInFlightRequestBytes int64
	// BudgetWaiters is the number of connections that stopped reading
	// because the budget is spent.
	BudgetWaiters int
}

// Stats returns a snapshot of the connections and the request budget.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	used, waiting := s.budget.stats()
	return Stats{
		Connections:              n,
		MaxConnections:           s.opts.MaxConnections,
		RejectedConnections:      s.rejected.Load(),
		RejectedConnectionsPerIP: s.rejectedPerIP.Load(),
		InFlightRequestBytes:     used,
		MaxInFlightRequestBytes:  s.opts.MaxInFlightRequestBytes,
		BudgetWaiters:            waiting,
	}
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if c.releaseIP != nil {
		c.releaseIP()
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// closeListeners stops accepting and marks the server closed.
func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for ln := range s.listeners {
		ln.Close()
		delete(s.listeners, ln)
	}
}

// Shutdown stops the server gracefully: it stops accepting, answers every
// new request with SHUTTING_DOWN, ends long-poll fetches at once (they
// answer with what is readable or with SHUTTING_DOWN), waits for the
// in-flight requests of each connection to be answered and then closes it. When ctx ends first, the
// remaining connections are closed at once (their pending requests are
// cancelled) and ctx's error is returned after their goroutines have
// exited. Shutdown does not close the broker.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeListeners()
	s.shutting.Store(true)
	s.drain()
	done := make(chan struct{})
	go func() {
		s.connWG.Wait()
		close(done)
	}()
	// Poll for quiet connections as net/http does: the set of busy
	// connections only shrinks once no request is accepted.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, c := range s.snapshotConns() {
			c.closeIfIdle()
		}
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			s.forceCloseConns()
			<-done
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Close closes the listeners and every connection at once, cancelling
// their requests, and waits for the connection goroutines to exit. It does
// not close the broker.
func (s *Server) Close() error {
	s.closeListeners()
	s.shutting.Store(true)
	s.drain()
	s.forceCloseConns()
	s.connWG.Wait()
	return nil
}

func (s *Server) snapshotConns() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	return cs
}

func (s *Server) forceCloseConns() {
	for _, c := range s.snapshotConns() {
		c.forceClose(errors.New("server closed"))
	}
}
