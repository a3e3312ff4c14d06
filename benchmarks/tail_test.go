package benchmarks

import (
	"context"
	"log/slog"
	"math"
	"runtime/metrics"
	"sync"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/seedqueue/sq/engine"
)

// hpEngineObserved opens an engine in a temporary directory with sync
// policy policy and one topic "t" of partitions partitions, closed when
// the benchmark ends; obs, when not nil, receives the engine's events.
func hpEngineObserved(tb testing.TB, policy string, partitions int, obs engine.Observer) *engine.Engine {
	tb.Helper()
	opts := engine.Options{DataDir: tb.TempDir(), SyncPolicy: policy, Logger: slog.New(slog.DiscardHandler), Observer: obs}
	opts.Defaults()
	eng, err := engine.Open(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { eng.Close() })
	if _, err := eng.CreateTopic("t", partitions, engine.TopicConfig{}); err != nil {
		tb.Fatal(err)
	}
	return eng
}

// syncRecorder is an engine.Observer keeping the durations of the
// engine's fdatasync calls (microseconds) in a histogram.
type syncRecorder struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
	n  int64
}

func (s *syncRecorder) AppendDone(context.Context, engine.AppendEvent) {}
func (s *syncRecorder) FetchDone(context.Context, engine.FetchEvent)   {}

// SyncDone records one fdatasync.
func (s *syncRecorder) SyncDone(ev engine.SyncEvent) {
	s.mu.Lock()
	_ = s.h.RecordValue(max(1, ev.Duration.Microseconds()))
	s.n++
	s.mu.Unlock()
}

func (s *syncRecorder) reset() {
	s.mu.Lock()
	s.h.Reset()
	s.n = 0
	s.mu.Unlock()
}

// snapshot returns a copy of the histogram and the calls recorded.
func (s *syncRecorder) snapshot() (*hdrhistogram.Histogram, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return hdrhistogram.Import(s.h.Export()), s.n
}

// tailMetrics is what the Go runtime says about the causes of a latency
// tail other than the disk, read with runtime/metrics.
type tailMetrics struct {
	gcPauses runtimeHist // /sched/pauses/total/gc:seconds
	sched    runtimeHist // /sched/latencies:seconds
	gcCycles uint64      // /gc/cycles/total:gc-cycles
}

func readTailMetrics() tailMetrics {
	s := []metrics.Sample{
		{Name: "/sched/pauses/total/gc:seconds"},
		{Name: "/sched/latencies:seconds"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(s)
	return tailMetrics{
		gcPauses: copyHist(s[0].Value.Float64Histogram()),
		sched:    copyHist(s[1].Value.Float64Histogram()),
		gcCycles: s[2].Value.Uint64(),
	}
}

// runtimeHist is a copy of a runtime/metrics histogram: Counts[i] values
// fell in [Buckets[i], Buckets[i+1]) seconds.
type runtimeHist struct {
	counts  []uint64
	buckets []float64
}

func copyHist(h *metrics.Float64Histogram) runtimeHist {
	return runtimeHist{counts: append([]uint64(nil), h.Counts...), buckets: append([]float64(nil), h.Buckets...)}
}

// sub returns the histogram of the values recorded since old.
func (h runtimeHist) sub(old runtimeHist) runtimeHist {
	d := runtimeHist{counts: make([]uint64, len(h.counts)), buckets: h.buckets}
	for i := range h.counts {
		d.counts[i] = h.counts[i]
		if i < len(old.counts) {
			d.counts[i] -= old.counts[i]
		}
	}
	return d
}

// quantile returns the upper bound in seconds of the bucket holding the
// q quantile (0 when the histogram is empty); an infinite bound is
// reported as the bucket's lower bound.
func (h runtimeHist) quantile(q float64) float64 {
	var total uint64
	for _, c := range h.counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return h.bound(i)
		}
	}
	return h.bound(len(h.counts) - 1)
}

// max returns the upper bound in seconds of the highest non-empty bucket.
func (h runtimeHist) max() float64 {
	for i := len(h.counts) - 1; i >= 0; i-- {
		if h.counts[i] > 0 {
			return h.bound(i)
		}
	}
	return 0
}

func (h runtimeHist) bound(i int) float64 {
	if up := h.buckets[i+1]; !math.IsInf(up, 1) {
		return up
	}
	return h.buckets[i]
}
