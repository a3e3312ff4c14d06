package tier_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seedqueue/sq/tier"
)

// testChunkBytes is the chunk size of the read-back tests: small, so
// batches span chunks and segments many of them.
const testChunkBytes = 4 << 10

// newReader opens a chunk cache of cacheBytes in a temporary directory
// and a reader of s through it with opts; both are closed at the test's
// end.
func newReader(t testing.TB, s tier.ObjectStore, cacheBytes int64, opts tier.RemoteReaderOptions) (*tier.RemoteReader, *tier.ChunkCache) {
	t.Helper()
	c, err := tier.OpenChunkCache(tier.ChunkCacheOptions{Dir: t.TempDir(), MaxBytes: cacheBytes})
	if err != nil {
		t.Fatalf("OpenChunkCache: %v", err)
	}
	r, err := tier.NewRemoteReader(s, c, opts)
	if err != nil {
		t.Fatalf("NewRemoteReader: %v", err)
	}
	t.Cleanup(func() { r.Close(); c.Close() })
	return r, c
}

// testCtx returns a context cancelled after readbackTimeout or at the
// test's end.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), readbackTimeout)
	t.Cleanup(cancel)
	return ctx
}

// hookStore wraps a store: before each Get, hook (if set) may block or
// fail it; it counts the Gets of each (key, offset).
type hookStore struct {
	tier.ObjectStore
	hook func(ctx context.Context, key string, off, n int64) error

	mu   sync.Mutex
	gets map[string]int
}

func (s *hookStore) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	s.mu.Lock()
	if s.gets == nil {
		s.gets = map[string]int{}
	}
	s.gets[fmt.Sprintf("%s@%d", key, off)]++
	s.mu.Unlock()
	if s.hook != nil {
		if err := s.hook(ctx, key, off, n); err != nil {
			return nil, err
		}
	}
	return s.ObjectStore.Get(ctx, key, off, n)
}

// getsOf returns how many Gets of key at off were made.
func (s *hookStore) getsOf(key string, off int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[fmt.Sprintf("%s@%d", key, off)]
}

// checkRead reads offset from r and compares the result with the local
// log's: the same bytes and next offset, served from offset want.
func checkRead(t testing.TB, r *tier.RemoteReader, tl *tieredLog, m *tier.Manifest, offset uint64, maxBytes int, want uint64) {
	t.Helper()
	res, err := r.Read(testCtx(t), m, offset, maxBytes)
	if err != nil {
		t.Fatalf("Read(%d, %d): %v", offset, maxBytes, err)
	}
	local, next := tl.localRead(t, want, maxBytes)
	if res.Offset != want || res.NextOffset != next || !bytes.Equal(res.Batches, local) {
		t.Fatalf("Read(%d, %d) = offset %d, next %d, %d bytes; local read of %d: next %d, %d bytes (equal: %v)",
			offset, maxBytes, res.Offset, res.NextOffset, len(res.Batches), want, next, len(local), bytes.Equal(res.Batches, local))
	}
	if res.LogStartOffset != m.LogStartOffset || res.RemoteEndOffset != m.Segments[len(m.Segments)-1].LastOffset+1 {
		t.Fatalf("Read(%d): log start %d, remote end %d", offset, res.LogStartOffset, res.RemoteEndOffset)
	}
}

// TestRemoteReadEveryOffset reads every offset of the uploaded segments
// with several fetch sizes and compares each answer byte for byte with
// the local log's, then consumes the whole remote log in order.
func TestRemoteReadEveryOffset(t *testing.T) {
	s := &tier.MemStore{}
	tl := uploadLog(t, s, 0, 500, 7)
	r, _ := newReader(t, s, 64<<20, tier.RemoteReaderOptions{ChunkBytes: testChunkBytes})
	end := tl.segs[len(tl.segs)-1].NextOffset
	for _, maxBytes := range []int{0, 5000, 30000} {
		for o := uint64(0); o < end; o++ {
			checkRead(t, r, tl, tl.m, o, maxBytes, o)
		}
	}
	var all []byte
	for o := uint64(0); o < end; {
		res, err := r.Read(testCtx(t), tl.m, o, 10000)
		if err != nil {
			t.Fatalf("Read(%d): %v", o, err)
		}
		all = append(all, res.Batches...)
		o = res.NextOffset
	}
	var want []byte
	for _, si := range tl.segs {
		want = append(want, segmentFile(t, tl.dir, si.BaseOffset, tier.LogSuffix, si.Bytes)...)
	}
	if !bytes.Equal(all, want) {
		t.Fatalf("consuming the remote log gave %d bytes, the segments hold %d", len(all), len(want))
	}
	if _, err := r.Read(testCtx(t), tl.m, end, 1000); !errors.Is(err, tier.ErrOffsetBeyondRemote) {
		t.Fatalf("Read at the remote end: %v, want ErrOffsetBeyondRemote", err)
	}
	if st := r.Stats(); st.IndexLoads != uint64(len(tl.segs)) || st.IndexFallbacks != 0 || st.ReadErrors != 1 {
		t.Fatalf("stats %+v: want one index load per segment, no fallback, one error", st)
	}
}

