package engine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/ring"
)

// BenchmarkSyncerPass compares the syncer's passes (pass=fdatasync: the
// portable backend, one fdatasync(2) per file, at most syncCallsMax at
// once; pass=syncfs: the portable backend, one pass at a time, one
// syncfs(2) for a pass of at least 2 files, syncFSMinFiles; pass=uring:
// the io_uring backend, SyncEach calls of up to 255 files) with 256 goroutines appending one batch of one 100 B
// record each (AppendAsync, then Wait) to a topic of 1,000 or 10,000
// partitions in turn, under every-batch, as benchmarks/
// BenchmarkSyncManyPartitions does, after one append to every partition
// (untimed). One op is one acknowledged batch.
// Metrics: records/s, and per second the backend calls (calls/s: each
// fdatasync, or syncfs), the syncfs(2) calls among them (syncfs/s) and
// the passes run by the syncer's goroutines (passes/s).
func BenchmarkSyncerPass(b *testing.B) {
	for _, parts := range []int{1000, 10000} {
		for _, pass := range []string{"fdatasync", "syncfs", "uring"} {
			var e *Engine // opened once per case: run1 and the timed run share it
			dir := ""
			var be ring.Backend // the io_uring backend, closed after e
			b.Run(fmt.Sprintf("partitions=%d/pass=%s", parts, pass), func(b *testing.B) {
				if e == nil {
					if pass == "syncfs" {
						if ok, rel := ring.SyncFSReportsErrors(); !ok {
							b.Skip("syncfs does not report write-back errors on " + rel)
						}
						old := syncFSMinFiles
						syncFSMinFiles = 2
						defer func() { syncFSMinFiles = old }()
					}
					if pass == "uring" {
						if ok, why := ring.Probe(); !ok {
							b.Skip("io_uring unavailable: " + why)
						}
						u, err := ring.NewUring()
						if err != nil {
							b.Skip(err)
						}
						be = u
					}
					e, dir = openSyncerBench(b, parts, be)
				}
				benchSyncerPass(b, e, parts)
			})
			if e != nil {
				e.Close()
				os.RemoveAll(dir)
			}
			if be != nil {
				be.Close()
			}
		}
	}
}

// openSyncerBench opens an engine in a new directory with the topic "t"
// of parts partitions.
func openSyncerBench(b *testing.B, parts int, be ring.Backend) (*Engine, string) {
	dir, err := os.MkdirTemp("", "sq-syncer-")
	if err != nil {
		b.Fatal(err)
	}
	e, err := Open(Options{DataDir: dir, SyncPolicy: "every-batch", Backend: be, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		os.RemoveAll(dir)
		b.Fatal(err)
	}
	if _, err := e.CreateTopic("t", parts, TopicConfig{}); err != nil {
		e.Close()
		os.RemoveAll(dir)
		b.Fatal(err)
	}
	warmUp(b, e, parts)
	return e, dir
}

// warmUp appends one batch to each partition, so that the timed part
// does not include a partition's first append (its first preallocation).
func warmUp(b *testing.B, e *Engine, parts int) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 256 {
		wg.Go(func() {
			for p := int(next.Add(1) - 1); p < parts; p = int(next.Add(1) - 1) {
				if _, err := e.Append(context.Background(), "t", p, benchBatch(b)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// benchBatch returns a batch of one record with a 100 B value.
func benchBatch(b *testing.B) []byte {
	var bb batch.Builder
	bb.Add(nil, make([]byte, 100), nil, 1)
	out, err := bb.Build()
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func benchSyncerPass(b *testing.B, e *Engine, parts int) {
	tmpl := benchBatch(b)
	s := e.syncer
	calls0, fs0, passes0 := s.calls.Load(), s.syncfs.Load(), s.passes.Load()
	ctx := context.Background()
	var next atomic.Int64
	n := int64(b.N)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 256 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				pd, err := e.AppendAsync(ctx, "t", int(i%int64(parts)), append([]byte(nil), tmpl...), nil)
				if err == nil {
					_, err = pd.Wait(ctx)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	el := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/el, "records/s")
	b.ReportMetric(float64(s.calls.Load()-calls0)/el, "calls/s")
	b.ReportMetric(float64(s.syncfs.Load()-fs0)/el, "syncfs/s")
	b.ReportMetric(float64(s.passes.Load()-passes0)/el, "passes/s")
}
