package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/seedqueue/sq/sdk"
)

// benchFlags are the flags of `sq bench`.
type benchFlags struct {
	mode        string
	producers   int
	consumers   int
	topic       string
	partitions  int
	recordSize  int
	keys        int
	batchBytes  int
	linger      time.Duration
	inFlight    int
	bufferBytes int
	syncPolicy  string
	acks        string // all or leader (sdk.ParseAcks)
	replication int    // replication factor of the topic sq bench creates; 0: the server's default
	duration    time.Duration
	count       int64
	rate        float64
	jsonFile    string
	plotFile    string
	quiet       bool
	keepTopic   bool
	drainWindow time.Duration
	cpuProfile  string
}

// benchDeleteTimeout bounds the deletion of the topic sq bench created,
// at the end of a run (a second Ctrl-C ends it sooner).
const benchDeleteTimeout = 10 * time.Second

const benchLong = `Measure SQ end to end: producers publish with sdk.BatchProducer and
consumers read with fetch, over real connections to the server.

Modes (the first argument, default e2e):
  produce  only publish; reports publish throughput and ack latency.
  consume  publish --count records first (not timed), then read the whole
           topic back (log start to high watermark) with --consumers;
           reports catch-up read throughput.
  e2e      publish and consume at once (consumers start at the end of the
           topic, so they read this run's records); reports both throughputs,
           the ack latency and the end-to-end latency (send to receipt by a
           consumer).

The run publishes for --duration, or --count records in total when --count is
set (--count 0, the default, means "not set": publish for --duration; in
consume mode without --duration it is 1,000,000). With --rate R the producers
offer a fixed load of R records/s in total: the records whose intended send
time falls within --duration are sent (rate x duration of them), and every
latency is measured from the record's intended send time, so a stall of the
server or of the producer shows up in the latency instead of lowering the
load (coordinated-omission safe); a producer that falls behind stops at
--duration plus --drain-timeout. Without --rate they send as fast as the
back-pressure of the producer allows, and the ack latency then includes the
time a record waits in the producer's buffer. Latencies go into HdrHistogram
histograms (1 us to 60 s, 3 significant digits).

Each record's value is --record-size bytes, the first 8 of which carry its
intended send time (so values under 8 bytes give no latency figures). With
--keys N the records carry N distinct keys in turn; with 0 they have no key
(sticky partitioning).

Unless --topic names an existing topic, sq bench creates a fresh topic with
--partitions and --sync-policy and deletes it at the end (--keep-topic keeps
it). Results go to stdout, with the conditions beside them: record size,
batch bytes, linger, in-flight batches, sync policy, acks, partitions, producers,
consumers (not in produce mode), CPU count, Go version and the I/O backend
of the nodes that lead the topic's partitions, read from each one's control
plane (NodeInfo; in a cluster at the gRPC address the metadata lists, else
at --control; "unknown" when it cannot be reached; "node-1 uring, node-2
portable" when they differ). Without --rate the report ends with a line saying that
the latency was measured with unbounded in-flight batches (so it includes
queueing in the producer's buffer) and suggesting a --rate for a latency
measurement.

While it runs, a progress bar is drawn on stderr when stderr is a terminal,
and otherwise a progress line is printed every 2 s ("sq bench produce: 4.0s:
acked 812,000 (203,000 records/s)"); --quiet prints neither. Consumer
figures appear only in the consume and e2e modes.

The first batch that fails for good (the server died, say: the SDK gives up
within its 30 s delivery timeout) stops the run; the results so far are
printed, then how many records were not acknowledged and why, and sq exits
with status 1. Ctrl-C stops the run at once and prints the partial results
(records sent and acknowledged, throughput and latency so far); sq then
exits with status 130, and a second Ctrl-C exits at once (during the topic's
clean-up, say).

--json FILE and --plot FILE are checked before the run: their directory must
exist and be writable. --json FILE writes the result as JSON (records_per_sec, mb_per_sec,
ack_latency_ms and e2e_latency_ms with p50/p90/p99/p999/max, consume figures,
the conditions, and the throughput per 250 ms interval). --plot FILE.png draws the
throughput over time and the latency distributions; it writes PNG only, and
a name not ending in .png is refused before the run.`

