package tier

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/seedqueue/sq/api/batch"
)

// Defaults of RemoteReaderOptions.
const (
	// DefaultChunkBytes is the size of the ranges read from the object
	// store and cached: 4 MiB.
	DefaultChunkBytes = 4 << 20
	// DefaultRemoteTimeout bounds one GET from the object store.
	DefaultRemoteTimeout = 10 * time.Second
	// DefaultIndexCacheBytes bounds the offset indexes kept in memory:
	// 16 MiB (the index of a 1 GiB segment at the default 4 KiB index
	// interval is 2 MiB).
	DefaultIndexCacheBytes = 16 << 20
	// DefaultMaxPrefetches bounds the prefetches in flight per reader.
	DefaultMaxPrefetches = 8
	// DefaultRemoteMaxBatchBytes is the largest batch a read takes: 1
	// GiB, the engine's upper bound of --max-batch-bytes.
	DefaultRemoteMaxBatchBytes = 1 << 30
	// minChunkBytes is the smallest chunk size: a batch header must not
	// need more than two chunks.
	minChunkBytes = 4 << 10
)

// Errors of RemoteReader.Read, besides ErrCorrupt and the store's.
var (
	// ErrOffsetBeyondRemote means the offset asked for is after the
	// remote log's last offset (or the manifest lists no segment): the
	// caller reads the local log instead.
	ErrOffsetBeyondRemote = errors.New("tier: offset after the remote log")
	// ErrRemoteTimeout means a GET from the object store took longer than
	// RemoteReaderOptions.RemoteTimeout. It is retriable.
	ErrRemoteTimeout = errors.New("tier: object store read timed out")
	// ErrReaderClosed is returned by a RemoteReader after Close.
	ErrReaderClosed = errors.New("tier: remote reader closed")
)

// RemoteReaderOptions configure a RemoteReader. The zero value is valid
// after Defaults.
type RemoteReaderOptions struct {
	// ChunkBytes is the size of the ranges read from a segment's .log
	// object and cached (the last chunk of an object may be shorter).
	// At least 4 KiB; default DefaultChunkBytes.
	ChunkBytes int64
	// RemoteTimeout bounds each GET from the object store, separately
	// from the caller's context (the local read timeout). Default
	// DefaultRemoteTimeout.
	RemoteTimeout time.Duration
	// DisablePrefetch turns off the background read of the chunk after
	// the last one a Read used.
	DisablePrefetch bool
	// MaxPrefetches bounds the prefetches in flight (at most one per
	// segment). Default DefaultMaxPrefetches.
	MaxPrefetches int
	// IndexCacheBytes bounds the memory of the parsed offset indexes
	// kept (least recently used dropped first). Default
	// DefaultIndexCacheBytes.
	IndexCacheBytes int64
	// HotChunks is how many of the chunks used last are kept in memory
	// besides the ChunkCache's files, so that a catch-up reading a chunk
	// in several fetches reads its file once. Default DefaultHotChunks;
	// negative: none.
	HotChunks int
	// MaxBatchBytes is the largest batch a Read accepts (header
	// included); a longer length field is corruption. Set it to at least
	// the server's batch limit. Default DefaultRemoteMaxBatchBytes.
	MaxBatchBytes int
	// Logger receives notes on unusable indexes and failed prefetches;
	// default: discard.
	Logger *slog.Logger
}

// Defaults fills the zero fields of o.
func (o *RemoteReaderOptions) Defaults() {
	if o.ChunkBytes == 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	if o.RemoteTimeout == 0 {
		o.RemoteTimeout = DefaultRemoteTimeout
	}
	if o.MaxPrefetches == 0 {
		o.MaxPrefetches = DefaultMaxPrefetches
	}
	if o.IndexCacheBytes == 0 {
		o.IndexCacheBytes = DefaultIndexCacheBytes
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = DefaultRemoteMaxBatchBytes
	}
	if o.HotChunks == 0 {
		o.HotChunks = DefaultHotChunks
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate returns every problem with o at once (after Defaults).
func (o *RemoteReaderOptions) Validate() error {
	var errs []error
	if o.ChunkBytes < minChunkBytes {
		errs = append(errs, fmt.Errorf("tier: remote reader: ChunkBytes %d below %d", o.ChunkBytes, minChunkBytes))
	}
	if o.RemoteTimeout < 0 {
		errs = append(errs, fmt.Errorf("tier: remote reader: RemoteTimeout %v is negative", o.RemoteTimeout))
	}
	if o.MaxPrefetches < 0 {
		errs = append(errs, fmt.Errorf("tier: remote reader: MaxPrefetches %d is negative", o.MaxPrefetches))
	}
	if o.IndexCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("tier: remote reader: IndexCacheBytes %d is negative", o.IndexCacheBytes))
	}
	if o.MaxBatchBytes < batch.HeaderSize {
		errs = append(errs, fmt.Errorf("tier: remote reader: MaxBatchBytes %d below a batch header", o.MaxBatchBytes))
	}
	return errors.Join(errs...)
}