// TestRemoteReadGapsAndLogStart: an offset in a gap between segments (or
// before the first) is served from the next segment's base offset, one
// below the remote log start from the log start.
func TestRemoteReadGapsAndLogStart(t *testing.T) {
	s := &tier.MemStore{}
	tl := uploadLog(t, s, 0, 500, 11)
	r, _ := newReader(t, s, 64<<20, tier.RemoteReaderOptions{ChunkBytes: testChunkBytes})

	gap := *tl.m
	gap.Segments = append(append([]tier.SegmentEntry(nil), tl.m.Segments[1:2]...), tl.m.Segments[3:]...)
	for o := uint64(0); o < tl.segs[1].BaseOffset; o++ {
		checkRead(t, r, tl, &gap, o, 2000, tl.segs[1].BaseOffset)
	}
	for o := tl.segs[2].BaseOffset; o < tl.segs[3].BaseOffset; o++ {
		checkRead(t, r, tl, &gap, o, 2000, tl.segs[3].BaseOffset)
	}
	checkRead(t, r, tl, &gap, tl.segs[1].NextOffset-1, 2000, tl.segs[1].NextOffset-1)

	start := *tl.m
	start.LogStartOffset = tl.segs[1].BaseOffset + 7
	for o := uint64(0); o <= start.LogStartOffset; o++ {
		checkRead(t, r, tl, &start, o, 2000, start.LogStartOffset)
	}
	checkRead(t, r, tl, &start, start.LogStartOffset+1, 2000, start.LogStartOffset+1)

	empty := *tl.m
	empty.Segments = nil
	if _, err := r.Read(testCtx(t), &empty, 0, 1000); !errors.Is(err, tier.ErrOffsetBeyondRemote) {
		t.Fatalf("Read of an empty remote log: %v, want ErrOffsetBeyondRemote", err)
	}
}

// TestRemoteReadCacheBound reads the remote log twice through a cache of
// 6 chunks: the cache stays within its bound and evicts.
func TestRemoteReadCacheBound(t *testing.T) {
	s := &tier.MemStore{}
	tl := uploadLog(t, s, 0, 400, 3)
	const bound = 6 * (testChunkBytes + 4)
	r, c := newReader(t, s, bound, tier.RemoteReaderOptions{ChunkBytes: testChunkBytes})
	end := tl.segs[len(tl.segs)-1].NextOffset
	for range 2 {
		for o := uint64(0); o < end; {
			res, err := r.Read(testCtx(t), tl.m, o, 7000)
			if err != nil {
				t.Fatalf("Read(%d): %v", o, err)
			}
			if local, _ := tl.localRead(t, o, 7000); !bytes.Equal(res.Batches, local) {
				t.Fatalf("Read(%d) differs from the local read", o)
			}
			if st := c.Stats(); st.Bytes > bound {
				t.Fatalf("cache holds %d bytes, bound %d", st.Bytes, bound)
			}
			o = res.NextOffset
		}
	}
	if st := c.Stats(); st.Evictions == 0 || st.Hits == 0 {
		t.Fatalf("cache stats %+v: want hits and evictions", st)
	}
}

