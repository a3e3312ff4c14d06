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
	data []byte
	refs atomic.Int64
}

// newMapping maps the first size bytes of f (PROT_READ, MAP_SHARED), with
// one reference for the caller. The file must be at least size bytes long:
// touching a page past the end of the file raises SIGBUS.
func newMapping(f ring.File, size int64) (*mapping, error) {
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("segment: mmap %s (%d bytes): %w", f.Name(), size, err)
	}
	m := &mapping{data: data}
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
		if err := unix.Munmap(m.data); err != nil {
			panic(fmt.Sprintf("segment: munmap: %v", err))
		}
	case n < 0:
		panic("segment: mapping released more often than acquired")
	}
}
