package tier

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/seedqueue/sq/ring"
)

// DefaultCacheBytes is the default bound of a ChunkCache's directory
// (sq-server --tier-cache-bytes): 1 GiB.
const DefaultCacheBytes = 1 << 30

// ErrCacheClosed is returned by a ChunkCache's Get that misses after Close.
var ErrCacheClosed = errors.New("tier: chunk cache closed")

// Chunk file names in a cache directory: chunkPrefix, 64 hex digits,
// chunkSuffix; a file being written has tmpSuffix appended.
const (
	chunkPrefix   = "chunk-"
	chunkSuffix   = ".sqchunk"
	tmpSuffix     = ".sqtmp"
	chunkHexChars = 2 * sha256.Size
	// chunkTrailerBytes is the CRC-32C trailer of a chunk file.
	chunkTrailerBytes = 4
)

// ChunkID names one chunk of an object: the bytes
// [Index*ChunkBytes, min((Index+1)*ChunkBytes, object size)) of the object
// under Key whose whole size and CRC-32C are ObjectSize and ObjectCRC32C
// (as a manifest records them, so a key that ever held other bytes never
// hits a stale chunk).
type ChunkID struct {
	Key          string // object key
	ObjectSize   int64  // bytes of the whole object
	ObjectCRC32C uint32 // CRC-32C of the whole object
	ChunkBytes   int64  // chunk size the object is cut in, bytes
	Index        int64  // chunk number, from 0
}

// Len returns the chunk's length in bytes: ChunkBytes, or less for the
// object's last chunk; 0 when Index is outside the object.
func (id ChunkID) Len() int64 {
	start := id.Index * id.ChunkBytes
	if id.Index < 0 || id.ChunkBytes <= 0 || start >= id.ObjectSize {
		return 0
	}
	return min(id.ChunkBytes, id.ObjectSize-start)
}

// Offset returns the position of the chunk's first byte in the object.
func (id ChunkID) Offset() int64 { return id.Index * id.ChunkBytes }

// fileName returns the cache file name of the chunk: "chunk-" and the
// SHA-256 of the ID's fields in hex, ".sqchunk". Object keys may hold
// "/" and be long; the hash is a flat, fixed-length name.
func (id ChunkID) fileName() string {
	h := sha256.New()
	var b [8 + 4 + 8 + 8]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(id.ObjectSize))
	binary.LittleEndian.PutUint32(b[8:], id.ObjectCRC32C)
	binary.LittleEndian.PutUint64(b[12:], uint64(id.ChunkBytes))
	binary.LittleEndian.PutUint64(b[20:], uint64(id.Index))
	h.Write(b[:])
	_, _ = io.WriteString(h, id.Key)
	return chunkPrefix + hex.EncodeToString(h.Sum(nil)) + chunkSuffix
}

// ChunkCacheOptions configure a ChunkCache. The zero value is valid after
// Defaults except for Dir, which must be set.
type ChunkCacheOptions struct {
	// Dir is the cache directory, created if missing. It belongs to one
	// ChunkCache at a time.
	Dir string
	// MaxBytes bounds the bytes of the chunk files in Dir (data plus a
	// 4-byte trailer each). Default DefaultCacheBytes. A chunk larger
	// than MaxBytes is served but not kept.
	MaxBytes int64
	// FS is the file system seam; default ring.OS.
	FS ring.FS
	// Logger receives notes on dropped files and write failures;
	// default: discard.
	Logger *slog.Logger
}

// Defaults fills the zero fields of o (not Dir).
func (o *ChunkCacheOptions) Defaults() {
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultCacheBytes
	}
	if o.FS == nil {
		o.FS = ring.OS
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate returns every problem with o at once (after Defaults).
func (o *ChunkCacheOptions) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("tier: chunk cache: no directory"))
	}
	if o.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("tier: chunk cache: MaxBytes %d is negative", o.MaxBytes))
	}
	return errors.Join(errs...)
}

// CacheStats are a ChunkCache's counters since Open (cumulative) and its
// current size, for the caller to export as metrics.
type CacheStats struct {
	Hits        uint64 // Gets served from a cache file
	Misses      uint64 // Gets that had to load the chunk (shared loads count once per caller)
	Loads       uint64 // loads run (one per miss not shared with another)
	LoadErrors  uint64 // loads that failed
	Evictions   uint64 // files removed to stay under MaxBytes
	Dropped     uint64 // files found corrupt or short at a Get, or Dropped by the caller
	WriteErrors uint64 // chunks that could not be written to the directory (served anyway)
	Bytes       int64  // bytes of the files held now
	Files       int    // files held now
}