func newBenchCommand(g *globals) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [produce|consume|e2e]",
		Short: "Benchmark publish, consume or end-to-end throughput and latency",
		Long:  benchLong,
		Example: "  sq bench --count 1000000\n" +
			"  sq bench produce --duration 30s --partitions 4 --producers 2 --sync-policy every-batch\n" +
			"  sq bench produce --replication-factor 3 --acks leader\n" +
			"  sq bench e2e --rate 100000 --duration 20s --json result.json --plot result.png\n" +
			"  sq bench consume --count 5000000 --consumers 2 --partitions 2",
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"produce", "consume", "e2e"},
		RunE: func(cmd *cobra.Command, args []string) error {
			f.mode = "e2e"
			if len(args) == 1 {
				f.mode = args[0]
			}
			if err := f.validate(cmd); err != nil {
				return err
			}
			return runBench(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.producers, "producers", 1, "producers, each with its own BatchProducer and connection")
	fl.IntVar(&f.consumers, "consumers", 1, "consumers, each with its own connection; partition p is read by consumer p mod N")
	fl.StringVar(&f.topic, "topic", "", "topic to use; created with --partitions and --sync-policy when missing (default: a fresh sq-bench-* topic)")
	fl.IntVar(&f.partitions, "partitions", 1, "partitions of the topic sq bench creates")
	fl.IntVar(&f.recordSize, "record-size", 100, "bytes of each record's value")
	fl.IntVar(&f.keys, "keys", 0, "distinct record keys used in turn (0: no keys)")
	fl.IntVar(&f.batchBytes, "batch-bytes", sdk.DefaultBatchBytes, "BatchProducer batch size bound in bytes")
	fl.DurationVar(&f.linger, "linger", sdk.DefaultLinger, "BatchProducer linger: how long a batch waits for more records (0: send at once)")
	fl.IntVar(&f.inFlight, "in-flight", sdk.DefaultMaxInFlight, "batches in flight per producer (over all partitions; up to 4 per partition, pipelined)")
	fl.IntVar(&f.bufferBytes, "buffer-bytes", sdk.DefaultBufferBytes, "BatchProducer buffer per producer in bytes: records accepted and not yet acknowledged (Send blocks beyond it)")
	fl.StringVar(&f.syncPolicy, "sync-policy", "every-batch", "sync policy of the topic sq bench creates: every-batch, none, or an interval N / Nms")
	fl.StringVar(&f.acks, "acks", "all", "when a batch is acknowledged: all (every in-sync replica holds it, at least min.insync.replicas) or leader (the leader alone)")
	fl.IntVar(&f.replication, "replication-factor", 0, "replication factor of the topic sq bench creates (0: the server's default)")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "how long to publish (ignored with --count)")
	fl.Int64Var(&f.count, "count", 0, "records to publish in total, instead of --duration (0: not set, publish for --duration)")
	fl.Float64Var(&f.rate, "rate", 0, "offered load in records/s over all producers (0: as fast as possible)")
	fl.StringVar(&f.jsonFile, "json", "", "write the result as JSON to this file")
	fl.StringVar(&f.plotFile, "plot", "", "draw throughput over time and latency distributions to this PNG file (name ending in .png)")
	fl.BoolVar(&f.quiet, "quiet", false, "no progress bar (terminal) or progress lines (otherwise) on stderr")
	fl.BoolVar(&f.keepTopic, "keep-topic", false, "do not delete the topic sq bench created")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of sq bench itself (the client side) to this file (go tool pprof)")
	fl.DurationVar(&f.drainWindow, "drain-timeout", 30*time.Second, "how long consumers may take to read the last records after publishing ends")
	return cmd
}

