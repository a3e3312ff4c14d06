package segment

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"syscall"

	"github.com/seedqueue/sq/ring"
)

// Direct writes (Options.DirectWrites): the active segment's batches go to
// the device through a second descriptor of its .log opened with O_DIRECT
// (ring.DirectOpener), not through the page cache. O_DIRECT wants the
// buffer, the file offset and the length aligned to ring.DirectAlign,
// while appends end anywhere, so each write covers whole blocks: it starts
// at the block holding the segment's end, rewriting that block's bytes
// before the end (kept in memory from the previous write: directWriter.
// tail) unchanged, then the new batches, then zeros up to the next block
// boundary. Bytes already acknowledged are rewritten with their own value,
// so a torn write leaves each sector old or new, the same there; the zeros
// past the end are what a preallocated segment holds anyway, and the next
// write overwrites them. Readers keep reading through the mmapped page
// cache: after a direct write the kernel drops the cached pages of the
// written range, and a reader faults them in again from the device
// (docs/storage.md, Direct writes). The file system or device may refuse
// O_DIRECT (EINVAL: tmpfs before Linux 6.6, some FUSE file systems), or
// the FS seam may not offer it (the fault-injecting test FS): the Log then
// writes through the page cache from then on, and says so once.

// directWriter is a Log's direct descriptor of its active segment's .log
// and the bytes of the partial block at that segment's end. Used by the
// append goroutine; mu guards it against closeHeld from Sync's and
// Close's goroutine.
type directWriter struct {
	mu  sync.Mutex
	of  ring.File // the page-cache descriptor it shadows (segment.file)
	f   ring.File // O_DIRECT descriptor of the same file; nil: none open
	end int64     // the segment's end after the last direct write; -1: tail unknown
	// tail is the bytes [AlignDown(end), end) of the file.
	tail []byte
	// off: direct writes were refused; the Log writes through the page
	// cache.
	off bool
}

// directPool holds aligned write buffers by size class: class k holds
// buffers of ring.DirectAlign << k bytes. A buffer is taken for one write
// and given back after it, so a Log between appends holds none, whatever
// the number of partitions.
var directPool [16]sync.Pool

// directBuffer returns an aligned buffer of at least n bytes and its size
// class (-1: too large for the pool, not to be given back).
func directBuffer(n int) ([]byte, int) {
	blocks := ring.AlignUp(n) / ring.DirectAlign
	k := bits.Len(uint(blocks - 1))
	if k >= len(directPool) {
		return ring.AlignedBuffer(n), -1
	}
	if b, ok := directPool[k].Get().(*[]byte); ok {
		return (*b)[:n], k
	}
	return ring.AlignedBuffer(ring.DirectAlign << k)[:n], k
}

// putDirectBuffer gives b, of class k, back to the pool.
func putDirectBuffer(b []byte, k int) {
	if k < 0 {
		return
	}
	b = b[:cap(b)]
	directPool[k].Put(&b)
}

// writeDirect writes bufs at pos of the active segment's file f as
// whole blocks through the direct descriptor. ok false: direct writes are
// not available for f (never were, or refused now), nothing was written,
// and the caller writes through the page cache. Otherwise n and err are
// as for ring.Backend.WriteAt on bufs alone (n counts bufs' bytes only,
// not the rewritten head or the zeros after them).
func (l *Log) writeDirect(f ring.File, bufs [][]byte, pos int64) (n int64, ok bool, err error) {
	dw := &l.direct
	dw.mu.Lock()
	defer dw.mu.Unlock()
	if dw.off {
		return 0, false, nil
	}
	if dw.of != f || dw.f == nil {
		if err := l.openDirectLocked(f); err != nil {
			l.directRefused(err)
			return 0, false, nil
		}
	}
	start := ring.AlignDown(pos)
	if dw.end != pos || int64(len(dw.tail)) != pos-start {
		// The first write to this file, or its end moved under another
		// path (recovery, truncation): read the partial block back.
		dw.tail = append(dw.tail[:0], make([]byte, pos-start)...)
		if _, err := f.ReadAt(dw.tail, start); err != nil {
			dw.end = -1
			return 0, true, fmt.Errorf("read the partial block at byte %d for a direct write: %w", start, err)
		}
		dw.end = pos
	}
	var total int
	for _, b := range bufs {
		total += len(b)
	}
	head := len(dw.tail)
	used := head + total
	w, class := directBuffer(ring.AlignUp(used))
	defer putDirectBuffer(w, class)
	c := copy(w, dw.tail)
	for _, b := range bufs {
		c += copy(w[c:], b)
	}
	clear(w[used:])
	wn, err := l.be.WriteAt(dw.f, [][]byte{w}, start)
	if err != nil {
		dw.end = -1
		if wn == 0 && errors.Is(err, syscall.EINVAL) {
			// Refused, not failed: nothing was written.
			l.closeDirectLocked()
			l.directRefused(err)
			return 0, false, nil
		}
		return min(max(wn-int64(head), 0), int64(total)), true, err
	}
	end := pos + int64(total)
	dw.tail = append(dw.tail[:0], w[ring.AlignDown(end)-start:used]...)
	dw.end = end
	return int64(total), true, nil
}

// openDirectLocked opens the direct descriptor of f, closing the one of
// an earlier file. It fails when the FS seam has no direct opener or the
// open is refused.
func (l *Log) openDirectLocked(f ring.File) error {
	l.closeDirectLocked()
	do, ok := l.fs.(ring.DirectOpener)
	if !ok {
		return errors.New("the file system seam does not open files for direct writes")
	}
	df, err := l.openHeld(do.OpenDirect, f.Name())
	if err != nil {
		return err
	}
	dw := &l.direct
	dw.of, dw.f, dw.end, dw.tail = f, df, -1, dw.tail[:0]
	return nil
}

// closeDirectLocked closes the direct descriptor, if open.
func (l *Log) closeDirectLocked() {
	dw := &l.direct
	if dw.f != nil {
		if err := l.closeHeld(&dw.f); err != nil {
			l.opts.Logger.Warn("segment: closing a direct-write descriptor failed", "dir", l.dir, "err", err)
		}
	}
	dw.of, dw.end, dw.tail = nil, -1, nil
}

// closeDirectFor closes the direct descriptor when it shadows f, which
// is being closed.
func (l *Log) closeDirectFor(f ring.File) {
	dw := &l.direct
	dw.mu.Lock()
	defer dw.mu.Unlock()
	if dw.of == f && f != nil {
		l.closeDirectLocked()
	}
}

// directRefused turns direct writes off for l, logging why once.
func (l *Log) directRefused(err error) {
	if !l.direct.off {
		l.direct.off = true
		l.opts.Logger.Warn("segment: direct writes (O_DIRECT) are not available here; this partition writes through the page cache", "dir", l.dir, "err", err)
	}
}
