package benchmarks

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
	"github.com/seedqueue/sq/sdk"
)

// Shape of BenchmarkManyPartitions.
const (
	mpKeys       = 100_000 // distinct record keys
	mpRecords    = 200_000 // records published per run
	mpValueBytes = 100     // value size of each record
	mpMaxFiles   = 4096    // Options.MaxOpenSegmentFiles (--max-open-segment-files)
)

// BenchmarkManyPartitions measures one node with many partitions (P8): a
// topic of partitions partitions on an in-process engine served over
// loopback TCP (frame limit 4 MiB, see mpServe), under sync policy
// every-batch and MaxOpenSegmentFiles 4096. One op is the whole scenario:
//
//  1. create the topic (create-s: seconds);
//  2. publish 200,000 records of 100 B values with 100,000 distinct keys
//     (k0..k99999 in turn, placed by the default key partitioner) from
//     one BatchProducer with its defaults (5 ms linger) and MaxInFlight
//     inflight (0: the default, 32 requests in flight over all partitions,
//     each a publishBatches request carrying the batches of many
//     partitions; 256: the server's default bound of requests per
//     connection), then
//     Flush (records/s: acknowledged records per second);
//  3. read, of this process (server and client together), VmRSS
//     (rss-MiB), VmHWM (peak-rss-MiB), the open file descriptors
//     (open-fds: /proc/self/fd) and the memory mappings (maps:
//     /proc/self/maps lines), and the disk the data directory takes
//     (disk-MiB: allocated blocks);
//  4. close the engine and open it again (restart-s), then check the log
//     end offsets add up to the records published.
//
// Run one op per partition count, for example:
//
//	go test ./benchmarks -run '^$' -bench 'ManyPartitions/partitions=1000/' -benchtime 1x -count 3
func BenchmarkManyPartitions(b *testing.B) {
	for _, parts := range []int{1, 1000, 5000, 10000} {
		for _, inFlight := range []int{0, 256} {
			b.Run(fmt.Sprintf("partitions=%d/inflight=%d", parts, inFlight), func(b *testing.B) {
				for b.Loop() {
					mpRun(b, parts, inFlight)
				}
			})
		}
	}
}

// mpRun runs the BenchmarkManyPartitions scenario once with
// BatchProducerConfig.MaxInFlight inFlight (0: the default, 32) and
// reports its metrics.
func mpRun(b *testing.B, parts, inFlight int) {
	dir := b.TempDir()
	opts := engine.Options{DataDir: dir, SyncPolicy: "every-batch", MaxOpenSegmentFiles: mpMaxFiles,
		Logger: slog.New(slog.DiscardHandler)}
	opts.Defaults()
	eng, err := engine.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			eng.Close()
		}
	}()
	start := time.Now()
	if _, err := eng.CreateTopic("t", parts, engine.TopicConfig{}); err != nil {
		b.Fatal(err)
	}
	create := time.Since(start)

	addr := mpServe(b, eng)
	ctx := context.Background()
	bp, err := sdk.NewBatchProducer(ctx, sdk.BatchProducerConfig{
		// A delivery timeout long enough that a slow run is measured, not failed.
		ProducerConfig: sdk.ProducerConfig{Addr: addr, DeliveryTimeout: 10 * time.Minute},
		MaxInFlight:    inFlight,
		OnError:        func(e sdk.BatchError) { b.Error(e) }})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, mpKeys)
	for i := range keys {
		keys[i] = []byte("k" + strconv.Itoa(i))
	}
	v := bytes.Repeat([]byte("v"), mpValueBytes)
	start = time.Now()
	for i := range mpRecords {
		if err := bp.Send(ctx, "t", keys[i%mpKeys], v); err != nil {
			b.Fatal(err)
		}
	}
	if err := bp.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	publish := time.Since(start)
	rss, hwm := procStatusKiB("VmRSS"), procStatusKiB("VmHWM")
	fds, maps := countDir("/proc/self/fd"), countLines("/proc/self/maps")
	bp.Close()

	if err := eng.Close(); err != nil {
		b.Fatal(err)
	}
	closed = true
	disk := diskUsed(b, dir)
	start = time.Now()
	eng, err = engine.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	restart := time.Since(start)
	closed = false
	info, err := eng.DescribeTopic("t")
	if err != nil {
		b.Fatal(err)
	}
	var total uint64
	for _, p := range info.Partitions {
		total += p.LogEndOffset
	}
	if total != mpRecords {
		b.Fatalf("after the restart the partitions hold %d records, want %d", total, mpRecords)
	}

	b.ReportMetric(create.Seconds(), "create-s")
	b.ReportMetric(mpRecords/publish.Seconds(), "records/s")
	b.ReportMetric(float64(rss)/1024, "rss-MiB")
	b.ReportMetric(float64(hwm)/1024, "peak-rss-MiB")
	b.ReportMetric(float64(fds), "open-fds")
	b.ReportMetric(float64(maps), "maps")
	b.ReportMetric(float64(disk)/(1<<20), "disk-MiB")
	b.ReportMetric(restart.Seconds(), "restart-s")
}

// mpServe is hpServe with a frame limit of 4 MiB: the metadata answer
// for a topic of 10,000 partitions takes about 1.3 MB, over the default
// 1 MiB (--max-frame-bytes); the client takes the server's limit from the
// handshake.
func mpServe(tb testing.TB, eng *engine.Engine) string {
	tb.Helper()
	srv, err := dataplane.New(eng, dataplane.Options{NodeID: "bench", ServerVersion: "bench", MaxFrameBytes: 4 << 20,
		Logger: slog.New(slog.DiscardHandler)})
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

// procStatusKiB returns the field name of /proc/self/status in KiB (0 when
// absent).
func procStatusKiB(name string) int64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// countDir returns the number of entries of dir (-1 when unreadable).
func countDir(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	return len(ents)
}

// countLines returns the number of lines of the file path.
func countLines(path string) int {
	data, _ := os.ReadFile(path)
	return bytes.Count(data, []byte("\n"))
}

// diskUsed returns the bytes allocated to the files under dir.
func diskUsed(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
