package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
)

// DefaultReplicaHandshakeTimeout bounds a ReplicaClient's dial and
// handshake when the context passed to Dial has no earlier deadline.
const DefaultReplicaHandshakeTimeout = 10 * time.Second

// defaultReplicaWriteTimeout bounds the write of one request frame when
// the call's context has no deadline.
const defaultReplicaWriteTimeout = 30 * time.Second

// ReplicaClientOptions configure a ReplicaClient. The zero value is valid.
type ReplicaClientOptions struct {
	// HandshakeTimeout bounds the dial and the handshake when the context
	// has no earlier deadline. Default DefaultReplicaHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Dialer dials the connection; nil: a net.Dialer.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// ReplicaFetchResult is a leader's answer to a replica fetch.
type ReplicaFetchResult struct {
	// HighWatermark, LogStartOffset and LeaderEpoch are the leader's.
	HighWatermark  uint64
	LogStartOffset uint64
	LeaderEpoch    uint32
	// Batches are the whole batches read, in offset order, each as the
	// leader stored it (offsets and leader epochs set); each is its own
	// slice of one buffer the caller owns.
	Batches [][]byte
}

// ErrReplicaClientBroken wraps the error that ended a ReplicaClient's
// connection (a failed read or write, a malformed response, Close): every
// call then fails with it, and the caller dials again.
var ErrReplicaClientBroken = errors.New("dataplane: replica connection broken")

// ReplicaClient is a follower's connection to a partition leader's data
// plane: it sends replicaFetch and offsetForLeaderEpoch requests
// (docs/architecture.md §4). Its methods are safe for concurrent use;
// requests share the one connection and their responses are matched by
// correlation id. At most the leader's maxInFlight (from the handshake)
// requests are outstanding at once, as the leader serves no more per
// connection; a call beyond waits for one to be answered, within its
// context. A long poll holds its place until it returns. Errors the
// leader answered with are *api.Error; any other error is the context's,
// or wraps ErrReplicaClientBroken.
type ReplicaClient struct {
	nc     net.Conn
	nodeID string
	// Limits stated by the leader in the handshake.
	maxFrame, maxTail uint32

	wmu sync.Mutex // serialises request writes
	// slots holds one token per request outstanding on the connection,
	// taken before the write and given back when its response is read
	// (also for an abandoned call, whose request the leader still serves).
	slots chan struct{}

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan replicaReply
	err     error // set once the connection is broken; wraps ErrReplicaClientBroken

	done chan struct{} // closed when the reader goroutine has returned
}

// replicaReply is one response decoded by the reader goroutine.
type replicaReply struct {
	kind  api.Frame_Which
	err   error // an error field or errorResponse (an *api.Error)
	fetch ReplicaFetchResult
	epoch uint32
	end   uint64
}

// Dial connects to the data plane at addr as the replica nodeID and
// completes the handshake within ctx (and opts.HandshakeTimeout). A
// handshake the leader refuses returns its *api.Error.
func Dial(ctx context.Context, addr, nodeID string, opts ReplicaClientOptions) (*ReplicaClient, error) {
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultReplicaHandshakeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, opts.HandshakeTimeout)
	defer cancel()
	dial := opts.Dialer
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dataplane: dial replica leader %s: %w", addr, err)
	}
	c := &ReplicaClient{nc: nc, nodeID: nodeID, next: 1, pending: make(map[uint64]chan replicaReply), done: make(chan struct{})}
	if err := c.handshake(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	fr := api.NewFrameReader(nc, c.maxFrame, c.maxTail)
	go c.readLoop(fr)
	return c, nil
}