// TestRemoteReadCorrupt: a damaged .log object fails the Reads of the
// damaged batch with ErrCorrupt and serves nothing of it; once the object
// is whole again the same Reads succeed (the bad chunks were not kept).
// An object shorter than the manifest says is ErrCorrupt too. A damaged
// index is only a slower read.
func TestRemoteReadCorrupt(t *testing.T) {
	s := &tier.MemStore{}
	tl := uploadLog(t, s, 0, 400, 5)
	r, _ := newReader(t, s, 64<<20, tier.RemoteReaderOptions{ChunkBytes: testChunkBytes, DisablePrefetch: true})
	seg := tl.m.Segments[1]
	good := segmentFile(t, tl.dir, seg.BaseOffset, tier.LogSuffix, seg.Log.Size)
	mid := tl.segs[1].BaseOffset + (tl.segs[1].NextOffset-tl.segs[1].BaseOffset)/2
	checkRead(t, r, tl, tl.m, mid, 1, mid) // the good chunks are cached first

	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0x10
	s.Damage(seg.Log.Key, bad)
	// The cached chunk is good; make the reader fetch again with a fresh cache.
	r2, _ := newReader(t, s, 64<<20, tier.RemoteReaderOptions{ChunkBytes: testChunkBytes, DisablePrefetch: true})
	failed := 0
	for o := seg.BaseOffset; o <= seg.LastOffset; o++ {
		res, err := r2.Read(testCtx(t), tl.m, o, 1)
		if err != nil {
			if !errors.Is(err, tier.ErrCorrupt) {
				t.Fatalf("Read(%d): %v, want ErrCorrupt", o, err)
			}
			failed++
			continue
		}
		if local, _ := tl.localRead(t, o, 1); !bytes.Equal(res.Batches, local) {
			t.Fatalf("Read(%d) of a damaged object served other bytes", o)
		}
	}
	if failed == 0 {
		t.Fatal("no Read saw the damage")
	}
	if st := r2.Stats(); st.Corrupt != uint64(failed) {
		t.Fatalf("stats %+v, want %d corrupt reads", st, failed)
	}
	s.Damage(seg.Log.Key, good)
	for o := seg.BaseOffset; o <= seg.LastOffset; o++ {
		checkRead(t, r2, tl, tl.m, o, 1, o)
	}

	s.Damage(seg.Log.Key, good[:len(good)-100])
	r3, _ := newReader(t, s, 64<<20, tier.RemoteReaderOptions{ChunkBytes: testChunkBytes})
	if _, err := r3.Read(testCtx(t), tl.m, seg.LastOffset, 1); !errors.Is(err, tier.ErrCorrupt) {
		t.Fatalf("Read of a short object: %v, want ErrCorrupt", err)
	}
	s.Damage(seg.Log.Key, good)

	s.Damage(seg.Index.Key, []byte("garbage!"))
	r4, _ := newReader(t, s, 64<<20, tier.RemoteReaderOptions{ChunkBytes: testChunkBytes})
	for o := seg.BaseOffset; o <= seg.LastOffset; o += 3 {
		checkRead(t, r4, tl, tl.m, o, 3000, o)
	}
	if st := r4.Stats(); st.IndexFallbacks != 1 || st.IndexLoads != 1 {
		t.Fatalf("stats %+v: want one index load, one fallback", st)
	}
}

