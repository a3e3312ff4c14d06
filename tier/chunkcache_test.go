package tier

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// testChunkBytes and testObjectBytes shape the object of the cache tests:
// ten 1000-byte chunks.
const (
	testChunkBytes  = 1000
	testObjectBytes = 10 * testChunkBytes
)

// testChunk returns chunk k of the cache tests' object.
func testChunk(k int64) ChunkID {
	return ChunkID{Key: "orders/x/0/00000000000000000000-0.log", ObjectSize: testObjectBytes, ObjectCRC32C: 7, ChunkBytes: testChunkBytes, Index: k}
}

// chunkData is the content of chunk id: every byte names the chunk.
func chunkData(id ChunkID) []byte { return bytes.Repeat([]byte{byte('a' + id.Index)}, int(id.Len())) }

// countingLoader returns a Loader of chunkData that counts its calls.
func countingLoader(n *atomic.Int64) Loader {
	return func(_ context.Context, id ChunkID) ([]byte, error) {
		n.Add(1)
		return chunkData(id), nil
	}
}

func openCache(t *testing.T, dir string, maxBytes int64) *ChunkCache {
	t.Helper()
	c, err := OpenChunkCache(ChunkCacheOptions{Dir: dir, MaxBytes: maxBytes})
	if err != nil {
		t.Fatalf("OpenChunkCache: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func mustGet(t *testing.T, c *ChunkCache, id ChunkID, load Loader) []byte {
	t.Helper()
	b, err := c.Get(context.Background(), id, load)
	if err != nil {
		t.Fatalf("Get chunk %d: %v", id.Index, err)
	}
	if !bytes.Equal(b, chunkData(id)) {
		t.Fatalf("Get chunk %d: wrong bytes", id.Index)
	}
	return b
}

// dirBytes returns the total size of the files in dir.
func dirBytes(t *testing.T, dir string) (total int64, files int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
		files++
	}
	return total, files
}

func TestChunkIDLen(t *testing.T) {
	for _, tc := range []struct {
		size, chunk, index, want int64
	}{
		{10, 4, 0, 4}, {10, 4, 2, 2}, {10, 4, 3, 0}, {10, 4, -1, 0}, {8, 4, 1, 4}, {8, 4, 2, 0}, {0, 4, 0, 0},
	} {
		id := ChunkID{ObjectSize: tc.size, ChunkBytes: tc.chunk, Index: tc.index}
		if got := id.Len(); got != tc.want {
			t.Errorf("Len of chunk %d (%d-byte chunks) of %d bytes = %d, want %d", tc.index, tc.chunk, tc.size, got, tc.want)
		}
	}
}

func TestChunkCacheHitMiss(t *testing.T) {
	c := openCache(t, t.TempDir(), 1<<20)
	var loads atomic.Int64
	for range 3 {
		for k := range int64(10) {
			mustGet(t, c, testChunk(k), countingLoader(&loads))
		}
	}
	st := c.Stats()
	if loads.Load() != 10 || st.Loads != 10 || st.Misses != 10 || st.Hits != 20 || st.Files != 10 {
		t.Fatalf("loads %d, stats %+v; want 10 loads and misses, 20 hits, 10 files", loads.Load(), st)
	}
	if want := int64(testObjectBytes + 10*chunkTrailerBytes); st.Bytes != want {
		t.Fatalf("Bytes %d, want %d", st.Bytes, want)
	}
	if _, err := c.Get(context.Background(), testChunk(10), countingLoader(&loads)); !errors.Is(err, ErrInvalidRange) {
		t.Fatalf("Get past the object: %v, want ErrInvalidRange", err)
	}
}

func TestChunkCacheBound(t *testing.T) {
	dir := t.TempDir()
	const per = testChunkBytes + chunkTrailerBytes
	c := openCache(t, dir, 3*per+per/2)
	var loads atomic.Int64
	for k := range int64(10) {
		mustGet(t, c, testChunk(k), countingLoader(&loads))
		mustGet(t, c, testChunk(0), countingLoader(&loads)) // keep chunk 0 recently used
		if st := c.Stats(); st.Bytes > 3*per+per/2 {
			t.Fatalf("after chunk %d the cache holds %d bytes, bound %d", k, st.Bytes, 3*per+per/2)
		}
	}
	st := c.Stats()
	if st.Files != 3 || st.Evictions != 7 || st.Bytes != 3*per {
		t.Fatalf("stats %+v; want 3 files of %d bytes and 7 evictions", st, per)
	}
	if total, files := dirBytes(t, dir); total != 3*per || files != 3 {
		t.Fatalf("directory holds %d files of %d bytes, want 3 of %d", files, total, 3*per)
	}
	for _, k := range []int64{0, 8, 9} {
		if !c.Contains(testChunk(k)) {
			t.Errorf("chunk %d was evicted; the least recently used should go first", k)
		}
	}
	// A chunk larger than the whole bound is served but not kept.
	small := openCache(t, t.TempDir(), per-1)
	mustGet(t, small, testChunk(1), countingLoader(&loads))
	if st := small.Stats(); st.Files != 0 || st.Bytes != 0 {
		t.Fatalf("a chunk above the bound was kept: %+v", st)
	}
}

// TestChunkCacheBadFiles damages cache files (a flipped byte, a cut, an
// empty file): each is dropped and the chunk loaded again.
func TestChunkCacheBadFiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"bit flip", func(b []byte) []byte { b[10] ^= 0x40; return b }},
		{"trailer flip", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }},
		{"short", func(b []byte) []byte { return b[:len(b)-7] }},
		{"empty", func([]byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := openCache(t, dir, 1<<20)
			var loads atomic.Int64
			id := testChunk(4)
			mustGet(t, c, id, countingLoader(&loads))
			path := filepath.Join(dir, id.fileName())
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(b), 0o644); err != nil {
				t.Fatal(err)
			}
			mustGet(t, c, id, countingLoader(&loads))
			mustGet(t, c, id, countingLoader(&loads))
			if st := c.Stats(); loads.Load() != 2 || st.Dropped != 1 || st.Hits != 1 {
				t.Fatalf("loads %d, stats %+v; want 2 loads, 1 dropped, 1 hit", loads.Load(), st)
			}
		})
	}
}