// validate checks the flags and returns every problem at once.
func (f *benchFlags) validate(cmd *cobra.Command) error {
	var errs []error
	switch f.mode {
	case "produce", "consume", "e2e":
	default:
		errs = append(errs, fmt.Errorf("unknown mode %q: want produce, consume or e2e", f.mode))
	}
	positive := []struct {
		name string
		v    int
	}{{"producers", f.producers}, {"partitions", f.partitions}, {"batch-bytes", f.batchBytes}, {"in-flight", f.inFlight}, {"buffer-bytes", f.bufferBytes}}
	for _, p := range positive {
		if p.v < 1 {
			errs = append(errs, fmt.Errorf("--%s must be at least 1, got %d", p.name, p.v))
		}
	}
	if f.mode != "produce" && f.consumers < 1 {
		errs = append(errs, fmt.Errorf("--consumers must be at least 1 in %s mode, got %d", f.mode, f.consumers))
	}
	for _, n := range []struct {
		name string
		v    float64
	}{{"record-size", float64(f.recordSize)}, {"keys", float64(f.keys)}, {"rate", f.rate}, {"count", float64(f.count)}} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("--%s must not be negative, got %v", n.name, n.v))
		}
	}
	if _, err := sdk.ParseAcks(f.acks); err != nil {
		errs = append(errs, fmt.Errorf("--%w", err))
	}
	if f.replication < 0 {
		errs = append(errs, fmt.Errorf("--replication-factor must not be negative, got %d", f.replication))
	}
	if f.count == 0 && f.duration <= 0 {
		errs = append(errs, errors.New("give a positive --duration or --count"))
	}
	if f.mode == "consume" && f.count == 0 && !cmd.Flags().Changed("duration") {
		f.count = 1_000_000
	}
	if f.plotFile != "" && !strings.EqualFold(filepath.Ext(f.plotFile), ".png") {
		errs = append(errs, fmt.Errorf("--plot %s: sq bench draws PNG images only; give a file name ending in .png", f.plotFile))
	}
	for _, o := range []struct{ flag, path string }{{"json", f.jsonFile}, {"plot", f.plotFile}} {
		if err := checkOutputPath(o.path); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", o.flag, err))
		}
	}
	return errors.Join(errs...)
}

// checkOutputPath checks, before the run, that a result file can be
// written at path: not a directory, and its directory exists and accepts a
// new file (tried with a temporary file, removed at once). An empty path
// is not checked.
func checkOutputPath(path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("directory of %s: %w", path, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	tmp, err := os.CreateTemp(dir, ".sq-bench-*")
	if err != nil {
		return fmt.Errorf("directory %s is not writable: %w", dir, err)
	}
	tmp.Close()
	return os.Remove(tmp.Name())
}

// benchIOBackend asks the control plane at --control for the server's
// I/O backend; "unknown" when it cannot be reached within a few seconds.
func benchIOBackend(ctx context.Context, g *globals, cmd *cobra.Command) string {
	a, err := g.admin(cmd)
	if err != nil {
		return "unknown"
	}
	defer a.Close()
	return adminIOBackend(ctx, a)
}

// benchIOBackends returns the I/O backend of the nodes that lead the
// bench topic's partitions, each asked at its own control plane (its gRPC
// address from the metadata's brokers list): one name when they agree,
// else "node-1 uring, node-2 portable". A leader whose gRPC address is not
// listed (a server that is not clustered) is asked at --control, as
// benchIOBackend does.
func benchIOBackends(ctx context.Context, g *globals, cmd *cobra.Command, admin *sdk.Client, topic string) string {
	mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	md, err := admin.Metadata(mctx, topic)
	cancel()
	if err != nil {
		return benchIOBackend(ctx, g, cmd)
	}
	grpcOf := map[string]string{}
	for _, b := range md.Brokers {
		grpcOf[b.ID] = b.GRPCAddr
	}
	leaders := map[string]bool{}
	for _, t := range md.Topics {
		for _, pi := range t.PartitionInfos {
			if t.Name == topic && pi.Leader != "" {
				leaders[pi.Leader] = true
			}
		}
	}
	if len(leaders) == 0 {
		return benchIOBackend(ctx, g, cmd)
	}
	ids := slices.Sorted(maps.Keys(leaders))
	per := make([]string, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			if addr := grpcOf[id]; addr != "" {
				per[i] = nodeIOBackend(ctx, addr, g.tlsConf, g.sasl)
			} else {
				per[i] = benchIOBackend(ctx, g, cmd)
			}
		})
	}
	wg.Wait()
	if len(slices.Compact(slices.Sorted(slices.Values(per)))) == 1 {
		return per[0]
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id + " " + per[i]
	}
	return strings.Join(parts, ", ")
}

