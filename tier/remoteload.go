package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// indexEntry is one parsed offset index in the reader's memory.
type indexEntry struct {
	key   string
	index OffsetIndex
	bytes int64
}

// indexEntryOverhead is counted for each cached index besides its
// entries, so that many tiny indexes are bounded too.
const indexEntryOverhead = 256

// getRange reads [off, off+n) of the object under key with one GET bounded
// by RemoteTimeout. An object shorter than that is ErrCorrupt (the
// manifest said it was longer); a timeout is ErrRemoteTimeout.
func (r *RemoteReader) getRange(key string, off, n int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.RemoteTimeout)
	defer cancel()
	r.gets.Add(1)
	b, err := r.get(ctx, key, off, n)
	switch {
	case err == nil:
		r.getBytes.Add(uint64(len(b)))
		return b, nil
	case r.ctx.Err() != nil:
		return nil, fmt.Errorf("tier: get %s [%d, %d): %w", key, off, off+n, ErrReaderClosed)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		r.timeouts.Add(1)
		return nil, fmt.Errorf("tier: get %s [%d, %d): %w after %v: %w", key, off, off+n, ErrRemoteTimeout, r.opts.RemoteTimeout, err)
	}
	return nil, err
}

// get is one ranged GET that must return exactly n bytes.
func (r *RemoteReader) get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	rc, err := r.store.Get(ctx, key, off, n)
	if err != nil {
		if errors.Is(err, ErrInvalidRange) {
			return nil, fmt.Errorf("tier: get %s at %d: %w: the object is shorter than the manifest says (%w)", key, off, ErrCorrupt, err)
		}
		return nil, err
	}
	defer rc.Close()
	b := make([]byte, n)
	got, err := io.ReadFull(rc, b)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("tier: get %s [%d, %d): %w: %d bytes returned, the manifest says the object has them", key, off, off+n, ErrCorrupt, got)
	}
	if err != nil {
		return nil, fmt.Errorf("tier: get %s [%d, %d): reading after %d bytes: %w", key, off, off+n, got, err)
	}
	return b, nil
}

// loadChunk is the reader's Loader: one GET of the chunk's range.
func (r *RemoteReader) loadChunk(_ context.Context, id ChunkID) ([]byte, error) {
	return r.getRange(id.Key, id.Offset(), id.Len())
}

// index returns seg's parsed offset index, from memory or read whole
// from the store once (concurrent Reads share the load) and checked
// against the manifest's size and CRC-32C. An index that is missing from
// the manifest, from the store, or is corrupt is replaced by an empty
// one (reads scan from the segment's start; the .log's batches are
// checked anyway) and a warning is logged. Other errors (the network, a
// timeout) are returned and nothing is remembered.
func (r *RemoteReader) index(ctx context.Context, seg *SegmentEntry) (OffsetIndex, error) {
	ref := seg.Index
	if ref.Key == "" || ref.Size == 0 {
		return OffsetIndex{}, nil
	}
	name := indexName(ref)
	r.mu.Lock()
	if el, ok := r.indexes[name]; ok {
		r.indexLRU.MoveToFront(el)
		r.mu.Unlock()
		return el.Value.(*indexEntry).index, nil
	}
	r.mu.Unlock()
	ch := r.idxGroup.DoChan(name, func() (any, error) {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return nil, ErrReaderClosed
		}
		r.running.Add(1)
		r.mu.Unlock()
		defer r.running.Done()
		return r.loadIndex(seg)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return OffsetIndex{}, res.Err
		}
		return res.Val.(OffsetIndex), nil
	case <-ctx.Done():
		return OffsetIndex{}, fmt.Errorf("tier: offset index %s: %w", ref.Key, ctx.Err())
	}
}

// loadIndex reads, checks and remembers seg's offset index.
func (r *RemoteReader) loadIndex(seg *SegmentEntry) (OffsetIndex, error) {
	ref := seg.Index
	r.indexLoads.Add(1)
	b, err := r.getRange(ref.Key, 0, ref.Size)
	if err == nil && Checksum(b) != ref.CRC32C {
		err = fmt.Errorf("tier: offset index %s: %w: CRC-32C %08x, the manifest says %08x", ref.Key, ErrCorrupt, Checksum(b), ref.CRC32C)
	}
	var idx OffsetIndex
	if err == nil {
		idx, err = ParseOffsetIndex(b, seg.Log.Size)
	}
	if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotFound) {
		return OffsetIndex{}, err
	}
	if err != nil {
		r.indexFallbacks.Add(1)
		r.opts.Logger.Warn("tier: offset index unusable; reads of its segment scan from the start",
			"index", ref.Key, "err", err)
		idx = OffsetIndex{}
	}
	r.rememberIndex(indexName(ref), idx)
	return idx, nil
}

// indexName is the name an index object is remembered under: its key
// and CRC-32C, so that a key that ever held other bytes is not mixed up.
func indexName(ref ObjectRef) string { return fmt.Sprintf("%s#%08x", ref.Key, ref.CRC32C) }

// rememberIndex keeps idx under key (an indexName), dropping the least recently used
// indexes beyond IndexCacheBytes (an index larger than that is used once
// and not kept).
func (r *RemoteReader) rememberIndex(key string, idx OffsetIndex) {
	e := &indexEntry{key: key, index: idx, bytes: idx.sizeBytes() + indexEntryOverhead}
	if e.bytes > r.opts.IndexCacheBytes {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.indexes[key]; ok {
		r.indexBytes -= el.Value.(*indexEntry).bytes
		r.indexLRU.Remove(el)
	}
	r.indexes[key] = r.indexLRU.PushFront(e)
	r.indexBytes += e.bytes
	for r.indexBytes > r.opts.IndexCacheBytes {
		old := r.indexLRU.Back()
		oe := old.Value.(*indexEntry)
		r.indexLRU.Remove(old)
		delete(r.indexes, oe.key)
		r.indexBytes -= oe.bytes
	}
}

// dropIndex replaces seg's remembered index by an empty one, with a
// warning saying why: it disagrees with the .log.
func (r *RemoteReader) dropIndex(seg *SegmentEntry, why string) {
	r.indexFallbacks.Add(1)
	r.opts.Logger.Warn("tier: offset index disagrees with its log; reads of its segment scan from the start",
		"index", seg.Index.Key, "why", why)
	r.rememberIndex(indexName(seg.Index), OffsetIndex{})
}

// prefetch loads chunk id into the cache in the background, unless
// prefetch is off, the chunk is outside its object or already cached,
// a prefetch of the same object is in flight, MaxPrefetches are, or the
// reader is closed. A failed prefetch is only logged at DEBUG: the Read
// that needs the chunk will load it and report.
func (r *RemoteReader) prefetch(id ChunkID) {
	if r.opts.DisablePrefetch || id.Len() <= 0 || r.cache.Contains(id) {
		return
	}
	r.mu.Lock()
	if r.closed || r.prefetching[id.Key] || len(r.prefetching) >= r.opts.MaxPrefetches {
		r.mu.Unlock()
		return
	}
	r.prefetching[id.Key] = true
	r.running.Add(1)
	r.mu.Unlock()
	r.prefetches.Add(1)
	go func() {
		defer r.running.Done()
		if _, err := r.cache.Get(r.ctx, id, r.loadChunk); err != nil {
			r.opts.Logger.Debug("tier: prefetch failed", "object", id.Key, "chunk", id.Index, "err", err)
		}
		r.mu.Lock()
		delete(r.prefetching, id.Key)
		r.mu.Unlock()
	}()
}