// TestChunkCacheReopen: a reopened cache serves the chunks it holds,
// deletes temporary files, leaves unknown files and evicts to its bound.
func TestChunkCacheReopen(t *testing.T) {
	dir := t.TempDir()
	c := openCache(t, dir, 1<<20)
	var loads atomic.Int64
	for k := range int64(5) {
		mustGet(t, c, testChunk(k), countingLoader(&loads))
	}
	c.Close()
	tmp := filepath.Join(dir, testChunk(7).fileName()+tmpSuffix)
	other := filepath.Join(dir, "notes.txt")
	for _, p := range []string{tmp, other} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c = openCache(t, dir, 1<<20)
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left at open: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("unknown file removed at open: %v", err)
	}
	for k := range int64(5) {
		mustGet(t, c, testChunk(k), countingLoader(&loads))
	}
	if loads.Load() != 5 {
		t.Fatalf("%d loads after reopening, want the 5 of the first run", loads.Load())
	}
	c.Close()
	c = openCache(t, dir, 2*(testChunkBytes+chunkTrailerBytes))
	if st := c.Stats(); st.Files != 2 || st.Evictions != 3 {
		t.Fatalf("reopened with a smaller bound: %+v, want 2 files and 3 evictions", st)
	}
}

// TestChunkCacheSingleflight: concurrent Gets of one chunk share one load;
// a Get whose context ends returns at once while the load goes on for the
// others.
func TestChunkCacheSingleflight(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		c, err := OpenChunkCache(ChunkCacheOptions{Dir: dir, MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		gate := make(chan struct{})
		var loads atomic.Int64
		load := func(_ context.Context, id ChunkID) ([]byte, error) {
			loads.Add(1)
			<-gate
			return chunkData(id), nil
		}
		id := testChunk(2)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				b, err := c.Get(context.Background(), id, load)
				if err != nil || !bytes.Equal(b, chunkData(id)) {
					t.Errorf("Get: %v", err)
				}
			})
		}
		ctx, cancel := context.WithCancel(context.Background())
		quit := make(chan error)
		go func() {
			_, err := c.Get(ctx, id, load)
			quit <- err
		}()
		synctest.Wait() // all nine wait on the one load
		cancel()
		if err := <-quit; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Get: %v, want context.Canceled", err)
		}
		close(gate)
		wg.Wait()
		if loads.Load() != 1 {
			t.Fatalf("%d loads for 9 concurrent Gets, want 1", loads.Load())
		}
	})
}

// TestChunkCacheLoadErrors: a failed load is not remembered, and a load
// of the wrong length is ErrCorrupt and not cached.
func TestChunkCacheLoadErrors(t *testing.T) {
	c := openCache(t, t.TempDir(), 1<<20)
	boom := errors.New("boom")
	id := testChunk(1)
	if _, err := c.Get(context.Background(), id, func(context.Context, ChunkID) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("Get with a failing loader: %v", err)
	}
	short := func(_ context.Context, id ChunkID) ([]byte, error) { return chunkData(id)[1:], nil }
	if _, err := c.Get(context.Background(), id, short); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get with a short loader: %v, want ErrCorrupt", err)
	}
	var loads atomic.Int64
	mustGet(t, c, id, countingLoader(&loads))
	if st := c.Stats(); st.LoadErrors != 2 || st.Files != 1 || loads.Load() != 1 {
		t.Fatalf("stats %+v after two failed loads and a good one", st)
	}
	c.Drop(id)
	if c.Contains(id) {
		t.Fatal("Drop kept the chunk")
	}
	c.Close()
	if _, err := c.Get(context.Background(), id, countingLoader(&loads)); !errors.Is(err, ErrCacheClosed) {
		t.Fatalf("Get after Close: %v, want ErrCacheClosed", err)
	}
}
