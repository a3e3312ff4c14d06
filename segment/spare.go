package segment

import "fmt"

// ReleaseSpare gives the space the active segment has preallocated beyond
// its last batch back to the file system (ftruncate of the .log to its
// end, through the ring.Backend) and returns the bytes released: Spare
// before the call, 0 when there is none. The next append that needs room
// preallocates again (in steps bounded by Options.AllocRoom). Like Append
// it must be called from the appending goroutine, which is what makes it
// safe: no write to the tail can run meanwhile, and readers never read
// past the end (their mapping may extend past the new file size; the pages
// beyond it are never touched). Bytes a failed write left past the end
// are cut with the rest. On a closed Log it returns ErrClosed; on a failed
// one (a sync failed) it releases nothing.
func (l *Log) ReleaseSpare() (int64, error) {
	l.mu.RLock()
	closed, failed, act := l.closed, l.failed, l.active()
	l.mu.RUnlock()
	switch {
	case closed:
		return 0, ErrClosed
	case failed != nil:
		return 0, nil
	}
	spare := act.alloc - act.end
	if spare <= 0 && act.dirty <= act.end {
		return 0, nil
	}
	if err := l.unpark(act); err != nil {
		return 0, err
	}
	if err := l.be.Truncate(act.file, act.end); err != nil {
		return 0, fmt.Errorf("segment: release preallocated space of %s: %w", act.logPath, err)
	}
	act.alloc, act.dirty = act.end, 0
	l.spare.Store(0)
	return max(spare, 0), nil
}
