package dataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
)

// Reading a frame never allocates on the peer's word alone. The stream
// header (at most maxFrameSegments sizes) is read first; the Cap'n Proto
// part and the records tail are then charged to the server's budget
// (Options.MaxInFlightRequestBytes) before their buffers exist, and the
// buffers grow as bytes arrive. See docs/operations.md, "Memory bounds".
const (
	// readBufferBytes is each connection's read-ahead buffer. Frames are
	// read through it; a records tail larger than it is read straight into
	// its own buffer.
	readBufferBytes = 8 << 10
	// maxFrameSegments bounds the segments of one frame, as the Cap'n Proto
	// C++ reader does (serialize.c++ refuses 512 or more): the stream
	// header is then at most 2 KiB whatever it declares.
	maxFrameSegments = 511
	// requestOverheadBytes is charged to the server budget for every
	// request in flight on top of its bytes: the goroutine that serves it
	// (its stack starts at 8 KiB) and its decoded fields.
	requestOverheadBytes = 8 << 10
	// smallRequestBytes is the largest charge that may pass a request
	// waiting for the server budget when it fits (see byteBudget): a
	// handshake, a heartbeat or a small publish is not held behind a large
	// publish.
	smallRequestBytes = 64 << 10
	// decodeFactor bounds the memory a frame's decoded fields take, per
	// byte of the frame: a list element takes at least 8 bytes of the frame
	// (checkListLen) and decodes into at most 64 (an engine.OffsetCommit).
	// A frame is charged decodeFactor times its size.
	decodeFactor = 8
	// firstChunkBytes is the first allocation of a buffer read on the
	// peer's word; it then grows growFactor times whenever it is full, up
	// to the declared size. A claim that no bytes back costs at most
	// firstChunkBytes, and growing copies at most 1/15 of the final size.
	firstChunkBytes = 64 << 10
	growFactor      = 16
)

// frameTimer enforces the read deadline of one frame: its start plus the
// timeout, extended by the time spent waiting for budget (which is not the
// peer's doing) unless fixed.
type frameTimer struct {
	c        *conn
	deadline time.Time
	fixed    bool // the handshake's deadline is absolute
	paused   time.Time
}

// startFrame arms the read deadline of a frame that starts now.
func (c *conn) startFrame(timeout time.Duration, fixed bool) *frameTimer {
	t := &frameTimer{c: c, deadline: time.Now().Add(timeout), fixed: fixed}
	c.setReadDeadline(t.deadline)
	return t
}

// pause lifts the deadline while the reader waits for budget.
func (t *frameTimer) pause() {
	if t.fixed {
		return
	}
	t.paused = time.Now()
	t.c.setReadDeadline(time.Time{})
}

// resume re-arms the deadline, moved by the length of the pause.
func (t *frameTimer) resume() {
	if t.fixed {
		return
	}
	t.deadline = t.deadline.Add(time.Since(t.paused))
	t.c.setReadDeadline(t.deadline)
}

// waitCtx is the context of a wait for budget: the reader's, bounded by
// the deadline when it is fixed (a connection waits for its handshake's
// budget no longer than HandshakeTimeout).
func (t *frameTimer) waitCtx() (context.Context, context.CancelFunc) {
	if !t.fixed {
		return t.c.readCtx, func() {}
	}
	return context.WithDeadline(t.c.readCtx, t.deadline)
}

// stop lifts the deadline once the frame has been read.
func (t *frameTimer) stop() { t.c.setReadDeadline(time.Time{}) }

// readRequest waits for the next frame's first byte (with no deadline:
// the idle timer watches an idle connection), then reads the frame and its
// records tail within FrameReadTimeout (handshake: the deadline given) and
// decodes it. The request holds its share of the budgets, given back by
// releaseRequest. A tail over the batch limit is not read: the caller
// answers MESSAGE_TOO_LARGE and closes.
func (c *conn) readRequest(handshakeDeadline time.Time) (request, error) {
	var t *frameTimer
	if !handshakeDeadline.IsZero() {
		t = &frameTimer{c: c, deadline: handshakeDeadline, fixed: true}
		c.setReadDeadline(handshakeDeadline)
	}
	if _, err := c.br.Peek(1); err != nil {
		return request{}, err // io.EOF: closed between frames
	}
	c.touch()
	if t == nil {
		t = c.startFrame(c.srv.opts.FrameReadTimeout, false)
	}
	defer t.stop()
	msg, f, held, err := c.readFrame(t)
	if err != nil {
		return request{}, err
	}
	req, err := parseFrame(f)
	msg.Release()
	if err != nil {
		c.srv.budget.release(held)
		return request{}, err
	}
	req.held = held
	c.touch()
	if req.tailLen > 0 && req.tailLen <= c.srv.maxBatchBytes {
		if err := c.readTail(&req, t); err != nil {
			c.releaseRequest(&req)
			return request{}, err
		}
		c.touch()
	}
	c.inflight.Add(1)
	return req, nil
}

