package dataplane

import (
	"context"
	"sync"
)

// byteBudget is a counting semaphore over bytes with first-come,
// first-served waiters: a request is granted only when every request that
// waited before it has been, so a large publish is never starved by a
// stream of frames. Requests of at most small bytes are the exception:
// they are granted whenever they fit, so that handshakes, heartbeats,
// commits and fetch requests keep flowing while a large publish waits for
// room. A request for more than the whole budget is clamped to the whole
// budget, so it waits until nothing else is held but never forever.
//
// The server holds one byteBudget for the request bytes of every
// connection (Options.MaxInFlightRequestBytes, Kafka's
// queued.max.request.bytes); each connection holds one for its own publish
// tails (Options.MaxInFlightBytesPerConn). A holder of a budget never waits
// for the same budget again, so waits cannot form a cycle.
type byteBudget struct {
	mu      sync.Mutex
	max     int64
	small   int64 // requests up to this size may pass waiters
	used    int64
	waiters []*budgetWaiter // FIFO
}

// budgetWaiter is one blocked acquire; ready is closed once n is granted.
type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

// newByteBudget returns a budget of max bytes in which requests of at most
// small bytes may pass waiting ones.
func newByteBudget(max, small int64) *byteBudget {
	return &byteBudget{max: max, small: small}
}

// acquire takes n bytes (at most the whole budget), waiting behind earlier
// requests, and returns the amount taken, to be given to release. It fails
// only when ctx ends, and then holds nothing. n <= 0 takes nothing.
func (b *byteBudget) acquire(ctx context.Context, n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	n = min(n, b.max)
	b.mu.Lock()
	if (len(b.waiters) == 0 || n <= b.small) && b.used+n <= b.max {
		b.used += n
		b.mu.Unlock()
		return n, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready:
		// Granted while ctx ended: give it back.
		b.used -= n
	default:
		for i, x := range b.waiters {
			if x == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	// The head may have changed: wake whoever now fits.
	b.grantLocked()
	return 0, ctx.Err()
}

// tryAcquire takes n bytes without waiting, and only when nobody waits and
// reserve bytes stay free beside them; it reports whether it took them.
// Holders that may never give back (subscriptions) use it, so that a
// request of up to reserve bytes always fits once the others are answered.
func (b *byteBudget) tryAcquire(n, reserve int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiters) > 0 || b.used+n+reserve > b.max {
		return false
	}
	b.used += n
	return true
}

// release gives back n bytes taken by acquire; n 0 is a no-op.
func (b *byteBudget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.used < 0 {
		panic("dataplane: byte budget released more than it gave")
	}
	b.grantLocked()
}

// grantLocked grants waiters in order while the head fits, then any small
// waiter that fits.
func (b *byteBudget) grantLocked() {
	kept := b.waiters[:0]
	for _, w := range b.waiters {
		if (len(kept) == 0 || w.n <= b.small) && b.used+w.n <= b.max {
			b.used += w.n
			close(w.ready)
		} else {
			kept = append(kept, w)
		}
	}
	clear(b.waiters[len(kept):])
	b.waiters = kept
}

// stats returns the bytes held and the number of blocked acquires.
func (b *byteBudget) stats() (used int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, len(b.waiters)
}
