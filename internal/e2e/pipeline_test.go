package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/faultfs"
	"github.com/seedqueue/sq/net/dataplane"
	"github.com/seedqueue/sq/sdk"
)

// failCounter is an engine.Observer counting failed appends.
type failCounter struct{ failed atomic.Int64 }

func (o *failCounter) AppendDone(_ context.Context, ev engine.AppendEvent) {
	if ev.Err != nil {
		o.failed.Add(1)
	}
}
func (o *failCounter) FetchDone(context.Context, engine.FetchEvent) {}
func (o *failCounter) SyncDone(engine.SyncEvent)                    {}

// TestPipelinedPublishKeepsOrderAcrossFailedWrites runs the real engine
// and data plane in process on a fault-injecting file system: while a
// BatchProducer keeps several batches of one partition in flight, some
// log writes fail with ENOSPC (DISK_FULL, retriable). The batches behind a
// failed one fail unwritten and are resent after its retry, so the
// partition holds every record exactly once, in Send order.
func TestPipelinedPublishKeepsOrderAcrossFailedWrites(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	fs := faultfs.New(dir, nil)
	obs := &failCounter{}
	eng, err := engine.Open(engine.Options{DataDir: dir, FS: fs, Backend: fs.Backend(), Observer: obs,
		ScrubBytesPerSec: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if _, err := eng.CreateTopic("bp", 1, engine.TopicConfig{SyncPolicy: "every-batch"}); err != nil {
		t.Fatal(err)
	}
	srv, err := dataplane.New(eng, dataplane.Options{NodeID: "e2e", ServerVersion: "e2e", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Logf("data plane after Close: %v", err)
		}
	}()
	for _, after := range []int{5, 20, 40} {
		fs.Inject(faultfs.Rule{Ops: faultfs.OpWrite, Path: "*.log", After: after, Times: 1, Err: syscall.ENOSPC})
	}
	errs := make(chan sdk.BatchError, 100)
	bp, err := sdk.NewBatchProducer(ctx, sdk.BatchProducerConfig{
		ProducerConfig: sdk.ProducerConfig{Addr: ln.Addr().String(), Retries: 20,
			RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond},
		BatchRecords:            20,
		Linger:                  time.Millisecond,
		MaxInFlightPerPartition: 4,
		OnError:                 func(e sdk.BatchError) { errs <- e },
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	for i := range n {
		if err := bp.Send(ctx, "bp", nil, fmt.Appendf(nil, "k0-%d", i)); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	if err := bp.Close(); err != nil {
		t.Fatal(err)
	}
	close(errs)
	for e := range errs {
		t.Errorf("batch failed: %v", e)
	}
	if obs.failed.Load() == 0 {
		t.Fatal("no append failed: the injected write errors did not fire")
	}
	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkPartitionOrder(t, ctx, c, 0, "k0", n)
	info, err := eng.DescribeTopic("bp")
	if err != nil {
		t.Fatal(err)
	}
	if hw := info.Partitions[0].HighWatermark; hw != n {
		t.Fatalf("high watermark %d, want %d: a record was stored twice", hw, n)
	}
	t.Logf("%d appends failed (injected write errors and the batches chained behind them)", obs.failed.Load())
}
