package segment

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/seedqueue/sq/ring"
)

// forEachBackend runs fn once per I/O backend, as subtests named
// "backend=portable" and "backend=uring" (DESIGN §3.4: the suite runs on
// both). The uring subtest skips with the probe's reason where the kernel
// refuses io_uring. The backend is closed when the subtest ends.
func forEachBackend(t *testing.T, fn func(t *testing.T, be ring.Backend)) {
	t.Helper()
	for _, mode := range []string{ring.ModePortable, ring.ModeUring} {
		t.Run("backend="+mode, func(t *testing.T) { fn(t, newTestBackend(t, mode)) })
	}
}

// newTestBackend returns the backend of mode (ring.ModePortable or
// ring.ModeUring), closed at the end of the test, or skips the test when
// io_uring is unavailable.
func newTestBackend(t testing.TB, mode string) ring.Backend {
	t.Helper()
	if mode == ring.ModePortable {
		return ring.NewPortable()
	}
	if ok, why := ring.Probe(); !ok {
		t.Skip("io_uring unavailable: " + why)
	}
	be, err := ring.NewUring()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Errorf("closing the backend: %v", err)
		}
	})
	return be
}

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
