package engine

import (
	"context"
	"sync"
	"time"
)

// Giving back preallocated space. Each partition's active segment holds
// the space its preallocation steps took beyond its last batch
// (segment.Log.Spare). With many partitions on a small volume that space
// can be most of the room above the free-space floor while a batch for
// another partition is refused. So a publish refused by the floor first
// asks every other partition to give its spare space back
// (segment.Log.ReleaseSpare, run by each idle partition's own append
// goroutine, so never concurrently with that partition's writes; a busy
// one is skipped: it is using its space), counts the bytes
// released as free, and is admitted again once; only then is it answered
// DISK_FULL.

// reclaimEvery bounds how often refused publishes make every partition
// give back its preallocated space: one such pass per interval, so a
// producer retrying against a really full disk does not turn each retry
// into a round trip to every partition.
const reclaimEvery = diskFreeRefresh

// reclaimLogEvery bounds the INFO lines about space given back.
const reclaimLogEvery = time.Minute

// reclaimer serializes the passes that give back preallocated space.
type reclaimer struct {
	mu       sync.Mutex
	gen      uint64    // passes made; guarded by mu
	at       time.Time // end of the last pass; guarded by mu
	loggedAt time.Time // last INFO line; guarded by mu
	freed    int64     // bytes given back since the last INFO line
	passes   int       // passes that gave back bytes since the last INFO line
}

// reclaimSpare makes every partition except except give back the space
// its active segment preallocated beyond its end, and reports whether a
// publish refused by the floor should be admitted again: bytes were given
// back (and counted as free), or another publish's pass ended while this
// one waited for it. A pass runs at most once per reclaimEvery and skips
// partitions whose append goroutine is busy; ctx bounds the wait for the
// others' answers.
func (e *Engine) reclaimSpare(ctx context.Context, except *partition) bool {
	r := &e.reclaim
	r.mu.Lock()
	gen := r.gen
	r.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen {
		return true // a pass ended while this caller waited: retry against it
	}
	now := e.opts.Now()
	if !r.at.IsZero() && now.Sub(r.at) < reclaimEvery && !now.Before(r.at) {
		return false
	}
	var parts []*partition
	e.mu.RLock()
	for _, t := range e.topics {
		for _, p := range t.parts() {
			if p != except && p.log != nil {
				parts = append(parts, p)
			}
		}
	}
	e.mu.RUnlock()
	var freed int64
	for _, p := range parts {
		if ctx.Err() != nil {
			break
		}
		freed += p.releaseSpare(ctx)
	}
	r.gen++
	r.at = e.opts.Now()
	if freed <= 0 {
		return false
	}
	e.disk.released(freed)
	r.freed += freed
	r.passes++
	if r.loggedAt.IsZero() || r.at.Sub(r.loggedAt) >= reclaimLogEvery || r.at.Before(r.loggedAt) {
		e.log.Info("preallocated space of partitions given back for publishes that did not fit above the free-space floor",
			"freed_bytes", r.freed, "passes", r.passes, "partitions", len(parts))
		r.loggedAt, r.freed, r.passes = r.at, 0, 0
	}
	return true
}

// releaseSpare asks the append goroutine, if it is idle, to give back the
// space the active segment preallocated beyond its end, and returns the
// bytes released (0 when there was none, the goroutine was busy, the
// partition is failed or closing, or ctx ended first).
func (p *partition) releaseSpare(ctx context.Context) int64 {
	if p.log == nil || p.spare() <= 0 || p.failed.Load() != nil {
		return 0
	}
	req := make(chan int64, 1) // the answer never blocks the append goroutine
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return 0
	}
	select {
	case p.releases <- req:
	default:
		// Busy committing: it is using its space, and waiting behind
		// its fdatasync would hold up the refused publish.
		p.mu.RUnlock()
		return 0
	}
	p.mu.RUnlock()
	select {
	case n := <-req:
		return n
	case <-p.done:
		return 0
	case <-ctx.Done():
		return 0
	}
}

// releaseNow is releaseSpare on the append goroutine.
func (p *partition) releaseNow() int64 {
	if p.failed.Load() != nil {
		return 0
	}
	n, err := p.log.ReleaseSpare()
	if err != nil {
		p.logger.Warn("giving back preallocated space failed", "err", err)
		return 0
	}
	return n
}
