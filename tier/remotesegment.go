package tier

import (
	"context"
	"fmt"

	"github.com/seedqueue/sq/api/batch"
)

// segmentReader reads one segment's .log object through the cache for
// one Read, keeping the chunk it used last so that scanning headers
// inside it costs no further lookups.
type segmentReader struct {
	r      *RemoteReader
	seg    *SegmentEntry
	cur    []byte // chunk curIdx, or nil
	curIdx int64
	// lastIdx is the last chunk the Read used (the prefetch follows it).
	lastIdx int64
	// expect is the base offset the next batch must have.
	expect uint64
}

// chunkID returns the ID of chunk k of the segment's .log object.
func (sr *segmentReader) chunkID(k int64) ChunkID {
	l := sr.seg.Log
	return ChunkID{Key: l.Key, ObjectSize: l.Size, ObjectCRC32C: l.CRC32C, ChunkBytes: sr.r.opts.ChunkBytes, Index: k}
}

// corrupt returns an error wrapping ErrCorrupt about byte pos of the
// segment's .log object.
func (sr *segmentReader) corrupt(pos int64, format string, args ...any) error {
	return fmt.Errorf("tier: %s at byte %d: %w: %s", sr.seg.Log.Key, pos, ErrCorrupt, fmt.Sprintf(format, args...))
}

// chunk returns chunk k, from sr.cur or the cache.
func (sr *segmentReader) chunk(ctx context.Context, k int64) ([]byte, error) {
	if k == sr.curIdx {
		return sr.cur, nil
	}
	id := sr.chunkID(k)
	b, ok := sr.r.hot.get(id)
	if !ok {
		var err error
		if b, err = sr.r.cache.Get(ctx, id, sr.r.loadChunk); err != nil {
			return nil, err
		}
		sr.r.hot.put(id, b)
	}
	sr.cur, sr.curIdx = b, k
	sr.lastIdx = max(sr.lastIdx, k)
	return b, nil
}

// bytes returns the object's bytes [pos, pos+n), a slice of a cached
// chunk when they lie in one (the caller copies before the next call),
// else a new buffer. A range past the object's size is ErrCorrupt.
func (sr *segmentReader) bytes(ctx context.Context, pos, n int64) ([]byte, error) {
	if pos < 0 || n < 0 || pos+n > sr.seg.Log.Size {
		return nil, sr.corrupt(pos, "%d bytes wanted, the object has %d", n, sr.seg.Log.Size)
	}
	cb := sr.r.opts.ChunkBytes
	k, off := pos/cb, pos%cb
	if off+n <= cb {
		c, err := sr.chunk(ctx, k)
		if err != nil {
			return nil, err
		}
		return c[off : off+n], nil
	}
	out := make([]byte, 0, n)
	for int64(len(out)) < n {
		c, err := sr.chunk(ctx, k)
		if err != nil {
			return nil, err
		}
		take := min(int64(len(c))-off, n-int64(len(out)))
		out = append(out, c[off:off+take]...)
		k, off = k+1, 0
	}
	return out, nil
}

// header reads and checks the header of the batch at pos: it must have
// base offset sr.expect, a length at least a header's, at most
// MaxBatchBytes and within the object, and an offset within the segment.
func (sr *segmentReader) header(ctx context.Context, pos int64) (batch.Header, error) {
	seg := sr.seg
	if pos >= seg.Log.Size {
		return batch.Header{}, sr.corrupt(pos, "the object ends before offset %d (the segment's last offset is %d)", sr.expect, seg.LastOffset)
	}
	b, err := sr.bytes(ctx, pos, batch.HeaderSize)
	if err != nil {
		return batch.Header{}, err
	}
	h, err := batch.ParseHeader(b)
	if err != nil {
		return h, sr.corrupt(pos, "%v", err)
	}
	size := int64(h.Size())
	switch {
	case h.BaseOffset != sr.expect:
		return h, sr.corrupt(pos, "batch base offset %d, want %d", h.BaseOffset, sr.expect)
	case h.BaseOffset > seg.LastOffset:
		return h, sr.corrupt(pos, "batch base offset %d after the segment's last offset %d", h.BaseOffset, seg.LastOffset)
	case size < batch.HeaderSize || size > int64(sr.r.opts.MaxBatchBytes):
		return h, sr.corrupt(pos, "batch length %d outside [%d, %d]", size, batch.HeaderSize, sr.r.opts.MaxBatchBytes)
	case pos+size > seg.Log.Size:
		return h, sr.corrupt(pos, "batch of %d bytes runs past the object's %d bytes", size, seg.Log.Size)
	}
	return h, nil
}

// collect returns whole, checked batches from pos (where the batch with
// base offset sr.expect starts) while they total at most maxBytes, at
// least one, up to the segment's last offset, and the offset after them.
func (sr *segmentReader) collect(ctx context.Context, pos int64, maxBytes int) ([]byte, uint64, error) {
	var out []byte
	for sr.expect <= sr.seg.LastOffset {
		h, err := sr.header(ctx, pos)
		if err != nil {
			return nil, 0, err
		}
		size := int64(h.Size())
		if len(out) > 0 && int64(len(out))+size > int64(maxBytes) {
			break
		}
		b, err := sr.checkedBatch(ctx, pos, size)
		if err != nil {
			return nil, 0, err
		}
		if out == nil {
			out = make([]byte, 0, min(max(int64(maxBytes), size), sr.seg.Log.Size-pos))
		}
		out = append(out, b...)
		pos += size
		sr.expect = h.NextOffset()
	}
	return out, sr.expect, nil
}

// checkedBatch returns the size bytes of the batch at pos after
// batch.CheckHeader (length, magic, CRC-32C, record count). A batch that
// fails is read once more with its chunks dropped from the cache and
// loaded again (the cached copy may hold bytes the store has since
// repaired, or that were damaged on the way); failing again, the chunks
// are dropped once more and the error wraps ErrCorrupt and
// batch.ErrCorrupt.
func (sr *segmentReader) checkedBatch(ctx context.Context, pos, size int64) ([]byte, error) {
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if attempt > 0 {
			sr.dropChunks(pos, size)
		}
		var b []byte
		if b, err = sr.bytes(ctx, pos, size); err != nil {
			return nil, err
		}
		if _, err = batch.CheckHeader(b); err == nil {
			return b, nil
		}
	}
	sr.dropChunks(pos, size)
	return nil, fmt.Errorf("%w (%w)", sr.corrupt(pos, "batch at offset %d: %v", sr.expect, err), batch.ErrCorrupt)
}

// dropChunks drops the chunks holding [pos, pos+size) from the cache and
// forgets the one in hand.
func (sr *segmentReader) dropChunks(pos, size int64) {
	cb := sr.r.opts.ChunkBytes
	for k := pos / cb; k <= (pos+size-1)/cb; k++ {
		sr.r.cache.Drop(sr.chunkID(k))
		sr.r.hot.drop(sr.chunkID(k))
	}
	sr.cur, sr.curIdx = nil, -1
}