// frameCharge is what a frame of total bytes is charged of the server
// budget: its decoded fields and the goroutine that serves it.
func frameCharge(total uint64) int64 {
	return int64(total)*decodeFactor + requestOverheadBytes
}

// readFrame reads one frame's Cap'n Proto part in stream framing. The
// returned message owns a buffer of the frame's size; frameCharge was taken
// from the server budget (held) before it was allocated.
func (c *conn) readFrame(t *frameTimer) (msg *capnp.Message, f api.Frame, held int64, err error) {
	var word [8]byte
	if _, err := io.ReadFull(c.br, word[:]); err != nil {
		return nil, f, 0, frameErr("stream header", err)
	}
	nseg := uint64(binary.LittleEndian.Uint32(word[:4])) + 1
	limit := uint64(c.srv.opts.MaxFrameBytes)
	if nseg > maxFrameSegments {
		if word[0] == 0x16 && word[1] == 0x03 {
			// A TLS handshake record (RFC 8446 §5.1): a client with TLS
			// on, and this data plane without (no --tls-cert).
			return nil, f, 0, fmt.Errorf("dataplane: read frame: %w: the client sent a TLS ClientHello to the plaintext data plane (start sq-server with --tls-cert, or connect without TLS)", api.ErrFrameTooLarge)
		}
		return nil, f, 0, fmt.Errorf("dataplane: read frame: %w: %d segments, at most %d", api.ErrFrameTooLarge, nseg, maxFrameSegments)
	}
	hdrLen := (4 + 4*nseg + 7) &^ 7
	hdr := word[:]
	if hdrLen > 8 {
		hdr = make([]byte, hdrLen) // at most 2 KiB
		copy(hdr, word[:])
		if _, err := io.ReadFull(c.br, hdr[8:]); err != nil {
			return nil, f, 0, frameErr("stream header", err)
		}
	}
	total := hdrLen
	for i := range nseg {
		total += uint64(binary.LittleEndian.Uint32(hdr[4+4*i:])) * 8
	}
	if total > limit {
		return nil, f, 0, fmt.Errorf("dataplane: read frame: %w: %d bytes, limit %d", api.ErrFrameTooLarge, total, limit)
	}
	t.pause()
	ctx, cancel := t.waitCtx()
	held, err = c.srv.budget.acquire(ctx, frameCharge(total))
	cancel()
	t.resume()
	if err != nil {
		return nil, f, 0, err
	}
	buf, err := readGrowing(c.br, hdr, int(total))
	if err != nil {
		c.srv.budget.release(held)
		return nil, f, 0, frameErr("segments", err)
	}
	if msg, err = capnp.Unmarshal(buf); err == nil {
		// Bound traversal so a crafted message with pointer loops or
		// empty list elements cannot spin: decoding reads each part of a
		// frame once or twice.
		msg.ResetReadLimit(total * 8)
		if f, err = api.ReadRootFrame(msg); err != nil {
			msg.Release()
		}
	}
	if err != nil {
		c.srv.budget.release(held)
		return nil, f, 0, fmt.Errorf("dataplane: read frame: %w", err)
	}
	return msg, f, held, nil
}

// readTail reads the records tail of req. A publish's tail (or a
// publishBatches request's, charged entryOverheadBytes more per entry) is
// read into a pooled batch buffer (readTailBuffer) that Append will own,
// once both budgets have room for it; the
// frame's share of the server budget is given back first, so the reader
// never waits while holding any of it. Any other tail is read and dropped
// without a buffer of its size.
func (c *conn) readTail(req *request, t *frameTimer) error {
	n := int64(req.tailLen)
	if req.kind != api.Frame_Which_publishRequest && req.kind != api.Frame_Which_publishBatchesRequest {
		if _, err := io.CopyN(io.Discard, c.br, n); err != nil {
			return frameErr("records tail", err)
		}
		return nil
	}
	c.srv.budget.release(req.held)
	req.held = 0
	t.pause()
	ctx, cancel := t.waitCtx()
	var err error
	if req.tailHeld, err = c.tailBudget.acquire(ctx, n); err == nil {
		req.held, err = c.srv.budget.acquire(ctx, n+requestOverheadBytes+int64(len(req.entries))*entryOverheadBytes)
	}
	cancel()
	t.resume()
	if err != nil {
		return err
	}
	if req.tail, err = readTailBuffer(c.br, int(n), c.srv.releaseBuffer); err != nil {
		return frameErr("records tail", err)
	}
	return nil
}

