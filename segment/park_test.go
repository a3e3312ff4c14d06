package segment

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/seedqueue/sq/internal/testutil"
	"github.com/seedqueue/sq/ring"
)

// TestParkManyLogsWithinBound: 80 logs sharing a FileCache of 16 (the
// engine's partitions under --max-open-segment-files) each park their
// active segment after a synced append, so the process holds about the
// bound of descriptors under an RLIMIT_NOFILE that 80 active segments'
// 240 files would pass several times over; every log stays appendable
// (reopened on the next append, across rolls) and readable, and after a
// clean restart and after a crash (no Close) every log holds exactly what
// was appended and synced.
func TestParkManyLogsWithinBound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		const logs, rounds, bound = 80, 3, 16
		for _, crash := range []bool{false, true} {
			t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
				c := NewFileCache(bound)
				root := t.TempDir()
				opts := smallOptions()
				opts.Files = c
				before := testutil.OpenFDs(t)
				restore := testutil.LimitOpenFiles(t, before+bound+40)
				ls := make([]*Log, logs)
				for i := range ls {
					ls[i] = openLogOn(t, filepath.Join(root, fmt.Sprint(i)), be, opts)
					ls[i].ParkIfOver()
				}
				for r := range rounds {
					for i, l := range ls {
						if r == 1 && i%3 == 0 {
							continue // some logs idle for a round
						}
						appendBatches(t, l, 1, 1, 3, 200)
						if err := l.Sync(); err != nil {
							t.Fatal(err)
						}
						l.ParkIfOver()
					}
					if st := c.Stats(); st.Files+st.Mappings > bound+3 {
						t.Fatalf("round %d: %d files and %d mappings held, bound %d", r, st.Files, st.Mappings, bound)
					}
				}
				if after := testutil.OpenFDs(t); after > before+bound+3 {
					t.Fatalf("/proc/self/fd: %d descriptors before, %d with %d logs open (bound %d)", before, after, logs, bound)
				}
				want := make([]uint64, logs)
				for i, l := range ls {
					if _, end := readable(t, l); end != l.NextOffset() {
						t.Fatalf("log %d: read to %d, NextOffset %d", i, end, l.NextOffset())
					}
					want[i] = l.NextOffset()
					if l.SegmentCount() < 2 && i%3 != 0 {
						t.Fatalf("log %d: %d segments, want rolls", i, l.SegmentCount())
					}
				}
				for _, l := range ls {
					if crash {
						abandon(t, l)
					} else if err := l.Close(); err != nil {
						t.Fatal(err)
					}
				}
				restore()
				for i := range ls {
					l := openLogOn(t, filepath.Join(root, fmt.Sprint(i)), be, opts)
					if l.NextOffset() != want[i] {
						t.Fatalf("log %d reopened at %d, want %d", i, l.NextOffset(), want[i])
					}
					readable(t, l)
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	})
}
