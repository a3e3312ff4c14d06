package segment

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/seedqueue/sq/ring"
)

// mapping is a read-only shared memory map of a .log file, reference
// counted: the segment holds one reference while the mapping is current,
// each View holds one while it is alive, and the last release unmaps.
type mapping struct {
	data []byte // the .log
	idx  []byte // the .index of a sealed segment, or nil
	refs atomic.Int64
	c    *FileCache // counts the mappings; decremented at unmap
}

// newMapping maps the first size bytes of f (PROT_READ, MAP_SHARED), with
// one reference for the caller, counted in c. The file must be at least
// size bytes long: touching a page past the end of the file raises SIGBUS.
// ENOMEM (vm.max_map_count) is wrapped with ErrResources and recorded in c.
func newMapping(f ring.File, size int64, c *FileCache) (*mapping, error) {
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, c.observe(fmt.Errorf("segment: mmap %s (%d bytes): %w", f.Name(), size, err))
	}
	_ = c.observe(nil)
	c.maps.Add(1)
	m := &mapping{data: data, c: c}
	m.refs.Store(1)
	return m, nil
}

// acquire adds a reference. The caller must already hold one, or hold the
// lock under which the owner's reference is stable.
func (m *mapping) acquire() { m.refs.Add(1) }

// release drops a reference and unmaps on the last one.
func (m *mapping) release() {
	switch n := m.refs.Add(-1); {
	case n == 0:
		// Unmap errors are EINVAL for a bad range, which would be a bug.
		for _, b := range [][]byte{m.data, m.idx} {
			if b == nil {
				continue
			}
			if err := unix.Munmap(b); err != nil {
				panic(fmt.Sprintf("segment: munmap: %v", err))
			}
			m.c.maps.Add(-1)
		}
	case n < 0:
		panic("segment: mapping released more often than acquired")
	}
}

// mapIndex maps the .index file of sealed segment s read-only into m.idx,
// or leaves it nil if the file is missing, empty or cannot be mapped:
// reads then scan the segment from its start, which is slower but
// correct. Running out of file descriptors or mappings (EMFILE, ENFILE,
// ENOMEM) is not hidden that way: it is returned, wrapped with
// ErrResources.
func (l *Log) mapIndex(s *segment, m *mapping) error {
	f, err := l.fs.Open(s.idxPath)
	if err != nil {
		if isExhaustion(err) {
			return l.files.observe(fmt.Errorf("segment: read: %w", err))
		}
		l.opts.Logger.Warn("segment: index not mapped", "file", s.idxPath, "err", err)
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	size := fi.Size() / indexEntrySize * indexEntrySize
	if size == 0 {
		return nil
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		if isExhaustion(err) {
			return l.files.observe(fmt.Errorf("segment: mmap %s (%d bytes): %w", s.idxPath, size, err))
		}
		l.opts.Logger.Warn("segment: index not mapped", "file", s.idxPath, "err", err)
		return nil
	}
	l.files.maps.Add(1)
	m.idx = b
	return nil
}