// releaseTail gives a publish's records tail back to the pool of batch
// buffers (Server.releaseBuffer, batch.ReleaseBuffer) once nothing holds
// it: the engine is done with it (releaseTailAfter) or it never reached
// the broker. Each tail is given back at most once, and never while the
// broker may still hold it.
func (c *conn) releaseTail(tail []byte) { c.srv.releaseBuffer(tail) }

// releaseTailAfter gives tail, the batch queued as pd, back once the engine
// no longer holds it (pd.Done): at once when the wait for pd saw the
// commit, otherwise (a wait cut short by the connection's end) from a
// goroutine that waits for the commit.
func (c *conn) releaseTailAfter(pd *engine.Pending, tail []byte) {
	select {
	case <-pd.Done():
		c.releaseTail(tail)
	default:
		go func() {
			<-pd.Done()
			c.releaseTail(tail)
		}()
	}
}

// readTailBuffer reads a publish's n-byte records tail into a batch buffer
// (batch.NewBuffer), which release gives back. A buffer of n's size that
// the pool holds is filled at once; otherwise, as in readGrowing, the
// buffer grows with the bytes that arrive, each step taken from the pool
// and the one it replaces given back. On an error nothing is kept.
func readTailBuffer(r io.Reader, n int, release func([]byte)) ([]byte, error) {
	if b := batch.PooledBuffer(n); b != nil {
		if _, err := io.ReadFull(r, b); err != nil {
			release(b)
			return nil, err
		}
		return b, nil
	}
	b := batch.NewBuffer(min(n, firstChunkBytes))[:0]
	for len(b) < n {
		if len(b) == min(n, cap(b)) {
			nb := batch.NewBuffer(min(n, cap(b)*growFactor))[:len(b)]
			copy(nb, b)
			release(b)
			b = nb
		}
		m, err := r.Read(b[len(b):min(n, cap(b))])
		b = b[:len(b)+m]
		if err != nil && len(b) < n {
			release(b)
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}

// checkListLen refuses a list with more elements than its frame could hold
// at elemBytes each (8 for text and struct lists, 4 for UInt32 lists).
// Cap'n Proto lets a small frame declare many empty elements; decoded, each
// would cost far more memory than the frame was charged (decodeFactor).
func checkListLen(l capnp.List, elemBytes uint64) error {
	n := uint64(l.Len())
	if n == 0 {
		return nil
	}
	size, err := l.Message().TotalSize()
	if err != nil {
		return err
	}
	if n*elemBytes > size {
		return fmt.Errorf("dataplane: a list of %d elements in a frame of %d bytes", n, size)
	}
	return nil
}

// releaseRequest gives back what req holds of the budgets.
func (c *conn) releaseRequest(req *request) {
	c.srv.budget.release(req.held)
	c.tailBudget.release(req.tailHeld)
	req.held, req.tailHeld = 0, 0
}

// readGrowing reads until it holds n bytes, starting with prefix (copied).
// Its buffer starts at firstChunkBytes (or n when smaller, or prefix's
// length when larger) and grows growFactor times whenever it is full, so
// memory follows the bytes that arrive, not the size declared.
func readGrowing(r io.Reader, prefix []byte, n int) ([]byte, error) {
	b := make([]byte, len(prefix), min(n, max(firstChunkBytes, len(prefix))))
	copy(b, prefix)
	for len(b) < n {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(n, cap(b)*growFactor))
			copy(nb, b)
			b = nb
		}
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil && len(b) < n {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}

// frameErr wraps an error reading part of a frame; a stream that ends
// inside a frame is io.ErrUnexpectedEOF.
func frameErr(part string, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("dataplane: read frame: %s: %w", part, err)
}

// boundTopic keeps at most one byte more than the longest topic name, so
// that a publish waiting for budget holds a small decoded frame whatever
// its topic field held; the broker refuses the name either way.
func boundTopic(topic string) string {
	if len(topic) <= engine.MaxTopicNameLength {
		return topic
	}
	return strings.Clone(topic[:engine.MaxTopicNameLength+1])
}