// RemoteRead is the result of RemoteReader.Read.
type RemoteRead struct {
	// Batches holds whole batches back to back, as on disk and as the
	// data plane serves them: the first is the batch holding Offset
	// (it may start before Offset), the last ends before NextOffset.
	// Never empty when Read succeeds.
	Batches []byte
	// Offset is the first offset served: the offset asked for, or a later
	// one when that fell below LogStartOffset or in a gap between the
	// manifest's segments (then the first batch starts exactly there).
	Offset uint64
	// NextOffset is the offset after the last batch of Batches: where the
	// consumer reads next.
	NextOffset uint64
	// LogStartOffset is the manifest's remote log start offset.
	LogStartOffset uint64
	// RemoteEndOffset is the offset after the manifest's last segment:
	// from there on the data is only in the local log. A hint: the
	// caller bounds what it serves by its high watermark.
	RemoteEndOffset uint64
}

// ReaderStats are a RemoteReader's cumulative counters since it was made,
// for the caller to export as metrics.
type ReaderStats struct {
	Reads          uint64 // successful Reads
	ReadErrors     uint64 // failed Reads (any error)
	Corrupt        uint64 // Reads that found corruption (ErrCorrupt)
	RemoteGets     uint64 // GETs sent to the object store (chunks and indexes)
	RemoteBytes    uint64 // bytes those GETs returned
	RemoteTimeouts uint64 // GETs that timed out (ErrRemoteTimeout)
	Prefetches     uint64 // prefetches started
	IndexLoads     uint64 // offset indexes read from the store
	IndexFallbacks uint64 // indexes unusable (missing, corrupt): reads scan from the segment start
}

// RemoteReader serves fetches below the local log start from a
// partition's uploaded segments: it finds the segment, its position by
// the segment's uploaded offset index, and reads chunk-aligned ranges of
// the segment's .log object through a ChunkCache (see "Read-back" in the
// package documentation). One reader serves many partitions and is safe
// for concurrent use; Close stops its background work.
type RemoteReader struct {
	store ObjectStore
	cache *ChunkCache
	opts  RemoteReaderOptions

	ctx    context.Context // cancelled by Close; parent of every GET
	cancel context.CancelFunc

	idxGroup singleflight.Group
	hot      *hotChunks // the chunks used last (HotChunks)

	mu          sync.Mutex
	closed      bool
	running     sync.WaitGroup // prefetches and index loads; Add under mu while !closed
	prefetching map[string]bool
	indexes     map[string]*list.Element // of *indexEntry, by indexName
	indexLRU    *list.List
	indexBytes  int64

	reads, readErrors, corrupt, gets, getBytes, timeouts, prefetches, indexLoads, indexFallbacks atomic.Uint64
}

// NewRemoteReader returns a reader of store's objects through cache.
// Errors: invalid options, or a nil store or cache.
func NewRemoteReader(store ObjectStore, cache *ChunkCache, opts RemoteReaderOptions) (*RemoteReader, error) {
	opts.Defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if store == nil || cache == nil {
		return nil, errors.New("tier: remote reader needs a store and a cache")
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &RemoteReader{
		store: store, cache: cache, opts: opts, ctx: ctx, cancel: cancel, hot: newHotChunks(opts.HotChunks),
		prefetching: make(map[string]bool), indexes: make(map[string]*list.Element), indexLRU: list.New(),
	}, nil
}

// Close cancels the reader's GETs and prefetches and waits for its
// background work to end. Reads after Close fail with ErrReaderClosed.
// It does not close the cache, which other readers may share.
func (r *RemoteReader) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.running.Wait()
}