// handshake sends the handshake request and reads its response; the
// deadline of ctx bounds both.
func (c *ReplicaClient) handshake(ctx context.Context) error {
	if d, ok := ctx.Deadline(); ok {
		_ = c.nc.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Now()) })
	defer stop()
	msg, f, err := api.NewFrameMessage(0)
	if err != nil {
		return err
	}
	h, err := f.NewHandshakeRequest()
	if err == nil {
		// Version 1 serves replication: a node of an older release,
		// which speaks 1 alone, accepts it during a rolling upgrade.
		h.SetProtocolVersion(api.MinProtocolVersion)
		err = h.SetClientId("replica:" + c.nodeID)
	}
	if err == nil {
		err = api.WriteFrame(c.nc, msg)
	}
	msg.Release()
	if err != nil {
		return c.handshakeErr(ctx, "write handshake", err)
	}
	// The leader sends nothing more until a request: this reader, with
	// default limits, reads no byte past the handshake response.
	fr := api.NewFrameReader(c.nc, api.DefaultMaxFrameBytes, 0)
	rmsg, rf, err := fr.ReadFrame()
	if err != nil {
		return c.handshakeErr(ctx, "read handshake response", err)
	}
	defer rmsg.Release()
	switch rf.Which() {
	case api.Frame_Which_handshakeResponse:
	case api.Frame_Which_errorResponse:
		w, err := rf.ErrorResponse()
		if err != nil {
			return fmt.Errorf("dataplane: replica handshake with %s: %w", c.nc.RemoteAddr(), err)
		}
		return errOrUnknown(api.FromWire(w))
	default:
		return fmt.Errorf("dataplane: replica handshake with %s answered with %v", c.nc.RemoteAddr(), rf.Which())
	}
	hr, err := rf.HandshakeResponse()
	if err != nil {
		return fmt.Errorf("dataplane: replica handshake with %s: %w", c.nc.RemoteAddr(), err)
	}
	if hr.HasError() {
		w, err := hr.Error()
		if err == nil {
			err = api.FromWire(w)
		}
		if err != nil {
			return err
		}
	}
	c.maxFrame = max(hr.MaxFrameBytes(), api.DefaultMaxFrameBytes)
	c.maxTail = max(hr.MaxBatchBytes(), api.DefaultMaxBatchBytes)
	c.slots = make(chan struct{}, max(hr.MaxInFlight(), 1))
	_ = c.nc.SetDeadline(time.Time{})
	return nil
}

func (c *ReplicaClient) handshakeErr(ctx context.Context, what string, err error) error {
	switch {
	case ctx.Err() != nil:
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The connection's deadline is the context's: it fired first.
		err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
	}
	return fmt.Errorf("dataplane: replica %s with %s: %w", what, c.nc.RemoteAddr(), err)
}

// errOrUnknown returns err, or an UNKNOWN error when an errorResponse
// carried no code.
func errOrUnknown(err error) error {
	if err == nil {
		return api.NewError(api.CodeUnknown, "error response without a code")
	}
	return err
}

// Close closes the connection; calls in flight fail with
// ErrReplicaClientBroken. It returns once the reader goroutine has
// returned.
func (c *ReplicaClient) Close() error {
	c.fail(errors.New("closed"))
	<-c.done
	return nil
}

// Done is closed once the connection is broken or closed.
func (c *ReplicaClient) Done() <-chan struct{} { return c.done }

// Err returns why the connection is broken (wrapping
// ErrReplicaClientBroken), nil while it works.
func (c *ReplicaClient) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail marks the connection broken with cause (the first cause wins),
// closes it and fails every pending call.
func (c *ReplicaClient) fail(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = fmt.Errorf("%w: %s: %w", ErrReplicaClientBroken, c.nc.RemoteAddr(), cause)
	c.nc.Close()
	for id, ch := range c.pending {
		delete(c.pending, id)
		close(ch)
	}
}

