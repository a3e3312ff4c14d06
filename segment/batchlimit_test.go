package segment

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/seedqueue/sq/ring"
)

// TestLowerBatchLimitKeepsBatches: batches written under a larger batch
// limit are legitimate after a restart with a smaller one (the operator
// lowered --max-batch-bytes). Recovery checks them in pieces: after a clean
// stop or a crash, under every sync policy, in sealed and active segments,
// nothing is cut and nothing is corruption, the scrub passes, every record
// reads, and appends continue. A hole before such batches is still found:
// corruption under every-batch, cut with the offsets dropped otherwise.
func TestLowerBatchLimitKeepsBatches(t *testing.T) {
	const recs, value = 20, 1000 // about 20 KiB a batch
	policies := []Durability{DurableEveryBatch, DurableInterval, DurableNone}
	for _, d := range policies {
		for _, crash := range []bool{false, true} {
			for _, limit := range []int{64, 4 << 10, 20 << 10} {
				t.Run(fmt.Sprintf("%v/crash=%v/limit=%d", d, crash, limit), func(t *testing.T) {
					dir := t.TempDir()
					opts := Options{SegmentBytes: 70 << 10, IndexIntervalBytes: 4096, PreallocBytes: 64 << 10, MaxBatchBytes: 64 << 10, Durability: d}
					l := openLog(t, dir, opts)
					appendBatches(t, l, 8, 1, recs, value) // 3 segments
					if crash {
						abandon(t, l)
					} else if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					opts.MaxBatchBytes = limit
					l, err := Open(dir, ring.OS, ring.NewPortable(), opts)
					if err != nil {
						t.Fatalf("Open with a batch limit of %d: %v", limit, err)
					}
					defer l.Close()
					if _, end := readable(t, l); end != 8*recs {
						t.Fatalf("readable to %d, want %d", end, 8*recs)
					}
					if err := l.VerifySealed(context.Background(), nil); err != nil {
						t.Fatalf("scrub: %v", err)
					}
					if _, err := l.Append([][]byte{makeBatch(t, 8*recs, 1, 10)}); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
		t.Run(fmt.Sprintf("%v/hole", d), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: 1 << 20, IndexIntervalBytes: 4096, PreallocBytes: 64 << 10, MaxBatchBytes: 64 << 10, Durability: d}
			l := openLog(t, dir, opts)
			infos := appendBatches(t, l, 6, 1, recs, value)
			abandon(t, l)
			path := logPath(dir, 0)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{0}, infos[2].Position+16); err != nil { // magic
				t.Fatal(err)
			}
			f.Close()
			opts.MaxBatchBytes = 4 << 10
			l, err = Open(dir, ring.OS, ring.NewPortable(), opts)
			if d == DurableEveryBatch {
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Position != infos[2].Position {
					t.Fatalf("Open = %v, want a *CorruptError at byte %d", err, infos[2].Position)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if _, end := readable(t, l); end != 2*recs {
				t.Fatalf("readable to %d, want the hole and what follows cut at %d", end, 2*recs)
			}
		})
	}
}