// Stats returns the reader's counters.
func (r *RemoteReader) Stats() ReaderStats {
	return ReaderStats{
		Reads: r.reads.Load(), ReadErrors: r.readErrors.Load(), Corrupt: r.corrupt.Load(),
		RemoteGets: r.gets.Load(), RemoteBytes: r.getBytes.Load(), RemoteTimeouts: r.timeouts.Load(),
		Prefetches: r.prefetches.Load(), IndexLoads: r.indexLoads.Load(), IndexFallbacks: r.indexFallbacks.Load(),
	}
}

// Read returns whole batches of m's remote log from the one holding
// offset, like a local fetch: batches while they total at most maxBytes,
// but always at least one whole batch (KIP-74), never part of one, and
// only from the one segment holding offset (the next Read continues at
// NextOffset, in the next segment). An offset below m.LogStartOffset is
// read from LogStartOffset; one in a gap between segments (or before the
// first) from the next segment's base offset; RemoteRead.Offset says
// which. Each batch's header and CRC-32C are checked (batch.CheckHeader)
// and the batches must continue each other's offsets.
//
// ctx bounds the whole Read; each GET is bounded by RemoteTimeout too.
// Errors: ErrOffsetBeyondRemote (offset after the remote log);
// ErrCorrupt, naming the object and byte position, when the object is
// shorter than the manifest says or a batch fails its checks twice (a
// failing batch is read once more with its chunks loaded anew; nothing
// failing is served, and its chunks are dropped from the cache);
// ErrRemoteTimeout; ErrReaderClosed; ctx's error; or the
// store's.
func (r *RemoteReader) Read(ctx context.Context, m *Manifest, offset uint64, maxBytes int) (*RemoteRead, error) {
	res, err := r.read(ctx, m, offset, maxBytes)
	if err != nil {
		r.readErrors.Add(1)
		if errors.Is(err, ErrCorrupt) {
			r.corrupt.Add(1)
		}
		return nil, err
	}
	r.reads.Add(1)
	return res, nil
}

// read is Read without the counting.
func (r *RemoteReader) read(ctx context.Context, m *Manifest, offset uint64, maxBytes int) (*RemoteRead, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, ErrReaderClosed
	}
	segs := m.Segments
	if len(segs) == 0 {
		return nil, fmt.Errorf("%w: %s has no remote segments", ErrOffsetBeyondRemote, m.PartitionOf())
	}
	res := &RemoteRead{LogStartOffset: m.LogStartOffset, RemoteEndOffset: segs[len(segs)-1].LastOffset + 1}
	from := max(offset, m.LogStartOffset)
	i := sort.Search(len(segs), func(i int) bool { return segs[i].LastOffset >= from })
	if i == len(segs) {
		return nil, fmt.Errorf("%w: offset %d of %s at or after the remote end %d", ErrOffsetBeyondRemote, from, m.PartitionOf(), res.RemoteEndOffset)
	}
	seg := &segs[i]
	from = max(from, seg.BaseOffset)
	sr := &segmentReader{r: r, seg: seg, curIdx: -1}
	pos, err := r.locate(ctx, sr, from)
	if err != nil {
		return nil, err
	}
	res.Offset = from
	res.Batches, res.NextOffset, err = sr.collect(ctx, pos, maxBytes)
	if err != nil {
		return nil, err
	}
	r.prefetch(sr.chunkID(sr.lastIdx + 1))
	return res, nil
}

// locate returns the byte position in seg's .log of the batch holding
// from, and leaves sr.expect at that batch's base offset: it looks up the
// offset index and scans batch headers forward. When the index entry
// does not point at a batch with its offset, the index is dropped and the
// scan starts at the segment's start.
func (r *RemoteReader) locate(ctx context.Context, sr *segmentReader, from uint64) (int64, error) {
	seg := sr.seg
	idx, err := r.index(ctx, seg)
	if err != nil {
		return 0, err
	}
	base := seg.FileBase() // the index is relative to the file's base
	rel, pos := idx.Lookup(from - base)
	sr.expect = base + uint64(rel)
	if pos > 0 {
		h, err := sr.header(ctx, pos)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return 0, err
		}
		if err != nil || h.BaseOffset != sr.expect {
			r.dropIndex(seg, fmt.Sprintf("entry (%d, %d) does not point at the batch of offset %d", rel, pos, sr.expect))
			pos, sr.expect = 0, base
		}
	}
	for {
		h, err := sr.header(ctx, pos)
		if err != nil {
			return 0, err
		}
		if h.NextOffset() > from {
			return pos, nil
		}
		pos += int64(h.Size())
		sr.expect = h.NextOffset()
	}
}