// ChunkCache is a bounded on-disk cache of object chunks, shared by every
// reader of a server and safe for concurrent use. Each chunk is one file,
// its bytes followed by their CRC-32C (4 bytes, little-endian), written
// as a .sqtmp file and renamed into place (no fsync: a file torn by a
// crash fails its checksum and is dropped). Files are evicted least
// recently used first when their bytes pass MaxBytes. A file that is
// short or fails its checksum when read is dropped and the chunk loaded
// again. Concurrent Gets of one chunk share one load (singleflight).
type ChunkCache struct {
	opts  ChunkCacheOptions
	group singleflight.Group

	mu      sync.Mutex
	closed  bool
	running sync.WaitGroup // loads in flight; Add under mu while !closed
	lru     *list.List     // of *cacheEntry, most recently used first
	files   map[string]*list.Element
	bytes   int64

	hits, misses, loads, loadErrors, evictions, dropped, writeErrors atomic.Uint64
}

// cacheEntry is one chunk file.
type cacheEntry struct {
	name string
	size int64 // file size, trailer included
}

// OpenChunkCache opens (creating it if needed) the cache directory
// opts.Dir: it deletes the temporary files a previous process left, takes
// the chunk files there into the cache, least recently modified first in
// line for eviction, and evicts down to MaxBytes. Other files are logged
// and left alone. Errors: invalid options, or the directory cannot be
// created or listed.
func OpenChunkCache(opts ChunkCacheOptions) (*ChunkCache, error) {
	opts.Defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &ChunkCache{opts: opts, lru: list.New(), files: make(map[string]*list.Element)}
	fsys := opts.FS
	if err := fsys.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("tier: chunk cache: %w", err)
	}
	names, err := fsys.ReadDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("tier: chunk cache: %w", err)
	}
	type found struct {
		name string
		size int64
		mod  time.Time
	}
	var kept []found
	for _, name := range names {
		path := filepath.Join(opts.Dir, name)
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			if err := fsys.Remove(path); err != nil {
				opts.Logger.Warn("tier: chunk cache: cannot remove a temporary file", "file", path, "err", err)
			}
		case isChunkName(name):
			fi, err := fsys.Stat(path)
			if err != nil {
				opts.Logger.Warn("tier: chunk cache: skipping a file", "file", path, "err", err)
				continue
			}
			kept = append(kept, found{name, fi.Size(), fi.ModTime()})
		default:
			opts.Logger.Info("tier: chunk cache: unknown file left alone", "file", path)
		}
	}
	slices.SortStableFunc(kept, func(a, b found) int { return b.mod.Compare(a.mod) })
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range kept {
		c.files[f.name] = c.lru.PushBack(&cacheEntry{name: f.name, size: f.size})
		c.bytes += f.size
	}
	c.evictLocked()
	return c, nil
}

// isChunkName reports whether name is a chunk file name.
func isChunkName(name string) bool {
	mid, ok := strings.CutPrefix(name, chunkPrefix)
	if !ok {
		return false
	}
	mid, ok = strings.CutSuffix(mid, chunkSuffix)
	if !ok || len(mid) != chunkHexChars {
		return false
	}
	_, err := hex.DecodeString(mid)
	return err == nil
}

// Loader loads a chunk from the object store: exactly id.Len() bytes.
// ctx is not the caller's (a load shared by several Gets outlives any
// one of them): the loader bounds its own time.
type Loader func(ctx context.Context, id ChunkID) ([]byte, error)

// Get returns the bytes of chunk id (id.Len() of them): from its cache
// file if that is whole and passes its checksum, else from load, after
// which the chunk is written to the cache. Concurrent Gets of the same
// chunk share one load. ctx bounds only the wait: a cancelled Get returns
// ctx's error at once while a shared load goes on for the others. The
// load runs with a context that is never cancelled (the loader sets its
// own timeout). The returned slice is the caller's. Errors: those of
// load; a load that returns the wrong number of bytes is ErrCorrupt.
// Failing to write the cache file is not an error (it is counted and
// logged).
func (c *ChunkCache) Get(ctx context.Context, id ChunkID, load Loader) ([]byte, error) {
	want := id.Len()
	if want <= 0 {
		return nil, fmt.Errorf("tier: chunk %d of %s: %w: outside the object's %d bytes", id.Index, id.Key, ErrInvalidRange, id.ObjectSize)
	}
	name := id.fileName()
	if b, ok := c.readFile(name, want); ok {
		c.hits.Add(1)
		return b, nil
	}
	c.misses.Add(1)
	ch := c.group.DoChan(name, func() (any, error) {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrCacheClosed
		}
		c.running.Add(1)
		c.mu.Unlock()
		defer c.running.Done()
		c.loads.Add(1)
		b, err := load(context.Background(), id)
		if err == nil && int64(len(b)) != want {
			err = fmt.Errorf("tier: chunk %d of %s: %w: loaded %d bytes, want %d", id.Index, id.Key, ErrCorrupt, len(b), want)
		}
		if err != nil {
			c.loadErrors.Add(1)
			return nil, err
		}
		c.store(name, b)
		return b, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		if r.Shared {
			return slices.Clone(r.Val.([]byte)), nil
		}
		return r.Val.([]byte), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("tier: chunk %d of %s: %w", id.Index, id.Key, ctx.Err())
	}
}

// Close waits for the loads in flight (and the writes of their chunks) to
// end; later Gets that miss fail with ErrCacheClosed. The files stay for
// the next OpenChunkCache. Close does not cancel loads: the caller stops
// its loaders first (RemoteReader.Close).
func (c *ChunkCache) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.running.Wait()
}

