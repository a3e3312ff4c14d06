package benchmarks

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
	"github.com/seedqueue/sq/sdk"
)

// hpServe serves eng's data plane on a loopback port until the benchmark
// ends and returns the address.
func hpServe(tb testing.TB, eng *engine.Engine) string {
	tb.Helper()
	srv, err := dataplane.New(eng, dataplane.Options{NodeID: "bench", ServerVersion: "bench", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	tb.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			tb.Logf("serve after close: %v", err)
		}
	})
	return ln.Addr().String()
}

// hpProducer opens a BatchProducer on addr with cfg's batching fields.
func hpProducer(tb testing.TB, addr string, cfg sdk.BatchProducerConfig) *sdk.BatchProducer {
	tb.Helper()
	cfg.Addr = addr
	if cfg.OnError == nil {
		cfg.OnError = func(e sdk.BatchError) { tb.Error(e) }
	}
	bp, err := sdk.NewBatchProducer(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { bp.Close() })
	return bp
}

// BenchmarkBatchProducerPublish measures publish throughput of one
// BatchProducer (defaults: 5 ms linger, 1 MiB batches, up to 4 batches in
// flight per partition) to an in-process server over loopback TCP: 100 B keyless
// records, per sync policy and partition count. One op is one record,
// counted when acknowledged (Flush at the end).
func BenchmarkBatchProducerPublish(b *testing.B) {
	for _, policy := range []string{"every-batch", "none"} {
		for _, parts := range []int{1, 4} {
			b.Run(fmt.Sprintf("sync=%s/partitions=%d", policy, parts), func(b *testing.B) {
				addr := hpServe(b, hpEngine(b, policy, parts))
				bp := hpProducer(b, addr, sdk.BatchProducerConfig{})
				v := bytes.Repeat([]byte("v"), hpValueBytes)
				ctx := context.Background()
				b.SetBytes(hpValueBytes)
				b.ReportAllocs()
				for b.Loop() {
					if err := bp.Send(ctx, "t", nil, v); err != nil {
						b.Fatal(err)
					}
				}
				if err := bp.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			})
		}
	}
}