// readLoop reads responses until the connection fails and hands each to
// the call waiting for its correlation id; a response to an abandoned call
// is dropped.
func (c *ReplicaClient) readLoop(fr *api.FrameReader) {
	defer close(c.done)
	for {
		msg, f, err := fr.ReadFrame()
		if err != nil {
			c.fail(fmt.Errorf("read response: %w", err))
			return
		}
		id := f.CorrelationId()
		tail, err := fr.ReadTail(api.TailLength(f), nil)
		var rep replicaReply
		if err == nil {
			rep, err = decodeReplicaReply(f, tail)
		}
		msg.Release()
		if err != nil {
			c.fail(fmt.Errorf("response %d: %w", id, err))
			return
		}
		c.mu.Lock()
		ch, ok := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ok {
			ch <- rep // buffered
		}
		select {
		case <-c.slots:
		default:
			// A response to no request of ours.
			c.fail(fmt.Errorf("response %d to no outstanding request", id))
			return
		}
	}
}

// decodeReplicaReply decodes a response frame into Go values; tail is its
// records tail, split into batches.
func decodeReplicaReply(f api.Frame, tail []byte) (replicaReply, error) {
	rep := replicaReply{kind: f.Which()}
	switch rep.kind {
	case api.Frame_Which_replicaFetchResponse:
		r, err := f.ReplicaFetchResponse()
		if err != nil {
			return rep, err
		}
		if rep.err, err = wireField(r.HasError(), r.Error); err != nil || rep.err != nil {
			return rep, err
		}
		rep.fetch = ReplicaFetchResult{HighWatermark: r.HighWatermark(), LogStartOffset: r.LogStartOffset(), LeaderEpoch: r.LeaderEpoch()}
		for rest := tail; len(rest) > 0; {
			var b []byte
			if b, rest, _, err = batch.Split(rest, 0); err != nil {
				return rep, fmt.Errorf("replica fetch records tail: %w", err)
			}
			rep.fetch.Batches = append(rep.fetch.Batches, b)
		}
	case api.Frame_Which_offsetForLeaderEpochResponse:
		r, err := f.OffsetForLeaderEpochResponse()
		if err != nil {
			return rep, err
		}
		if rep.err, err = wireField(r.HasError(), r.Error); err != nil || rep.err != nil {
			return rep, err
		}
		rep.epoch, rep.end = r.LeaderEpoch(), r.EndOffset()
	case api.Frame_Which_errorResponse:
		w, err := f.ErrorResponse()
		if err != nil {
			return rep, err
		}
		rep.err = errOrUnknown(api.FromWire(w))
	default:
		return rep, fmt.Errorf("unexpected %v frame", rep.kind)
	}
	return rep, nil
}

// wireField reads an optional error field.
func wireField(has bool, get func() (api.WireError, error)) (error, error) {
	if !has {
		return nil, nil
	}
	w, err := get()
	if err != nil {
		return nil, err
	}
	return api.FromWire(w), nil
}

// call sends the request built by build and waits for its response, the
// context's end, or the connection's failure. A context that ends first
// abandons the call (its response is dropped); the connection stays
// usable unless the request was only partly written.
func (c *ReplicaClient) call(ctx context.Context, want api.Frame_Which, build func(api.Frame) error) (replicaReply, error) {
	select {
	case c.slots <- struct{}{}:
	case <-c.done:
		return replicaReply{}, c.Err()
	case <-ctx.Done():
		return replicaReply{}, ctx.Err()
	}
	ch := make(chan replicaReply, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		<-c.slots
		return replicaReply{}, err
	}
	id := c.next
	c.next++
	c.pending[id] = ch
	c.mu.Unlock()
	abandon := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	// unsent gives back the slot of a request that was never written.
	unsent := func() {
		abandon()
		<-c.slots
	}

	msg, f, err := api.NewFrameMessage(id)
	if err != nil {
		unsent()
		return replicaReply{}, err
	}
	err = build(f)
	if err == nil {
		if size, serr := msg.TotalSize(); serr == nil && size > uint64(c.maxFrame) {
			err = api.NewError(api.CodeMessageTooLarge, "request of %d bytes over the leader's frame limit of %d", size, c.maxFrame)
		}
	}
	if err != nil {
		msg.Release()
		unsent()
		return replicaReply{}, err
	}
	written, err := c.write(ctx, msg)
	msg.Release()
	if err != nil && !written {
		unsent()
		return replicaReply{}, err
	}
	if err != nil {
		// Part of the frame may be on the stream: it is out of step.
		c.fail(fmt.Errorf("write request: %w", err))
		return replicaReply{}, c.Err()
	}

	select {
	case rep, ok := <-ch:
		if !ok {
			return replicaReply{}, c.Err()
		}
		if rep.err != nil {
			return rep, rep.err
		}
		if rep.kind != want {
			c.fail(fmt.Errorf("request %v answered with %v", want, rep.kind))
			return replicaReply{}, c.Err()
		}
		return rep, nil
	case <-ctx.Done():
		abandon()
		return replicaReply{}, ctx.Err()
	}
}

