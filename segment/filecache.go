package segment

import (
	"container/list"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/seedqueue/sq/ring"
)

// DefaultMaxOpenSegmentFiles is the default bound of a FileCache: file
// descriptors and memory mappings of segments, for the whole server.
const DefaultMaxOpenSegmentFiles = 4096

// FileCache bounds the file descriptors and memory mappings that the Logs
// sharing it hold between calls (docs/architecture.md §3.5), so that the
// number of segments on disk is not limited by RLIMIT_NOFILE or
// vm.max_map_count. It counts, as one unit each:
//
//   - the open files of each active segment (.log, .index, .timeindex:
//     3) and, during Open, the .log being recovered;
//   - each memory mapping: the active segment's .log, and a sealed
//     segment's .log and .index once read (2); a sealed segment holds no
//     file descriptor: its files are closed once mapped.
//
// Sealed segments are opened lazily, on their first read, and kept mapped
// in a least-recently-used list. When the count passes Max, the least
// recently read sealed segments that no reader is using are unmapped.
// Eviction only drops the segment's own reference: a View keeps its
// mappings alive until Release (mappings are reference counted), and a
// segment in use is skipped. Active segments count but are not evicted
// here: their owner calls Log.ParkIfOver once everything appended is
// synced, which closes them while the count is over Max (a commit in
// progress holds its .log whatever the bound). A server whose active
// segments alone reach Max keeps each sealed segment mapped only for the
// duration of a read.
//
// Files opened and closed within one call (reading an index at Open,
// mapping a segment, the background scrub) are not counted.
//
// A FileCache is safe for concurrent use; the zero value is not usable:
// call NewFileCache.
type FileCache struct {
	max       int64
	files     atomic.Int64
	maps      atomic.Int64
	evictions atomic.Uint64
	resErr    atomic.Pointer[error] // last EMFILE/ENFILE/ENOMEM, nil after a later success

	mu  sync.Mutex
	lru list.List // *segment: sealed segments with a mapping; front = most recently read
}

// NewFileCache returns a FileCache holding at most max file descriptors
// and mappings (see FileCache); max < 1 means DefaultMaxOpenSegmentFiles.
func NewFileCache(max int) *FileCache {
	if max < 1 {
		max = DefaultMaxOpenSegmentFiles
	}
	return &FileCache{max: int64(max)}
}

// FileStats is a snapshot of a FileCache.
type FileStats struct {
	Max       int    // the bound (FileCache)
	Files     int    // open file descriptors held by segments
	Mappings  int    // live memory mappings, those kept only by Views included
	Cached    int    // sealed segments kept mapped for later reads
	Evictions uint64 // sealed segments unmapped to stay within Max since NewFileCache
	// Err is the last "too many open files" (EMFILE, ENFILE) or mmap
	// ENOMEM error met by a Log sharing the cache, if no open or mapping
	// has succeeded since (nor Recheck); nil otherwise.
	Err error
}

// Stats returns the current counts.
func (c *FileCache) Stats() FileStats {
	c.mu.Lock()
	cached := c.lru.Len()
	c.mu.Unlock()
	return FileStats{Max: int(c.max), Files: int(c.files.Load()), Mappings: int(c.maps.Load()),
		Cached: cached, Evictions: c.evictions.Load(), Err: c.Err()}
}

// Err returns FileStats.Err: the last resource exhaustion error (EMFILE,
// ENFILE, ENOMEM), or nil once an open or a mapping has succeeded since.
func (c *FileCache) Err() error {
	if p := c.resErr.Load(); p != nil {
		return *p
	}
	return nil
}

// ErrResources is the class of errors that mean the process is out of
// file descriptors (EMFILE, ENFILE) or mappings (ENOMEM from mmap(2)):
// test with errors.Is. Such errors keep their errno too.
var ErrResources = errors.New("segment: out of file descriptors or mappings")

// isExhaustion reports whether err means the process or system is out of
// file descriptors (EMFILE, ENFILE; open(2)) or mappings (ENOMEM; mmap(2),
// vm.max_map_count).
func isExhaustion(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM)
}

// observe records the outcome of an open or a mapping: nil clears the
// resource error, an exhaustion error sets it. It returns err, wrapped
// with ErrResources when it is an exhaustion error.
func (c *FileCache) observe(err error) error {
	switch {
	case err == nil:
		if c.resErr.Load() != nil {
			c.resErr.Store(nil)
		}
		return nil
	case isExhaustion(err):
		if !errors.Is(err, ErrResources) {
			err = fmt.Errorf("%w: %w", ErrResources, err)
		}
		c.resErr.Store(&err)
	}
	return err
}

