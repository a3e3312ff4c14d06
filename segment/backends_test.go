package segment

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/seedqueue/sq/internal/testutil"
	"github.com/seedqueue/sq/ring"
)

func forEachBackend(t *testing.T, fn func(t *testing.T, be ring.Backend)) {
	testutil.ForEachBackend(t, fn)
}

func newTestBackend(t testing.TB, mode string) ring.Backend { return testutil.NewBackend(t, mode) }

// openLogOn is openLog on backend be.
func openLogOn(t testing.TB, dir string, be ring.Backend, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, ring.OS, be, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// countingBackend counts the WriteAt calls per file name.
type countingBackend struct {
	ring.Backend
	mu     sync.Mutex
	writes map[string]int
}

func (c *countingBackend) WriteAt(f ring.File, bufs [][]byte, off int64) (int64, error) {
	c.mu.Lock()
	c.writes[filepath.Base(f.Name())]++
	c.mu.Unlock()
	return c.Backend.WriteAt(f, bufs, off)
}

// TestOneWritePerAppend: the batches of one Append (one group commit) go
// down as one gather write to the segment (issue 3 item 2), on each
// backend.
func TestOneWritePerAppend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		cb := &countingBackend{Backend: be, writes: map[string]int{}}
		l := openLogOn(t, t.TempDir(), cb, Options{SegmentBytes: 1 << 20, PreallocBytes: 1 << 16})
		defer l.Close()
		for i := range 5 {
			var bs [][]byte
			next := l.NextOffset()
			for range 16 {
				bs = append(bs, makeBatch(t, next, 3, 100))
				next += 3
			}
			info, err := l.Append(bs)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			cb.mu.Lock()
			n := cb.writes[filepath.Base(logPath("", info.Segment))]
			cb.mu.Unlock()
			if n != i+1 {
				t.Fatalf("after %d appends of 16 batches: %d writes to the segment, want %d", i+1, n, i+1)
			}
		}
		readable(t, l)
	})
}