// adminIOBackend asks a for its node's I/O backend, waiting at most a
// few seconds; "unknown" when it does not answer.
func adminIOBackend(ctx context.Context, a *sdk.Admin) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	n, err := a.NodeInfo(ctx)
	if err != nil || n.IOBackend == "" {
		return "unknown"
	}
	return n.IOBackend
}

// nodeIOBackend asks the control plane at addr for its node's I/O
// backend (over TLS with tc, authenticated with sasl, when not nil);
// "unknown" when it does not answer within a few seconds.
func nodeIOBackend(ctx context.Context, addr string, tc *tls.Config, sasl sdk.SASLMechanism) string {
	a, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: addr, RequestTimeout: 3 * time.Second, ConnectTimeout: 3 * time.Second, TLSConfig: tc, SASL: sasl}})
	if err != nil {
		return "unknown"
	}
	defer a.Close()
	return adminIOBackend(ctx, a)
}

// runBench prepares the topic, runs the benchmark and reports it.
func runBench(cmd *cobra.Command, g *globals, f benchFlags) error {
	ctx := cmd.Context()
	addr := g.addr(cmd)
	admin, err := g.dial(cmd)
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := checkBenchRecordSize(f, admin.Limits()); err != nil {
		return err
	}
	created, err := prepareBenchTopic(ctx, admin, &f)
	if err != nil {
		return err
	}
	if created && !f.keepTopic {
		defer func() {
			// Also after Ctrl-C, bounded (a second Ctrl-C ends it).
			dctx, cancel := context.WithTimeout(context.Background(), benchDeleteTimeout)
			defer cancel()
			err := admin.DeleteTopic(dctx, f.topic)
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("no answer from %s within %v", addr, benchDeleteTimeout)
			}
			if err != nil {
				fmt.Fprintf(g.stderr, "sq bench: could not delete topic %s: %v\n", f.topic, err)
			}
		}()
	}
	cond := benchConditions(f, admin.Limits())
	cond.IOBackend = benchIOBackends(ctx, g, cmd, admin, f.topic)
	var bar, lines io.Writer
	switch {
	case f.quiet:
	case stderrIsTerminal(g):
		bar = g.stderr
	default:
		lines = g.stderr
	}
	b := newBenchRun(addr, f, bar, lines)
	b.tls = g.tlsConf
	b.sasl = g.sasl
	if b.timeout, err = g.connectTimeout(cmd); err != nil {
		return err
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := b.run(ctx)
	res.BenchConditions = cond
	printBench(g.stdout, res)
	if err != nil && !res.Interrupted {
		// A producer or consumer that could not start; the partial
		// results are out.
		return benchRunError(addr, err)
	}
	// After Ctrl-C the partial results go to --json (with
	// "interrupted": true) and --plot as well.
	if f.jsonFile != "" {
		if err := writeBenchJSON(f.jsonFile, res); err != nil {
			return err
		}
	}
	if f.plotFile != "" {
		if err := writeBenchPlot(f.plotFile, res); err != nil {
			return err
		}
	}
	if err != nil {
		return err // Ctrl-C: context.Canceled, not printed
	}
	if res.Errors > 0 {
		return benchFailure(addr, res, b.firstError(), &b.unreached)
	}
	return nil
}

// benchRunError is the error of a run that stopped early: with many
// producers or consumers, one of them that could not connect is named
// ("producer 417 of 1000 could not connect: no answer from ...") so the
// message does not read as if the server were unreachable for all.
func benchRunError(addr string, err error) error {
	var ce *benchConnectError
	if errors.As(err, &ce) && ce.of > 1 {
		return fmt.Errorf("%s %d of %d could not connect: %w", ce.who, ce.id, ce.of, connectError(addr, ce.err))
	}
	return connectError(addr, err)
}

