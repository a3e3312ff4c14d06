package engine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/segment"
)

// DefaultScrubBytesPerSec is the read rate of the background verification
// of sealed segments: low enough to leave the disk to producers and
// consumers.
const DefaultScrubBytesPerSec = 32 << 20 // 32 MiB/s

// errScrubStopped stops the scrub when the engine closes.
var errScrubStopped = errors.New("engine: scrub stopped")

// startScrub starts the background verification of the sealed segments of
// every partition, one partition at a time (segment.Log.VerifySealed at
// Options.ScrubBytesPerSec): once after Open, and again every
// Options.ScrubInterval when it is positive (each pass covers the
// partitions of that moment). Recovery only spot-checks sealed segments;
// this finds damage inside them. On a single node a corrupt partition is
// put in the failed state (PARTITION_FAILED, with the file and byte
// position in the error and in one log line); nothing is truncated and
// the other partitions keep serving. On a replicated partition
// (Options.Replication) the damage is recorded instead
// (ReplicaState.Corrupt: not eligible as leader), and a follower repairs
// it from its leader (repairCorrupt).
func (e *Engine) startScrub() {
	e.scrubDone = make(chan struct{})
	if e.opts.ScrubBytesPerSec < 0 {
		close(e.scrubDone)
		return
	}
	go func() {
		defer close(e.scrubDone)
		for pass := 1; ; pass++ {
			if !e.scrub(e.scrubParts(), pass) || e.opts.ScrubInterval <= 0 {
				return
			}
			t := time.NewTimer(e.opts.ScrubInterval)
			select {
			case <-e.closing:
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
}

// scrubParts returns every partition, sorted by topic and partition.
func (e *Engine) scrubParts() []*partition {
	e.mu.RLock()
	var parts []*partition
	for _, t := range e.topics {
		parts = append(parts, t.parts()...)
	}
	e.mu.RUnlock()
	slices.SortFunc(parts, func(a, b *partition) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return a.id - b.id
	})
	return parts
}

// scrub verifies parts once (pass counts from 1 at start); false when
// the engine is closing.
func (e *Engine) scrub(parts []*partition, pass int) bool {
	pc := &pacer{rate: e.opts.ScrubBytesPerSec, start: time.Now(), stop: e.closing}
	for _, p := range parts {
		if p.log == nil || p.failed.Load() != nil || p.deleted.Load() || p.knownCorrupt() {
			continue
		}
		err := p.log.VerifySealed(context.Background(), pc.wait)
		switch {
		case err == nil, errors.Is(err, segment.ErrClosed):
		case errors.Is(err, errScrubStopped):
			return false
		case errors.Is(err, segment.ErrCorrupt) && p.repl != nil:
			p.markCorrupt(err)
		case errors.Is(err, segment.ErrCorrupt):
			p.fail(api.WrapError(api.CodePartitionFailed, err, "partition %s/%d is corrupt", p.topic, p.id))
		default:
			p.logger.Warn("verification of sealed segments failed", "err", err)
		}
	}
	if pc.bytes > 0 {
		// The first pass after start at INFO; the periodic ones
		// (--scrub-interval) at DEBUG, their damage at WARN above.
		lvl := slog.LevelInfo
		if pass > 1 {
			lvl = slog.LevelDebug
		}
		e.log.Log(context.Background(), lvl, "sealed segments verified", "pass", pass, "partitions", len(parts), "bytes", pc.bytes, "duration", time.Since(pc.start).Round(time.Millisecond))
	}
	return true
}

// pacer limits the scrub to rate bytes per second over its whole run and
// stops it when stop closes.
type pacer struct {
	rate  int64
	start time.Time
	bytes int64
	stop  <-chan struct{}
}

// wait accounts for n bytes read and blocks until the rate allows more.
func (p *pacer) wait(n int) error {
	p.bytes += int64(n)
	due := p.start.Add(time.Duration(float64(p.bytes) / float64(p.rate) * float64(time.Second)))
	d := time.Until(due)
	if d < 10*time.Millisecond {
		select {
		case <-p.stop:
			return errScrubStopped
		default:
			return nil
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.stop:
		return errScrubStopped
	case <-t.C:
		return nil
	}
}
