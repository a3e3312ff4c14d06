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

// role says which rows the ratios of the summary use.
type role int

const (
	roleOther            role = iota
	roleSQ                    // SQ every-batch: the numerator of every ratio
	roleJetStreamDefault      // JetStream at its default durability (sync_interval default)
	roleRedisAlways           // Redis Streams with appendfsync always
)

// row is one line of the table.
type row struct {
	system, mode, config string
	recordsPerSec        float64
	mbPerSec             float64
	p50, p99             float64 // ack latency, ms
	role                 role
	load                 loadWindow // around the measurement
	err                  error
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

// P2's targets: SQ every-batch over Redis Streams with appendfsync always,
// and over JetStream's fastest mode (docs/performance.md).
const (
	p2Redis     = 9.0
	p2JetStream = 10.0
)

// summary is what the ratios under the table are computed from.
type summary struct {
	sq, jetStream, redis *row // nil when missing or failed
}

// summarize picks SQ every-batch, the fastest JetStream row at its default
// durability, and Redis appendfsync always from rows.
func summarize(rows []row) summary {
	var s summary
	for i := range rows {
		r := &rows[i]
		if r.err != nil || r.recordsPerSec <= 0 {
			continue
		}
		switch r.role {
		case roleSQ:
			s.sq = r
		case roleJetStreamDefault:
			if s.jetStream == nil || r.recordsPerSec > s.jetStream.recordsPerSec {
				s.jetStream = r
			}
		case roleRedisAlways:
			s.redis = r
		}
	}
	return s
}

// ratioLine is one line under the table: SQ every-batch over peer, and
// whether that meets target.
func ratioLine(sq, peer *row, what string, target float64) string {
	if sq == nil || peer == nil {
		return fmt.Sprintf("SQ every-batch / %s: not measured", what)
	}
	ratio := sq.recordsPerSec / peer.recordsPerSec
	met := "not met"
	if ratio >= target {
		met = "met"
	}
	return fmt.Sprintf("SQ every-batch / %s (%s, %s): %.0f / %.0f records/s = %.2fx (P2 asks >= %gx: %s)",
		what, peer.mode, peer.config, sq.recordsPerSec, peer.recordsPerSec, ratio, target, met)
}

// printTable prints the side-by-side table with ratios to SQ every-batch,
// then SQ's ratios to the fastest JetStream mode at its default durability
// and to Redis appendfsync always.
func printTable(out io.Writer, w workload, rows []row) {
	s := summarize(rows)
	fmt.Fprintf(out, "one client, %d B records, %v per configuration, loopback; %d CPUs, %s/%s, %s; "+
		"load = 1-minute load average (/proc/loadavg) just before and just after each measurement\n",
		w.recordSize, w.duration, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "system\tmode\tconfiguration\trecords/s\tMB/s\tack p50 ms\tack p99 ms\tload before\tload after\tSQ every-batch / this")
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\t\tFAILED: %s\t\t\t\t\t\t\t\n", r.system, firstLine(r.err.Error()))
			continue
		}
		ratio := "-"
		if s.sq != nil && r.recordsPerSec > 0 {
			ratio = fmt.Sprintf("%.2fx", s.sq.recordsPerSec/r.recordsPerSec)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.2f\t%.3f\t%.3f\t%s\t%s\t%s\n", r.system, r.mode, r.config,
			r.recordsPerSec, r.mbPerSec, r.p50, r.p99, r.load.before.oneMinute(), r.load.after.oneMinute(), ratio)
	}
	tw.Flush()
	fmt.Fprintln(out, ratioLine(s.sq, s.jetStream, "fastest JetStream at default durability", p2JetStream))
	fmt.Fprintln(out, ratioLine(s.sq, s.redis, "Redis appendfsync always", p2Redis))
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
