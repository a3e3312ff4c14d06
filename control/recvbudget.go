package control

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/tap"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// errRecvTimeout ends a call whose request message did not arrive within
// Options.RecvTimeout.
var errRecvTimeout = errors.New("control: request message not received within the receive timeout")

// recvBudget bounds the memory gRPC calls can make the server hold while
// their request messages arrive. grpc-go buffers a message as its bytes
// arrive, up to the server's receive limit (MaxBatchBytes + 1 MiB), and
// exposes no hook between its 5-byte length prefix and its body; so each
// call is charged twice that limit (recvCharge) when its HEADERS frame arrives (tap.
// ServerInHandle), before any byte of its message is read, and gives it
// back once its message is received (stats.InPayload) or, for a call
// whose client streams messages, when it ends. The tap runs on the
// connection's reader goroutine, where a wait would stop the connection's
// other calls (among them ones holding the budget while the rest of their
// message waits behind it), so it never waits: a call that finds no room
// is admitted uncharged, up to maxWaitingCalls of them, and waits for its
// charge on its own goroutine at stats.Begin, before its message is read
// (grpc-go reads a stream's data only as the handler asks, beyond its
// flow-control window); beyond that it is refused with THROTTLED (gRPC
// RESOURCE_EXHAUSTED, retriable) before anything of it is read.
type recvBudget struct {
	max     int64 // bytes; Options.MaxInflightRequestBytes
	charge  int64 // bytes per call; the receive limit
	timeout time.Duration

	mu       sync.Mutex
	used     int64         // bytes held, receives and sends
	sendUsed int64         // bytes of used held by Subscribe responses, at most max/2
	changed  chan struct{} // closed and replaced when bytes are given back
	sendQ    []*sendWaiter // responses waiting for room, in arrival order

	refused atomic.Int64
	waiting atomic.Int64 // calls admitted uncharged, waiting for their charge

	methodsOnce  sync.Once
	clientStream map[string]bool // full method name -> client streams messages
}

// recvCharge is what a call is charged while its request arrives, in
// bytes: twice the receive limit (maxBatchBytes + 1 MiB), because grpc-go
// holds a message's bytes as they arrived and, while decoding it, a
// contiguous copy of them.
func recvCharge(maxBatchBytes int) int64 { return 2 * int64(maxBatchBytes+grpcFramingBytes) }

// MinInflightRequestBytes is the least Options.MaxInflightRequestBytes
// New accepts for a batch limit of maxBatchBytes: one call's charge,
// 2 × (maxBatchBytes + 1 MiB) bytes.
func MinInflightRequestBytes(maxBatchBytes int) int64 { return recvCharge(maxBatchBytes) }

// recvCall is the charge of one call, found in its context.
type recvCall struct {
	b         *recvBudget
	n         int64 // bytes held; set on the call's goroutine
	pending   bool  // admitted without its charge: waits for it at stats.Begin
	streaming bool
	cancel    context.CancelCauseFunc
	timer     *time.Timer
	released  atomic.Bool
}

type recvCallKey struct{}

// release gives the call's charge back, once.
func (c *recvCall) release() {
	if c.released.CompareAndSwap(false, true) {
		c.b.give(c.n, 0)
	}
}

// give returns n bytes, send of them held by responses, and wakes the
// waiting senders.
func (b *recvBudget) give(n, send int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.sendUsed -= send
	b.grantLocked()
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	b.mu.Unlock()
}

// sendWaiter is a Subscribe response waiting for room, in arrival order.
type sendWaiter struct {
	n       int64
	ready   chan struct{} // closed once granted
	granted bool
}