// Recheck tells whether the process can open a file and create a mapping
// now, so that Err does not outlive the shortage when no segment happens
// to be opened after it: if Err is set, it opens dir read-only through
// fsys and maps one anonymous page, and clears Err when both succeed. It
// returns Err afterwards (nil at once when Err is nil).
func (c *FileCache) Recheck(fsys ring.FS, dir string) error {
	if c.Err() == nil {
		return nil
	}
	f, err := fsys.Open(dir)
	if err == nil {
		f.Close()
		var b []byte
		b, err = unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANON)
		if err == nil {
			err = unix.Munmap(b)
		}
	}
	switch {
	case err == nil:
		_ = c.observe(nil)
	case isExhaustion(err):
		_ = c.observe(fmt.Errorf("segment: recheck: %w", err))
	}
	return c.Err()
}

// addFiles counts n more (or, negative, fewer) held file descriptors.
func (c *FileCache) addFiles(n int) { c.files.Add(int64(n)) }

// over reports whether the counted files and mappings pass the bound.
func (c *FileCache) over() bool { return c.files.Load()+c.maps.Load() > c.max }

// touch records a read of sealed segment s: it moves s to the front of the
// LRU list (adding it if its mapping is current) and evicts idle segments
// while over the bound. It must not be called with s.mapMu held: the lock
// order is FileCache.mu, then segment.mapMu.
func (c *FileCache) touch(s *segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.mapMu.Lock()
	mapped := s.m != nil
	s.mapMu.Unlock()
	switch {
	case s.lru != nil:
		c.lru.MoveToFront(s.lru)
	case mapped:
		s.lru = c.lru.PushFront(s)
	}
	c.trimLocked(false)
}

// forget removes s from the LRU list (its mapping was dropped by Close,
// retention or a roll). Not with s.mapMu held.
func (c *FileCache) forget(s *segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.lru != nil {
		c.lru.Remove(s.lru)
		s.lru = nil
	}
}

// trim evicts idle sealed segments, least recently read first, while the
// count is over the bound.
func (c *FileCache) trim() {
	if !c.over() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trimLocked(false)
}

// trimAll evicts every idle sealed segment, after a mapping failed with
// ENOMEM (vm.max_map_count reached by the whole process).
func (c *FileCache) trimAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trimLocked(true)
}

// trimLocked evicts from the back of the LRU list while over the bound (or
// every idle segment with all). A segment whose mapping a reader holds is
// skipped: unmapping it would free nothing until the reader is done, and
// the last View.Release trims again. c.mu is held.
func (c *FileCache) trimLocked(all bool) {
	for e := c.lru.Back(); e != nil && (all || c.over()); {
		prev := e.Prev()
		s := e.Value.(*segment)
		s.mapMu.Lock()
		switch {
		case s.m == nil:
			c.lru.Remove(e)
			s.lru = nil
		case s.m.refs.Load() == 1:
			// Only the segment's own reference: no reader has it, and
			// none can take one while s.mapMu is held (acquire).
			s.m.release()
			s.m = nil
			c.lru.Remove(e)
			s.lru = nil
			c.evictions.Add(1)
		}
		s.mapMu.Unlock()
		e = prev
	}
}

// openHeld opens a file that a segment keeps open between calls (the
// active segment's files, the .log under recovery), counting it in the
// FileCache; an EMFILE or ENFILE error is wrapped with ErrResources and
// recorded (FileStats.Err).
func (l *Log) openHeld(open func(string) (ring.File, error), path string) (ring.File, error) {
	f, err := open(path)
	if err != nil {
		return nil, l.files.observe(err)
	}
	_ = l.files.observe(nil)
	l.files.addFiles(1)
	return f, nil
}

// closeHeld closes *f if open, uncounts it and sets *f to nil.
func (l *Log) closeHeld(f *ring.File) error {
	if *f == nil {
		return nil
	}
	if f != &l.direct.f {
		l.closeDirectFor(*f)
	}
	err := (*f).Close()
	*f = nil
	l.files.addFiles(-1)
	return err
}

// dropMapping releases s's own reference on its mapping and takes s off
// the LRU list; readers holding Views keep the mapping until they release
// it. Not with s.mapMu held.
func (l *Log) dropMapping(s *segment) {
	s.mapMu.Lock()
	if s.m != nil {
		s.m.release()
		s.m = nil
	}
	s.mapMu.Unlock()
	l.files.forget(s)
}

// settle ends the recovery of s: if recovery scanned it (at or above the
// recovery point), its bytes may have been only in the page cache of a
// crashed process, so it is fdatasynced; a sealed segment's .log is then
// closed and its in-memory index dropped (the .index file matches it now;
// reads map it). So Open holds at most the active segment's files and the
// one under recovery, however many segments the partition has.
func (l *Log) settle(s *segment, scanned, last bool) error {
	if scanned {
		if err := l.be.Sync(s.file); err != nil {
			return fmt.Errorf("segment: open: %w", err)
		}
	}
	if last {
		return nil
	}
	if !s.idxFailed {
		s.index = nil // the .index file matches; reads map it
	}
	if err := l.closeHeld(&s.file); err != nil {
		return fmt.Errorf("segment: open: %w", err)
	}
	return nil
}