// write writes one frame within ctx's deadline (defaultReplicaWriteTimeout
// when it has none). started is false when nothing was written: ctx had
// ended before.
func (c *ReplicaClient) write(ctx context.Context, msg *capnp.Message) (started bool, err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := ctx.Err(); err != nil {
		return false, err
	}
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Now().Add(defaultReplicaWriteTimeout)
	}
	_ = c.nc.SetWriteDeadline(d)
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetWriteDeadline(time.Now()) })
	defer stop()
	return true, api.WriteFrame(c.nc, msg)
}

// FetchReplica sends a replicaFetch for r (r.TopicID must be set) and
// returns the leader's answer. r.MaxWait is the leader's long poll: ctx
// must allow for it. The leader's errors (NOT_LEADER, FENCED_LEADER_EPOCH,
// UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_ID, OFFSET_OUT_OF_RANGE, ...) are
// *api.Error.
func (c *ReplicaClient) FetchReplica(ctx context.Context, r engine.ReplicaFetch) (ReplicaFetchResult, error) {
	rep, err := c.call(ctx, api.Frame_Which_replicaFetchResponse, func(f api.Frame) error {
		q, err := f.NewReplicaFetchRequest()
		if err != nil {
			return err
		}
		if err := q.SetTopic(r.Topic); err != nil {
			return err
		}
		if err := q.SetTopicId(r.TopicID.Bytes()); err != nil {
			return err
		}
		if err := q.SetFollowerId(r.FollowerID); err != nil {
			return err
		}
		q.SetPartition(uint32(r.Partition))
		q.SetLeaderEpoch(r.LeaderEpoch)
		q.SetFetchOffset(r.FetchOffset)
		q.SetDurableOffset(r.DurableOffset)
		q.SetMaxBytes(clampU32(r.MaxBytes))
		q.SetMaxWaitMs(clampU32(int(r.MaxWait / time.Millisecond)))
		return nil
	})
	return rep.fetch, err
}

// EndOffsetForEpoch asks the leader for the end offset of epoch in its log
// (KIP-279): it returns the largest epoch at or below epoch the leader
// knows and the start offset of the next epoch after it (the leader's log
// end offset when it is the latest). UNKNOWN_LEADER_EPOCH (an *api.Error)
// when the leader has none at or below epoch.
func (c *ReplicaClient) EndOffsetForEpoch(ctx context.Context, topic string, id api.TopicID, partition int, epoch uint32) (uint32, uint64, error) {
	rep, err := c.call(ctx, api.Frame_Which_offsetForLeaderEpochResponse, func(f api.Frame) error {
		q, err := f.NewOffsetForLeaderEpochRequest()
		if err != nil {
			return err
		}
		if err := q.SetTopic(topic); err != nil {
			return err
		}
		if err := q.SetTopicId(id.Bytes()); err != nil {
			return err
		}
		q.SetPartition(uint32(partition))
		q.SetLeaderEpoch(epoch)
		return nil
	})
	return rep.epoch, rep.end, err
}