// acquireSend takes n bytes (at most half the budget) for a Subscribe
// response, waiting in arrival order while they do not fit, at most wait:
// responses may hold half the budget, so calls receiving their requests
// always find the other half. It returns 0 and no error when wait passed
// (for a wait shorter than b.timeout), THROTTLED after b.timeout, or ctx's
// error.
func (b *recvBudget) acquireSend(ctx context.Context, n int64, wait time.Duration) (int64, error) {
	n = min(n, b.max/2)
	b.mu.Lock()
	if len(b.sendQ) == 0 && b.sendFitsLocked(n) {
		b.used += n
		b.sendUsed += n
		b.mu.Unlock()
		return n, nil
	}
	w := &sendWaiter{n: n, ready: make(chan struct{})}
	b.sendQ = append(b.sendQ, w)
	b.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		if wait >= b.timeout {
			err = api.NewError(api.CodeThrottled,
				"control: subscribe: no room for a %d-byte response in the gRPC request budget (%d bytes, half for responses) within %v; subscribe again",
				n, b.max, b.timeout)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.granted {
		return n, nil
	}
	for i, q := range b.sendQ {
		if q == w {
			b.sendQ = append(b.sendQ[:i], b.sendQ[i+1:]...)
			break
		}
	}
	b.grantLocked()
	return 0, err
}

// sendFitsLocked reports whether a response of n bytes fits now.
func (b *recvBudget) sendFitsLocked(n int64) bool {
	return b.used+n <= b.max && b.sendUsed+n <= b.max/2
}

// grantLocked grants waiting responses in order while the first fits.
func (b *recvBudget) grantLocked() {
	for len(b.sendQ) > 0 && b.sendFitsLocked(b.sendQ[0].n) {
		w := b.sendQ[0]
		b.sendQ = b.sendQ[1:]
		b.used += w.n
		b.sendUsed += w.n
		w.granted = true
		close(w.ready)
	}
}

// drainProbeWait is how long a stream that holds the charge of a response
// gRPC may not have written yet waits for room before it probes whether
// that response was written.
const drainProbeWait = 50 * time.Millisecond

// sendCharges are the budget charges of one Subscribe stream: the
// response being sent, and the one sent before it, which gRPC may still
// hold until the next Send returns (a Send waits until the stream's
// earlier data is written but for its 64 KiB write quota).
type sendCharges struct {
	b         *recvBudget
	prev, cur int64
	// probe sends tmpl, a response without records: it returns once the
	// previous response is written.
	probe func() error
	tmpl  *sqv1.SubscribeResponse
}

// acquire charges the next response n bytes. A stream that holds the
// previous response's charge does not wait for room with it: after
// drainProbeWait it sends a response without records, which returns once
// the previous one is written, gives that charge back and waits without
// holding anything. So waiting streams never hold the budget that would
// let them go on, and a client that stops reading holds its charge while
// its Send blocks.
func (c *sendCharges) acquire(ctx context.Context, n int64) error {
	wait := c.b.timeout
	if c.prev > 0 && c.probe != nil {
		wait = min(drainProbeWait, c.b.timeout)
	}
	got, err := c.b.acquireSend(ctx, n, wait)
	if err != nil || got > 0 {
		c.cur += got
		return err
	}
	if err := c.probe(); err != nil {
		return err
	}
	c.b.give(c.prev, c.prev)
	c.prev = 0
	got, err = c.b.acquireSend(ctx, n, c.b.timeout)
	c.cur += got
	return err
}

// sent records that the current response's Sends returned: the one
// before it is written and its charge given back.
func (c *sendCharges) sent() {
	c.b.give(c.prev, c.prev)
	c.prev, c.cur = c.cur, 0
}

// releaseAll gives back every charge; the stream has ended.
func (c *sendCharges) releaseAll() {
	c.b.give(c.prev+c.cur, c.prev+c.cur)
	c.prev, c.cur = 0, 0
}

// tryAcquire takes n bytes if they fit beside the others.
func (b *recvBudget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// maxWaitingCalls bounds the calls admitted while the budget is spent,
// each waiting for its charge before its message is read; each holds at
// most its stream's flow-control window (streamWindowBytes) meanwhile.
const maxWaitingCalls = 64

// streamWindowBytes is the HTTP/2 flow-control window of every gRPC
// stream and connection (grpc.InitialWindowSize; it turns off grpc-go's
// growing of windows by bandwidth-delay estimates, up to 16 MiB): what a
// client can send on a call that does not read yet.
const streamWindowBytes = 1 << 20

// acquireWait takes n bytes, waiting for room until ctx ends (the
// receive timeout cancels it); it reports whether it took them.
func (b *recvBudget) acquireWait(ctx context.Context, n int64) bool {
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return true
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// inUse returns the bytes held now, and those of them held by Subscribe
// responses.
func (b *recvBudget) inUse() (all, responses int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.sendUsed
}

// tap is the server's tap.ServerInHandle: it charges a call of a
// registered method before its message is read, or refuses it.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	b := s.recv
	b.methodsOnce.Do(func() {
		b.clientStream = make(map[string]bool)
		for svc, si := range s.grpc.GetServiceInfo() {
			for _, m := range si.Methods {
				b.clientStream["/"+svc+"/"+m.Name] = m.IsClientStream
			}
		}
	})
	streaming, ok := b.clientStream[info.FullMethodName]
	if !ok {
		// Unknown methods are answered UNIMPLEMENTED without reading a
		// message, and get no stats End that would release a charge.
		return ctx, nil
	}
	charged, pending := b.tryAcquire(b.charge), false
	if !charged && b.waiting.Add(1) <= maxWaitingCalls {
		// Admitted uncharged: the call waits for its charge on its own
		// goroutine (stats.Begin) before its message is read, and its
		// stream's flow-control window bounds what arrives meanwhile.
		pending = true
	} else if !charged {
		b.waiting.Add(-1)
		n := b.refused.Add(1)
		s.metrics.grpcThrottled.Inc()
		if n&(n-1) == 0 { // the 1st, 2nd, 4th, 8th ... refusal
			s.opts.Logger.Warn("control: gRPC call refused: request budget spent",
				"method", info.FullMethodName, "budget_bytes", b.max, "charge_bytes", b.charge, "refused_total", n)
		}
		return ctx, ToStatus(api.NewError(api.CodeThrottled,
			"control: the gRPC request budget (%d bytes, %d per call receiving its request) is spent; retry",
			b.max, b.charge))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	c := &recvCall{b: b, streaming: streaming, cancel: cancel, pending: pending}
	if charged {
		c.n = b.charge
	}
	c.timer = time.AfterFunc(b.timeout, func() { cancel(errRecvTimeout) })
	if pending {
		// Started once the call has its charge: the calls holding the
		// budget give it back within their own receive timeout, and the
		// client's deadline or reset ends the wait sooner.
		c.timer.Stop()
	}
	return context.WithValue(ctx, recvCallKey{}, c), nil
}

// recvStats is the stats.Handler that gives charges back.
type recvStats struct{ s *Server }

// TagRPC implements stats.Handler.
func (recvStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// HandleRPC implements stats.Handler: a received message gives back the
// charge of a call whose client sends one message, and restarts the
// receive timer of one that streams; the end of a call gives back what it
// still holds and stops its timer.
func (recvStats) HandleRPC(ctx context.Context, st stats.RPCStats) {
	c, ok := ctx.Value(recvCallKey{}).(*recvCall)
	if !ok {
		return
	}
	switch st.(type) {
	case *stats.Begin:
		if c.pending {
			c.pending = false
			if c.b.acquireWait(ctx, c.b.charge) {
				c.n = c.b.charge
				// The receive timeout counts from here: the wait for
				// the budget is not the client's doing.
				c.timer.Reset(c.b.timeout)
			}
			c.b.waiting.Add(-1)
		}
	case *stats.InPayload:
		if c.streaming {
			c.timer.Reset(c.b.timeout)
			return
		}
		c.timer.Stop()
		c.release()
	case *stats.End:
		c.timer.Stop()
		c.release()
		c.cancel(nil)
	}
}

// TagConn implements stats.Handler.
func (recvStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (recvStats) HandleConn(context.Context, stats.ConnStats) {}