// BenchmarkBatchProducerInFlight is BenchmarkBatchProducerPublish under
// every-batch with one partition, per MaxInFlightPerPartition (1 sends each
// batch after the previous one is acknowledged).
func BenchmarkBatchProducerInFlight(b *testing.B) {
	for _, w := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("inflight=%d", w), func(b *testing.B) {
			addr := hpServe(b, hpEngine(b, "every-batch", 1))
			bp := hpProducer(b, addr, sdk.BatchProducerConfig{MaxInFlightPerPartition: w})
			v := bytes.Repeat([]byte("v"), hpValueBytes)
			ctx := context.Background()
			b.SetBytes(hpValueBytes)
			b.ReportAllocs()
			for b.Loop() {
				if err := bp.Send(ctx, "t", nil, v); err != nil {
					b.Fatal(err)
				}
			}
			if err := bp.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkConsumeCatchUp measures reading a log already on disk through
// sdk.Client.Fetch (1 MiB fetches, CRC check and decode into Messages)
// over loopback. The log of b.N 100 B records is written first, outside
// the timer. One op is one record read.
func BenchmarkConsumeCatchUp(b *testing.B) {
	eng := hpEngine(b, "none", 1)
	addr := hpServe(b, eng)
	bp := hpProducer(b, addr, sdk.BatchProducerConfig{})
	v := bytes.Repeat([]byte("v"), hpValueBytes)
	ctx := context.Background()
	for range b.N {
		if err := bp.Send(ctx, "t", nil, v); err != nil {
			b.Fatal(err)
		}
	}
	if err := bp.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: addr})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.SetBytes(hpValueBytes)
	b.ReportAllocs()
	b.ResetTimer()
	var off uint64
	for off < uint64(b.N) {
		res, err := c.Fetch(ctx, sdk.FetchRequest{Topic: "t", Offset: off, MaxBytes: 1 << 20})
		if err != nil {
			b.Fatal(err)
		}
		off = res.NextOffset
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkPublishLatencyAtRate offers a fixed 100,000 records/s of 100 B
// records from one BatchProducer (no linger: each batch is sent as soon as
// the partition has a free in-flight slot, up to 4) to one every-batch
// partition, and reports ack latency percentiles measured from each
// record's intended send time (coordinated-omission safe). One op is one
// record; run it with -benchtime=Nx for a fixed count.
//
// Beside the ack latency it reports, from the same run, what the tail is
// made of (docs/performance.md, "Ack latency at a fixed rate"): the
// fdatasync latency of every commit (fsync-p50-ms, fsync-p99-ms,
// fsync-max-ms, through engine.Observer), the commits per second
// (syncs/s) and records per commit, the garbage collector's
// stop-the-world pauses (gc-pause-p99-ms, gc-pause-max-ms, gc-cycles,
// runtime/metrics /sched/pauses/total/gc:seconds) and the time goroutines
// waited to run once runnable (sched-p99-ms, /sched/latencies:seconds).
func BenchmarkPublishLatencyAtRate(b *testing.B) {
	const rate = 100_000
	syncs := &syncRecorder{h: hdrhistogram.New(1, 60_000_000, 3)}
	eng := hpEngineObserved(b, "every-batch", 1, syncs)
	addr := hpServe(b, eng)
	var mu sync.Mutex
	h := hdrhistogram.New(1, 60_000_000, 3)
	bp := hpProducer(b, addr, sdk.BatchProducerConfig{
		Linger: sdk.LingerNone,
		OnAck: func(a sdk.BatchAck) {
			now := time.Now().UnixNano()
			mu.Lock()
			for _, m := range a.Messages {
				_ = h.RecordValue(max(1, (now-int64(binary.LittleEndian.Uint64(m.Value)))/1000))
			}
			mu.Unlock()
		},
	})
	ctx := context.Background()
	interval := time.Second / rate
	slab := make([]byte, 0)
	syncs.reset()
	rt0 := readTailMetrics()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		intended := start.Add(time.Duration(i) * interval)
		if d := time.Until(intended); d > 0 {
			time.Sleep(d)
		}
		if len(slab) < hpValueBytes {
			slab = make([]byte, 1<<20)
		}
		v := slab[:hpValueBytes:hpValueBytes]
		slab = slab[hpValueBytes:]
		binary.LittleEndian.PutUint64(v, uint64(intended.UnixNano()))
		if err := bp.Send(ctx, "t", nil, v); err != nil {
			b.Fatal(err)
		}
	}
	if err := bp.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	rt1 := readTailMetrics()
	mu.Lock()
	defer mu.Unlock()
	b.ReportMetric(float64(h.ValueAtQuantile(50))/1000, "p50-ms")
	b.ReportMetric(float64(h.ValueAtQuantile(99))/1000, "p99-ms")
	b.ReportMetric(float64(h.ValueAtQuantile(99.9))/1000, "p999-ms")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	sh, n := syncs.snapshot()
	b.ReportMetric(float64(sh.ValueAtQuantile(50))/1000, "fsync-p50-ms")
	b.ReportMetric(float64(sh.ValueAtQuantile(99))/1000, "fsync-p99-ms")
	b.ReportMetric(float64(sh.Max())/1000, "fsync-max-ms")
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "syncs/s")
	if n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "records/sync")
	}
	gc := rt1.gcPauses.sub(rt0.gcPauses)
	b.ReportMetric(gc.quantile(0.99)*1000, "gc-pause-p99-ms")
	b.ReportMetric(gc.max()*1000, "gc-pause-max-ms")
	b.ReportMetric(float64(rt1.gcCycles-rt0.gcCycles), "gc-cycles")
	b.ReportMetric(rt1.sched.sub(rt0.sched).quantile(0.99)*1000, "sched-p99-ms")
}