// benchFailure is the error of a run in which records failed: how many of
// those sent were not acknowledged, and the first failure, with the
// address of what could not be reached: the partitions' leaders that
// failed records could not reach (unreached; in a cluster they need not
// be the --server node addr), else the server at addr.
func benchFailure(addr string, res *BenchResult, first error, unreached *unreachedLeaders) error {
	why := first
	if lw, ok := unreached.reason(addr, first); ok {
		why = lw
	} else if errors.Is(first, sdk.ErrConnection) {
		why = fmt.Errorf("server %s unreachable: %w", addr, first)
	}
	if res.SentRecords > res.PublishedRecords {
		return fmt.Errorf("%d of %d records not acknowledged: %w", res.SentRecords-res.PublishedRecords, res.SentRecords, why)
	}
	return fmt.Errorf("%d records failed: %w", res.Errors, why)
}

// checkBenchRecordSize refuses, before anything is created or sent, a
// --record-size whose records (value plus the longest key of --keys) are
// over the server's record limit: the run could send none of them.
func checkBenchRecordSize(f benchFlags, lim sdk.Limits) error {
	keyLen := 0
	if f.keys > 0 {
		keyLen = len(fmt.Sprintf("key-%d", f.keys-1))
	}
	maxRecord := int64(lim.MaxRecordBytes)
	if size := int64(f.recordSize) + int64(keyLen); size > maxRecord {
		keys := ""
		if keyLen > 0 {
			keys = fmt.Sprintf(" plus a key of up to %d bytes", keyLen)
		}
		return fmt.Errorf("--record-size %d%s is over the server's record limit of %d bytes (key, value and headers; sq-server --max-record-bytes): give at most --record-size %d", f.recordSize, keys, maxRecord, maxRecord-int64(keyLen))
	}
	return nil
}

// prepareBenchTopic creates the topic (a fresh name unless --topic is
// given) and reads its partition count. It reports whether it created it.
func prepareBenchTopic(ctx context.Context, c *sdk.Client, f *benchFlags) (bool, error) {
	if f.topic == "" {
		f.topic = fmt.Sprintf("sq-bench-%d", time.Now().UnixNano())
	}
	ti, err := c.CreateTopic(ctx, f.topic, uint32(f.partitions), sdk.TopicConfig{SyncPolicy: f.syncPolicy, ReplicationFactor: uint32(f.replication)})
	if err == nil {
		f.partitions = int(ti.Partitions)
		return true, nil
	}
	ti, derr := c.DescribeTopic(ctx, f.topic)
	if derr != nil {
		return false, fmt.Errorf("create topic %s: %w", f.topic, err)
	}
	f.partitions = int(ti.Partitions)
	f.syncPolicy = ti.Config.SyncPolicy
	return false, nil
}

// stderrIsTerminal reports whether stderr is a terminal: sq bench then
// draws a progress bar there, else it prints a progress line every
// progressLineEvery (neither with --quiet).
func stderrIsTerminal(g *globals) bool {
	file, ok := g.stderr.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// benchConditions describes the run's conditions.
func benchConditions(f benchFlags, lim sdk.Limits) BenchConditions {
	consumers := f.consumers
	if f.mode == "produce" {
		consumers = 0 // produce mode runs none
	}
	return BenchConditions{
		Mode:            f.mode,
		Topic:           f.topic,
		RecordSizeBytes: f.recordSize,
		BatchBytes:      min(f.batchBytes, int(lim.MaxBatchBytes)),
		LingerMs:        float64(max(f.linger, 0)) / float64(time.Millisecond), // 0 and below: none
		InFlight:        f.inFlight,
		BufferBytes:     f.bufferBytes,
		SyncPolicy:      f.syncPolicy,
		Acks:            f.acks,
		Partitions:      f.partitions,
		Producers:       f.producers,
		Consumers:       consumers,
		Keys:            f.keys,
		RateTarget:      f.rate,
		CPUs:            runtime.NumCPU(),
		GoVersion:       runtime.Version(),
		IOBackend:       "unknown",
		ServerVersion:   lim.ServerVersion,
	}
}
