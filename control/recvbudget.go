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
// whose client streams messages, when it ends. The charge is taken without
// waiting: the tap runs on the connection's reader goroutine, and a wait
// there would stall the other calls of the connection, among them the
// ones holding the budget. A call that finds no room is refused with
// THROTTLED (gRPC RESOURCE_EXHAUSTED, retriable) before anything of it is
// read.
type recvBudget struct {
	max     int64 // bytes; Options.MaxInflightRequestBytes
	charge  int64 // bytes per call; the receive limit
	timeout time.Duration

	mu       sync.Mutex
	used     int64         // bytes held, receives and sends
	sendUsed int64         // bytes of used held by Subscribe responses, at most max/2
	changed  chan struct{} // closed and replaced when bytes are given back

	refused atomic.Int64

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
	n         int64
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
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	b.mu.Unlock()
}

// acquireSend takes n bytes (at most half the budget) for a Subscribe
// response, waiting while they do not fit, at most b.timeout: responses
// may hold half the budget, so calls receiving their requests always
// find the other half. It fails with THROTTLED after the timeout, or with
// ctx's error.
func (b *recvBudget) acquireSend(ctx context.Context, n int64) (int64, error) {
	n = min(n, b.max/2)
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		if b.used+n <= b.max && b.sendUsed+n <= b.max/2 {
			b.used += n
			b.sendUsed += n
			b.mu.Unlock()
			return n, nil
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		ch := b.changed
		b.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(b.timeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-timeout:
			return 0, api.NewError(api.CodeThrottled,
				"control: subscribe: no room for a %d-byte response in the gRPC request budget (%d bytes, half for responses) within %v; subscribe again",
				n, b.max, b.timeout)
		}
	}
}

// sendCharges are the budget charges of one Subscribe stream: the
// response being sent, and the one sent before it, which gRPC may still
// hold until the next Send returns (a Send waits until the stream's
// earlier data is written but for its 64 KiB write quota).
type sendCharges struct {
	b         *recvBudget
	prev, cur int64
}

// acquire charges the next response n bytes.
func (c *sendCharges) acquire(ctx context.Context, n int64) error {
	got, err := c.b.acquireSend(ctx, n)
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

// inUse returns the bytes held now.
func (b *recvBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
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
	if !b.tryAcquire(b.charge) {
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
	c := &recvCall{b: b, n: b.charge, streaming: streaming, cancel: cancel}
	c.timer = time.AfterFunc(b.timeout, func() { cancel(errRecvTimeout) })
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