// Contains reports whether chunk id has a cache file (without reading or
// checking it, and without counting a hit).
func (c *ChunkCache) Contains(id ChunkID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.files[id.fileName()]
	return ok
}

// Drop removes chunk id's cache file, if any: the caller found its bytes
// bad (a batch failing its CRC) and wants the next Get to load it again.
func (c *ChunkCache) Drop(id ChunkID) {
	c.dropName(id.fileName())
}

// Stats returns the cache's counters and current size.
func (c *ChunkCache) Stats() CacheStats {
	c.mu.Lock()
	bytes, files := c.bytes, len(c.files)
	c.mu.Unlock()
	return CacheStats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Loads: c.loads.Load(), LoadErrors: c.loadErrors.Load(),
		Evictions: c.evictions.Load(), Dropped: c.dropped.Load(), WriteErrors: c.writeErrors.Load(),
		Bytes: bytes, Files: files,
	}
}

// readFile returns the chunk stored as name if it is there, want bytes
// long and passes its checksum; a file that fails is dropped.
func (c *ChunkCache) readFile(name string, want int64) ([]byte, bool) {
	c.mu.Lock()
	el, ok := c.files[name]
	if ok {
		c.lru.MoveToFront(el)
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	path := filepath.Join(c.opts.Dir, name)
	b, err := c.readWhole(path, want+chunkTrailerBytes)
	if err == nil {
		data, sum := b[:want], binary.LittleEndian.Uint32(b[want:])
		if Checksum(data) == sum {
			return data[:want:want], true
		}
		err = errors.New("checksum mismatch")
	}
	c.opts.Logger.Warn("tier: chunk cache: dropping a bad file", "file", path, "err", err)
	c.dropped.Add(1)
	c.dropName(name)
	return nil, false
}

// readWhole reads path, which must be exactly size bytes long.
func (c *ChunkCache) readWhole(path string, size int64) ([]byte, error) {
	f, err := c.opts.FS.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() != size {
		return nil, fmt.Errorf("%d bytes, want %d", fi.Size(), size)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF)) {
		return nil, err
	}
	return b, nil
}

// store writes data as the file name (temp file, then rename) and takes
// it into the cache, evicting as needed. A chunk larger than MaxBytes is
// not stored.
func (c *ChunkCache) store(name string, data []byte) {
	size := int64(len(data)) + chunkTrailerBytes
	if size > c.opts.MaxBytes {
		return
	}
	path := filepath.Join(c.opts.Dir, name)
	tmp := path + tmpSuffix
	if err := c.writeTemp(tmp, data); err != nil {
		c.writeErrors.Add(1)
		c.opts.Logger.Warn("tier: chunk cache: cannot write a chunk", "file", tmp, "err", err)
		_ = c.opts.FS.Remove(tmp)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Rename under mu, so an eviction of an older file of the same name
	// cannot remove the new one.
	if err := c.opts.FS.Rename(tmp, path); err != nil {
		c.writeErrors.Add(1)
		c.opts.Logger.Warn("tier: chunk cache: cannot rename a chunk", "file", tmp, "err", err)
		_ = c.opts.FS.Remove(tmp)
		return
	}
	if el, ok := c.files[name]; ok {
		c.bytes -= el.Value.(*cacheEntry).size
		c.lru.Remove(el)
	}
	c.files[name] = c.lru.PushFront(&cacheEntry{name: name, size: size})
	c.bytes += size
	c.evictLocked()
}

// writeTemp writes data and its CRC-32C trailer to a new file tmp.
func (c *ChunkCache) writeTemp(tmp string, data []byte) error {
	f, err := c.opts.FS.Create(tmp)
	if err != nil {
		return err
	}
	var trailer [chunkTrailerBytes]byte
	binary.LittleEndian.PutUint32(trailer[:], Checksum(data))
	_, err = f.WriteAt(data, 0)
	if err == nil {
		_, err = f.WriteAt(trailer[:], int64(len(data)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// evictLocked removes least recently used files until the cache's bytes
// are within MaxBytes. c.mu is held.
func (c *ChunkCache) evictLocked() {
	for c.bytes > c.opts.MaxBytes {
		el := c.lru.Back()
		if el == nil {
			return
		}
		c.removeLocked(el)
		c.evictions.Add(1)
	}
}

// dropName removes the file name from the cache, if it is there.
func (c *ChunkCache) dropName(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.files[name]; ok {
		c.removeLocked(el)
	}
}

// removeLocked forgets el and removes its file. c.mu is held. A failed
// removal is logged: the file is no longer counted, and OpenChunkCache
// takes it in again at the next start.
func (c *ChunkCache) removeLocked(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.lru.Remove(el)
	delete(c.files, e.name)
	c.bytes -= e.size
	if err := c.opts.FS.Remove(filepath.Join(c.opts.Dir, e.name)); err != nil {
		c.opts.Logger.Warn("tier: chunk cache: cannot remove a file", "file", e.name, "err", err)
	}
}
