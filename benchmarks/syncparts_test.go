package benchmarks

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/ring"
)

// Shape of BenchmarkSyncManyPartitions.
const (
	spInFlight   = 256 // batches outstanding (AppendAsync, then Wait)
	spValueBytes = 100 // value size of the one record of each batch
)

// BenchmarkSyncManyPartitions measures the engine's every-batch path with
// many partitions committing at once (P8), without the network: one engine
// (MaxOpenSegmentFiles 4096, the default) with a topic of 1, 1,000 or
// 10,000 partitions, and 256 goroutines that each append one batch of one
// record with a 100 B value (AppendAsync, then Wait), to the partitions in
// turn (round-robin over one counter), so that 256 batches are outstanding
// at any time. One op is one acknowledged batch (one record). Metrics:
// records/s; fdatasync/s, the files the backend synced per second (each
// partition's .log, and the files of segment rolls); load1, the 1-minute
// load average
// (/proc/loadavg) at the end of the run. The topic is created, and one
// batch appended to each partition, once per partition count, outside the
// timed part. Run, for example:
//
//	go test ./benchmarks -run '^$' -bench 'SyncManyPartitions' -benchtime 100000x -count 3
func BenchmarkSyncManyPartitions(b *testing.B) {
	for _, parts := range []int{1, 1000, 10000} {
		var env *spEnv
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			if env == nil {
				env = spOpen(b, parts)
			}
			spRun(b, env)
		})
		if env != nil {
			env.close(b)
		}
	}
}

// spEnv is an engine with the topic "t" of parts partitions.
type spEnv struct {
	dir   string
	eng   *engine.Engine
	be    *countingBackend
	parts int
}

func spOpen(b *testing.B, parts int) *spEnv {
	dir, err := os.MkdirTemp("", "sq-syncparts-")
	if err != nil {
		b.Fatal(err)
	}
	be := &countingBackend{Backend: ring.NewPortable()}
	opts := engine.Options{DataDir: dir, SyncPolicy: "every-batch", Backend: be, Logger: slog.New(slog.DiscardHandler)}
	eng, err := engine.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	env := &spEnv{dir: dir, eng: eng, be: be, parts: parts}
	if _, err := eng.CreateTopic("t", parts, engine.TopicConfig{}); err != nil {
		env.close(b)
		b.Fatal(err)
	}
	// One append to each partition first, so that the timed part does
	// not include a partition's first append (its first preallocation).
	tmpl := makeBatch(b, 1, spValueBytes)
	var wg sync.WaitGroup
	var next atomic.Int64
	for range spInFlight {
		wg.Go(func() {
			for p := int(next.Add(1) - 1); p < parts; p = int(next.Add(1) - 1) {
				if _, err := eng.Append(context.Background(), "t", p, append([]byte(nil), tmpl...)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return env
}

func (env *spEnv) close(b *testing.B) {
	if err := env.eng.Close(); err != nil {
		b.Error(err)
	}
	os.RemoveAll(env.dir)
}

func spRun(b *testing.B, env *spEnv) {
	tmpl := makeBatch(b, 1, spValueBytes)
	ctx := context.Background()
	var next atomic.Int64
	n := int64(b.N)
	syncs0 := env.be.files.Load()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range spInFlight {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				buf := append([]byte(nil), tmpl...)
				pd, err := env.eng.AppendAsync(ctx, "t", int(i%int64(env.parts)), buf, nil)
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
	b.ReportMetric(float64(env.be.files.Load()-syncs0)/el, "fdatasync/s")
	b.ReportMetric(loadAvg1(), "load1")
}

// countingBackend counts the files its Sync calls sync; everything else
// goes to Backend.
type countingBackend struct {
	ring.Backend
	files atomic.Int64
}

// Sync counts files and syncs them with Backend.
func (c *countingBackend) Sync(files ...ring.File) error {
	c.files.Add(int64(len(files)))
	return c.Backend.Sync(files...)
}

// loadAvg1 returns the 1-minute load average (/proc/loadavg), -1 if
// unreadable.
func loadAvg1() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