// TestRemoteReadTimeout: a store that never answers fails a Read with
// ErrRemoteTimeout after RemoteTimeout, whatever the caller's deadline; a
// caller's shorter deadline ends the wait first. Run in a synctest
// bubble: the times are exact and nothing sleeps.
func TestRemoteReadTimeout(t *testing.T) {
	mem := &tier.MemStore{}
	tl := uploadLog(t, mem, 0, 200, 9)
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		s := &hookStore{ObjectStore: mem, hook: func(ctx context.Context, _ string, _, _ int64) error {
			<-ctx.Done()
			return ctx.Err()
		}}
		c, err := tier.OpenChunkCache(tier.ChunkCacheOptions{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r, err := tier.NewRemoteReader(s, c, tier.RemoteReaderOptions{ChunkBytes: testChunkBytes, RemoteTimeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		t0 := time.Now()
		if _, err := r.Read(ctx, tl.m, 10, 1000); !errors.Is(err, tier.ErrRemoteTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Read from a silent store: %v, want ErrRemoteTimeout", err)
		}
		if d := time.Since(t0); d != 3*time.Second {
			t.Fatalf("Read gave up after %v, want the remote timeout 3s", d)
		}
		short, cancel2 := context.WithTimeout(context.Background(), time.Second)
		defer cancel2()
		t0 = time.Now()
		if _, err := r.Read(short, tl.m, 10, 1000); errors.Is(err, tier.ErrRemoteTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Read with a 1s deadline: %v, want the caller's deadline", err)
		}
		if d := time.Since(t0); d != time.Second {
			t.Fatalf("Read with a 1s deadline returned after %v", d)
		}
		if st := r.Stats(); st.RemoteTimeouts < 1 {
			t.Fatalf("stats %+v: want a timeout counted", st)
		}
	})
}

// TestRemoteReadStoreErrors: a failing GET fails the Read with the
// store's error and is not remembered: the next Read succeeds.
func TestRemoteReadStoreErrors(t *testing.T) {
	mem := &tier.MemStore{}
	tl := uploadLog(t, mem, 0, 200, 13)
	boom := errors.New("503 slow down")
	var mu sync.Mutex
	failures := 2
	s := &hookStore{ObjectStore: mem, hook: func(context.Context, string, int64, int64) error {
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			return boom
		}
		return nil
	}}
	r, _ := newReader(t, s, 64<<20, tier.RemoteReaderOptions{ChunkBytes: testChunkBytes, DisablePrefetch: true})
	for range 2 {
		if _, err := r.Read(testCtx(t), tl.m, 20, 1000); !errors.Is(err, boom) {
			t.Fatalf("Read with a failing store: %v, want its error", err)
		}
	}
	checkRead(t, r, tl, tl.m, 20, 1000, 20)
}

// TestRemoteReadPrefetch: after a Read that used chunk k of a segment,
// chunk k+1 is loaded in the background, so the Read that needs it
// sends no GET; with prefetch off nothing is loaded ahead.
func TestRemoteReadPrefetch(t *testing.T) {
	mem := &tier.MemStore{}
	tl := uploadLog(t, mem, 0, 300, 17)
	s := &hookStore{ObjectStore: mem}
	r, c := newReader(t, s, 64<<20, tier.RemoteReaderOptions{ChunkBytes: testChunkBytes})
	seg := tl.m.Segments[0]
	next := tier.ChunkID{Key: seg.Log.Key, ObjectSize: seg.Log.Size, ObjectCRC32C: seg.Log.CRC32C, ChunkBytes: testChunkBytes, Index: 1}
	checkRead(t, r, tl, tl.m, 0, 1, 0)
	deadline := time.Now().Add(10 * time.Second)
	for !c.Contains(next) {
		if time.Now().After(deadline) {
			t.Fatal("chunk 1 was not prefetched")
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
	for o := uint64(0); o < tl.segs[0].NextOffset; o++ {
		checkRead(t, r, tl, tl.m, o, 1, o)
	}
	if n := s.getsOf(seg.Log.Key, testChunkBytes); n != 1 {
		t.Fatalf("chunk 1 was fetched %d times, want once", n)
	}
	if st := r.Stats(); st.Prefetches == 0 {
		t.Fatalf("stats %+v: no prefetch", st)
	}

	off, _ := newReader(t, s, 64<<20, tier.RemoteReaderOptions{ChunkBytes: testChunkBytes, DisablePrefetch: true})
	checkRead(t, off, tl, tl.m, tl.segs[1].BaseOffset, 1, tl.segs[1].BaseOffset)
	if st := off.Stats(); st.Prefetches != 0 {
		t.Fatalf("prefetch off, yet %d prefetches", st.Prefetches)
	}
}

// TestRemoteReadParallelPartitions reads four partitions at once through
// one reader and one cache smaller than their data: each consumer sees
// its own log, byte for byte, and random reads in between agree too.
func TestRemoteReadParallelPartitions(t *testing.T) {
	s := &tier.MemStore{}
	var tls []*tieredLog
	for p := range 4 {
		tls = append(tls, uploadLog(t, s, p, 200, uint64(100+p)))
	}
	r, c := newReader(t, s, 24*(testChunkBytes+4), tier.RemoteReaderOptions{ChunkBytes: testChunkBytes})
	var wg sync.WaitGroup
	for i, tl := range tls {
		end := tl.segs[len(tl.segs)-1].NextOffset
		wg.Go(func() {
			for o := uint64(0); o < end; {
				res, err := r.Read(testCtx(t), tl.m, o, 6000)
				if err != nil {
					t.Errorf("partition %d: Read(%d): %v", tl.p.Partition, o, err)
					return
				}
				if local, _ := tl.localRead(t, o, 6000); !bytes.Equal(res.Batches, local) {
					t.Errorf("partition %d: Read(%d) differs from the local read", tl.p.Partition, o)
					return
				}
				o = res.NextOffset
			}
		})
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			for range 200 {
				o := rng.Uint64N(end)
				res, err := r.Read(testCtx(t), tl.m, o, 1+rng.IntN(20000))
				if err != nil {
					t.Errorf("partition %d: Read(%d): %v", tl.p.Partition, o, err)
					return
				}
				if res.Offset != o || len(res.Batches) == 0 {
					t.Errorf("partition %d: Read(%d) served offset %d, %d bytes", tl.p.Partition, o, res.Offset, len(res.Batches))
					return
				}
			}
		})
	}
	wg.Wait()
	if st := c.Stats(); st.Bytes > 24*(testChunkBytes+4) || st.Evictions == 0 {
		t.Fatalf("cache stats %+v", st)
	}
}
