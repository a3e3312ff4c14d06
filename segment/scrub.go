package segment

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
)

// VerifySealed reads every sealed segment from its first byte to its end,
// and the active segment up to its last synced position, and checks each
// batch as recovery does above the recovery point (length,
// magic, CRC-32C with batch.CheckHeader, an unbroken baseOffset sequence),
// and that the data ends exactly where the segment does. Open only
// spot-checks what lies below the recovery point, so this background scrub
// is what finds a bit flip in the middle of a sealed segment or of the
// synced part of the active one (docs/architecture.md §3.6). Bytes below the synced
// position of the active segment never change, so reading them while
// appends continue is safe.
//
// It returns the first damage found as a *CorruptError naming the file and
// byte position, and truncates nothing. Segments that retention deletes
// meanwhile are skipped. pace, if not nil, is called after each batch with
// its size in bytes; it may block to limit the read rate, and a non-nil
// error (like ctx's) stops the scrub and is returned. It reads with
// pread(2) through the FS, never through a mapping, and is safe
// concurrently with every other method; after Close it returns ErrClosed.
func (l *Log) VerifySealed(ctx context.Context, pace func(n int) error) error {
	type sealed struct {
		base, next uint64
		path       string
		end        int64
	}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	var segs []sealed
	for _, s := range l.segs[:len(l.segs)-1] {
		segs = append(segs, sealed{base: s.base, next: s.next, path: s.logPath, end: s.end})
	}
	act := l.active()
	l.mu.RUnlock()
	l.syncMu.Lock()
	synced := l.synced
	l.syncMu.Unlock()
	if synced.base == act.base && synced.pos > 0 {
		segs = append(segs, sealed{base: act.base, next: synced.next, path: act.logPath, end: synced.pos})
	}
	for _, s := range segs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := l.verifySegment(s.path, s.base, s.next, s.end, pace); err != nil {
			return err
		}
	}
	return nil
}

// verifySegment checks the sealed segment at path (base offset base, data
// ending at byte end with offset next).
func (l *Log) verifySegment(path string, base, next uint64, end int64, pace func(int) error) error {
	f, err := l.fs.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // deleted by retention since the snapshot
	}
	if err != nil {
		return fmt.Errorf("segment: verify: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("segment: verify: %w", err)
	}
	if fi.Size() < end {
		return &CorruptError{File: path, Position: fi.Size(), Err: fmt.Errorf("file is %d bytes, data ends at %d", fi.Size(), end)}
	}
	sc := &scanner{f: f, path: path, size: end, maxBatch: l.opts.MaxBatchBytes}
	pos, off := int64(0), base
	for pos < end {
		h, err := sc.next(pos, base, off)
		if errors.Is(err, errCleanEnd) {
			err = fmt.Errorf("data ends at byte %d, offset %d; the segment ends at byte %d", pos, off, end)
		}
		if err != nil {
			return &CorruptError{File: path, Position: pos, Err: err}
		}
		pos += int64(h.Size())
		off = h.NextOffset()
		if pace != nil {
			if err := pace(h.Size()); err != nil {
				return err
			}
		}
	}
	if off != next {
		return &CorruptError{File: path, Position: pos, Err: fmt.Errorf("data ends at offset %d, the next segment starts at %d", off, next)}
	}
	return nil
}
