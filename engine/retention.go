package engine

import (
	"errors"
	"time"

	"github.com/seedqueue/sq/segment"
)

// DefaultRetentionCheckInterval is how often the retention goroutine runs
// when Options.RetentionCheckInterval is zero.
const DefaultRetentionCheckInterval = 5 * time.Second

// retentionLoop runs EnforceRetention every interval until Close.
func (e *Engine) retentionLoop(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-e.closing:
			return
		case <-t.C:
			if err := e.EnforceRetention(); err != nil {
				e.log.Warn("retention pass failed; retried at the next one", "err", err)
			}
		}
	}
}

// EnforceRetention runs one retention pass over every partition, at the
// time given by Options.Now:
//
//   - the active segment is rolled when its first record was appended
//     segment.ms or more ago (SegmentMs), so a partition that receives no
//     appends still ages out;
//   - then the oldest sealed segments are deleted, a prefix of the log,
//     while the newest record of the segment was appended more than
//     retention.ms ago (RetentionMs, -1 never), or while the partition
//     would still hold at least retention.bytes without the segment
//     (RetentionBytes, -1 unlimited; Kafka's rule, so size retention never
//     takes a partition below retention.bytes).
//
// Times are broker append times from the time index, never producer
// timestamps. The active segment is never deleted, and the log start
// offset moves to the first remaining segment. The retention goroutine
// calls it every Options.RetentionCheckInterval; tests may call it
// directly. Failed partitions are skipped. It returns the errors of the
// partitions it could not clean, joined.
func (e *Engine) EnforceRetention() error {
	now := e.opts.Now().UnixMilli()
	e.mu.RLock()
	topics := make([]*topic, 0, len(e.topics))
	for _, t := range e.topics {
		topics = append(topics, t)
	}
	e.mu.RUnlock()
	var errs []error
	for _, t := range topics {
		for _, p := range t.parts() {
			if err := p.enforceRetention(t.meta().Config, now, func(segs []segment.SegmentInfo, total uint64) (uint64, bool) {
				return e.localRetentionCut(p, t.meta().Config, segs, total, now)
			}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// enforceRetention is one partition's part of EnforceRetention. local,
// with tiered storage, returns the cut that replaces total, the whole
// log's (only below what the remote log confirmed); without, ok is false.
func (p *partition) enforceRetention(cfg TopicConfig, now int64, local func(segs []segment.SegmentInfo, total uint64) (uint64, bool)) error {
	if p.log == nil || p.failed.Load() != nil || p.deleted.Load() {
		return nil
	}
	segs := p.log.Segments()
	if futureTimes(segs, now) {
		// Appended while the clock was ahead: bound the times first, or
		// the segments would never roll nor expire.
		if _, err := p.onAppender(p.clamps); err != nil {
			return err
		}
		segs = p.log.Segments()
	}
	if act := segs[len(segs)-1]; act.FirstAppendTime >= 0 && now-act.FirstAppendTime >= cfg.SegmentMs {
		rolled, err := p.roll()
		if err != nil {
			return err
		}
		if rolled {
			p.logger.Info("segment rolled by segment.ms", "segment", act.BaseOffset, "first_append_ms", act.FirstAppendTime, "segment_ms", cfg.SegmentMs)
			segs = p.log.Segments()
		}
	}
	cut, n := retainFrom(segs, cfg, now)
	if lc, ok := local(segs, cut); ok {
		cut, n = lc, 0
		if lc > segs[0].BaseOffset {
			n = 1
		}
	}
	if n == 0 {
		return nil
	}
	deleted, err := p.log.DeleteSegmentsBefore(cut)
	if errors.Is(err, segment.ErrClosed) {
		return nil // closed meanwhile (topic deleted, or shutdown)
	}
	if deleted > 0 {
		p.logger.Info("retention deleted segments", "segments", deleted, "log_start", p.log.LogStartOffset())
		p.retentionMoved(p.log.LogStartOffset())
	}
	if err != nil {
		return storageError("retention", err)
	}
	return nil
}

// retainFrom returns the offset from which segs (oldest first, the last
// active) are kept under cfg at time now (Unix ms), and how many sealed
// segments go.
func retainFrom(segs []segment.SegmentInfo, cfg TopicConfig, now int64) (cut uint64, n int) {
	var size int64
	for _, s := range segs {
		size += s.Bytes
	}
	for ; n < len(segs)-1; n++ {
		s := segs[n]
		byTime := cfg.RetentionMs >= 0 && s.MaxAppendTime >= 0 && now-s.MaxAppendTime > cfg.RetentionMs
		bySize := cfg.RetentionBytes >= 0 && size-s.Bytes >= cfg.RetentionBytes
		if !byTime && !bySize {
			break
		}
		size -= s.Bytes
	}
	return segs[n].BaseOffset, n
}

// futureTimes reports whether a segment of segs holds an append time more
// than segment.MaxClockAhead after now (Unix ms).
func futureTimes(segs []segment.SegmentInfo, now int64) bool {
	for _, s := range segs {
		if s.MaxAppendTime > now+segment.MaxClockAhead.Milliseconds() {
			return true
		}
	}
	return false
}

// roll asks the append goroutine to seal the active segment (segment.Log
// appends and rolls from one goroutine) and waits for it. It reports
// false without error when the partition is closing or the segment empty.
func (p *partition) roll() (bool, error) { return p.onAppender(p.rolls) }

// onAppender sends a request to the append goroutine on ch (p.rolls or
// p.clamps) and waits for its answer; false without error when the
// partition is closing.
func (p *partition) onAppender(ch chan chan rollResult) (bool, error) {
	req := make(chan rollResult, 1)
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return false, nil
	}
	select {
	case ch <- req:
	case <-p.stop:
		p.mu.RUnlock()
		return false, nil
	}
	p.mu.RUnlock()
	select {
	case r := <-req:
		return r.rolled, r.err
	case <-p.done:
		return false, nil
	}
}

// rollResult answers a roll request.
type rollResult struct {
	rolled bool
	err    error
}

// rollNow runs on the append goroutine.
func (p *partition) rollNow() rollResult {
	rolled, err := p.log.Roll()
	if err != nil {
		return rollResult{err: storageError("roll segment", err)}
	}
	return rollResult{rolled: rolled}
}

// clampNow runs on the append goroutine: it bounds the log's append times
// by the clock (segment.Log.ClampAppendTimes).
func (p *partition) clampNow() rollResult {
	changed, err := p.log.ClampAppendTimes(p.now().UnixMilli())
	if err != nil {
		return rollResult{err: storageError("clamp append times", err)}
	}
	return rollResult{rolled: changed}
}
