package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// workload is what every system is measured with.
type workload struct {
	duration   time.Duration
	recordSize int
}

// row is one line of the table.
type row struct {
	system, config string
	recordsPerSec  float64
	mbPerSec       float64
	p50, p99       float64 // ack latency, ms
	sq             bool    // the SQ every-batch row the ratios divide by
	err            error
}

func main() {
	binDir := flag.String("sq-bin", "../../bin", "directory holding the sq-server and sq binaries (make build)")
	duration := flag.Duration("duration", 10*time.Second, "how long each system and configuration is measured")
	recordSize := flag.Int("record-size", 100, "bytes of each record's value")
	only := flag.String("only", "sq,nats,redis", "systems to run, comma separated")
	keep := flag.Bool("keep", false, "keep the temporary directory with the servers' data")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx, os.Stdout, workload{*duration, *recordSize}, *binDir, *only, *keep)
	os.Exit(code)
}

func run(ctx context.Context, out io.Writer, w workload, binDir, only string, keep bool) int {
	work, err := os.MkdirTemp("", "sq-bench-peers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		return 1
	}
	if keep {
		fmt.Fprintln(os.Stderr, "peers: data kept in", work)
	} else {
		defer os.RemoveAll(work)
	}
	runners := []struct {
		name string
		run  func() ([]row, error)
	}{
		{"sq", func() ([]row, error) { return runSQ(ctx, w, binDir, work) }},
		{"nats", func() ([]row, error) { return runNATS(ctx, w, work) }},
		{"redis", func() ([]row, error) { return runRedis(ctx, w, work) }},
	}
	var rows []row
	failed := false
	for _, r := range runners {
		if !strings.Contains(","+only+",", ","+r.name+",") {
			continue
		}
		fmt.Fprintf(os.Stderr, "peers: measuring %s for %v per configuration\n", r.name, w.duration)
		got, err := r.run()
		rows = append(rows, got...)
		if err != nil {
			failed = true
			rows = append(rows, row{system: r.name, err: err})
			fmt.Fprintf(os.Stderr, "peers: %s: %v\n", r.name, err)
		}
	}
	printTable(out, w, rows)
	if failed {
		return 1
	}
	return 0
}

// printTable prints the side-by-side table with ratios to SQ every-batch.
func printTable(out io.Writer, w workload, rows []row) {
	base := 0.0
	for _, r := range rows {
		if r.sq {
			base = r.recordsPerSec
		}
	}
	fmt.Fprintf(out, "one client, %d B records, %v per configuration, loopback; %d CPUs, %s/%s, %s\n",
		w.recordSize, w.duration, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "system\tconfiguration\trecords/s\tMB/s\tack p50 ms\tack p99 ms\tSQ every-batch / this")
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\tFAILED: %s\t\t\t\t\t\n", r.system, firstLine(r.err.Error()))
			continue
		}
		ratio := "-"
		if base > 0 && r.recordsPerSec > 0 {
			ratio = fmt.Sprintf("%.2fx", base/r.recordsPerSec)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.2f\t%.3f\t%.3f\t%s\n", r.system, r.config, r.recordsPerSec, r.mbPerSec, r.p50, r.p99, ratio)
	}
	tw.Flush()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func splitHostPort(addr string) (string, string) {
	h, p, _ := net.SplitHostPort(addr)
	return h, p
}

// latencies is an HdrHistogram of ack latencies in microseconds.
type latencies struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func newLatencies() *latencies { return &latencies{h: hdrhistogram.New(1, 60_000_000, 3)} }

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	_ = l.h.RecordValue(max(1, d.Microseconds()))
	l.mu.Unlock()
}

// percentiles returns p50 and p99 in milliseconds.
func (l *latencies) percentiles() (float64, float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return float64(l.h.ValueAtQuantile(50)) / 1000, float64(l.h.ValueAtQuantile(99)) / 1000
}
