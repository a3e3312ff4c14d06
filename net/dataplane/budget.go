package dataplane

import (
	"context"
	"sync"
)

// byteBudget is a counting semaphore over bytes with a single waiter (the
// connection's reader). A request for more than the whole budget takes
// the whole budget, so it waits until nothing else is held but never
// forever.
type byteBudget struct {
	mu    sync.Mutex
	max   int64
	avail int64
	// freed is closed and replaced at every release, waking the waiter.
	freed chan struct{}
}

func newByteBudget(max int64) *byteBudget {
	return &byteBudget{max: max, avail: max, freed: make(chan struct{})}
}

// acquire takes n bytes (at most the whole budget), waiting for releases,
// and returns the amount taken, to be given to release. It fails only
// when ctx ends.
func (b *byteBudget) acquire(ctx context.Context, n int64) (int64, error) {
	n = min(n, b.max)
	for {
		b.mu.Lock()
		if b.avail >= n {
			b.avail -= n
			b.mu.Unlock()
			return n, nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// release gives back n bytes taken by acquire; n 0 is a no-op.
func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.avail += n
	close(b.freed)
	b.freed = make(chan struct{})
}
