package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// Under --rate the producers together send exactly ceil(rate x duration)
// records over a --duration run, however the rate divides among them.
func TestBenchScheduleIsExact(t *testing.T) {
	tests := []struct {
		rate      float64
		producers int
		d         time.Duration
	}{
		{10_000, 1, time.Second},
		{10_000, 3, time.Second},
		{20_000, 4, 500 * time.Millisecond},
		{7, 2, time.Second},
		{333.3, 1, 3 * time.Second},
		{1_000_000, 2, 100 * time.Millisecond},
	}
	for _, tc := range tests {
		var sent int64
		for id := range tc.producers {
			s := benchSchedule{rate: tc.rate, producers: tc.producers, id: id}
			for i := int64(0); s.at(i) < tc.d; i++ {
				sent++
			}
		}
		if want := int64(math.Ceil(tc.rate * tc.d.Seconds())); sent != want {
			t.Errorf("rate %g, %d producers, %v: %d records scheduled, want %d", tc.rate, tc.producers, tc.d, sent, want)
		}
	}
}

// Bad flags, output paths included, fail before the run: the server
// address is unreachable, so any attempt to run would fail differently.
func TestBenchFlagsCheckedBeforeTheRun(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string // in the error; "" means the flags are valid
	}{
		{"negative count", []string{"--count", "-1"}, "--count must not be negative, got -1"},
		{"negative rate", []string{"--rate", "-0.5"}, "--rate must not be negative, got -0.5"},
		{"negative record size", []string{"--record-size", "-3"}, "--record-size must not be negative, got -3"},
		{"json dir missing", []string{"--json", filepath.Join(dir, "no", "r.json")}, "--json: directory of"},
		{"plot is a directory", []string{"--plot", dir}, "--plot: " + dir + " is a directory"},
		{"count 0 means duration", []string{"--count", "0", "--duration", "1s", "--json", filepath.Join(dir, "r.json")}, ""},
		{"plot as SVG", []string{"--plot", filepath.Join(dir, "r.svg")}, "--plot " + filepath.Join(dir, "r.svg") + ": sq bench draws PNG images only; give a file name ending in .png"},
		{"plot without extension", []string{"--plot", filepath.Join(dir, "r")}, "PNG images only"},
		{"plot as PDF", []string{"--plot", filepath.Join(dir, "r.pdf")}, "ending in .png"},
		{"plot in capitals", []string{"--plot", filepath.Join(dir, "R.PNG")}, ""},
		{"acks unknown", []string{"--acks", "1"}, `--acks "1": want all or leader`},
		{"acks leader", []string{"--acks", "leader"}, ""},
		{"negative replication factor", []string{"--replication-factor", "-1"}, "--replication-factor must not be negative, got -1"},
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, struct {
			name string
			args []string
			want string
		}{"json dir read-only", []string{"--json", filepath.Join(ro, "r.json")}, "not writable"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			root := newRootCommand(nil, &stdout, &stderr, func(string) string { return "" })
			root.SetArgs(append([]string{"--server", "127.0.0.1:1", "--control", "127.0.0.1:1", "bench", "produce", "--quiet"}, tc.args...))
			err := root.ExecuteContext(context.Background())
			if err == nil {
				t.Fatal("no error against an unreachable server")
			}
			if tc.want == "" {
				if !strings.Contains(err.Error(), "127.0.0.1:1") {
					t.Fatalf("valid flags: error %v, want the connection error", err)
				}
				return
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) > 2 {
				t.Fatalf("files left behind: %v", entries)
			}
		})
	}
}

func TestPrintBenchConditions(t *testing.T) {
	tests := []struct {
		name    string
		r       BenchResult
		want    []string
		wantNot []string
	}{
		{"produce, no rate", BenchResult{BenchConditions: BenchConditions{Mode: "produce", Partitions: 1, Producers: 1, IOBackend: "uring", SyncPolicy: "every-batch", Acks: "leader"},
			PublishRecordsPerSec: 123_456, AckLatencyMs: &LatencySummary{Count: 1}},
			[]string{"partitions 1, producers 1, keys", "I/O backend uring", "sync policy every-batch, acks leader,",
				"\nlatency: measured with unbounded in-flight batches", "includes the time records queue", "(for example --rate 62000)"},
			[]string{"consumers", "consumed", "interrupted", "not acknowledged"}},
		{"e2e at a rate", BenchResult{BenchConditions: BenchConditions{Mode: "e2e", Partitions: 2, Producers: 1, Consumers: 2, RateTarget: 1000, IOBackend: "unknown"},
			AckLatencyMs: &LatencySummary{Count: 1}},
			[]string{"producers 1, consumers 2", "rate 1,000 records/s"}, []string{"unbounded in-flight"}},
		{"interrupted", BenchResult{BenchConditions: BenchConditions{Mode: "produce", Partitions: 1, Producers: 1},
			Interrupted: true, SentRecords: 5000, PublishedRecords: 3766, PublishSeconds: 2.5},
			[]string{"interrupted after 2.50s: partial results", "1,234 of 5,000 records sent not acknowledged", "3,766 records in 2.50s"},
			[]string{"consumed"}},
		{"consume, read phase not run", BenchResult{BenchConditions: BenchConditions{Mode: "consume", Partitions: 1, Producers: 1, Consumers: 1},
			SentRecords: 5000, PublishedRecords: 3766, PublishSeconds: 2.5},
			[]string{"consume  not run (the publish phase did not complete)", "consumers 1"},
			[]string{"records in 0.00s"}},
		{"consume, read phase run", BenchResult{BenchConditions: BenchConditions{Mode: "consume", Partitions: 1, Producers: 1, Consumers: 1},
			PublishedRecords: 100, PublishSeconds: 0.5, ConsumedRecords: 100, ConsumeSeconds: 0.25, ConsumeRecordsPerSec: 400},
			[]string{"consume           100 records in 0.25s: 400 records/s"}, []string{"not run"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printBench(&b, &tc.r)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("report lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(b.String(), w) {
					t.Errorf("report has %q:\n%s", w, b.String())
				}
			}
		})
	}
}

func TestBenchConditionsProduceHasNoConsumers(t *testing.T) {
	c := benchConditions(benchFlags{mode: "produce", consumers: 1, acks: "all"}, sdk.Limits{MaxBatchBytes: 1 << 20})
	if c.Consumers != 0 {
		t.Fatalf("produce mode conditions: consumers %d, want 0", c.Consumers)
	}
	if c.Acks != "all" {
		t.Fatalf("conditions acks %q, want all", c.Acks)
	}
}

// The throughput plot scales each interval by its real length and leaves
// out the final, partial tail sample.
func TestThroughputPoints(t *testing.T) {
	samples := []BenchSample{{Second: 0.25, Produced: 250}, {Second: 0.5, Produced: 250}, {Second: 0.55, Produced: 3}}
	prod, _ := throughputPoints(samples)
	if len(prod) != 2 || prod[0].Y != 1000 || prod[1].Y != 1000 {
		t.Fatalf("points %v, want two at 1000 records/s", prod)
	}
	if prod, _ := throughputPoints(samples[2:]); len(prod) != 1 {
		t.Fatalf("a run of one sample draws %v", prod)
	}
	p, err := throughputPlot(&BenchResult{BenchConditions: BenchConditions{Mode: "produce", Partitions: 1}, Throughput: samples})
	if err != nil || !strings.HasSuffix(p.Title.Text, "1 partition)") {
		t.Fatalf("title %q %v", p.Title.Text, err)
	}
}

// Without a terminal, sq bench prints progress lines; in produce mode
// they never mention consumers.
func TestBenchProgressLines(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		want    []string
		wantNot string
	}{
		{"produce", []string{"sq bench produce: 4.0s: acked 812,000 (203,000 records/s)"}, "consumed"},
		{"e2e", []string{"sq bench e2e: 4.0s: acked 812,000, consumed 800,000 (203,000 records/s)"}, "failed"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var lines bytes.Buffer
			b := newBenchRun("127.0.0.1:1", benchFlags{mode: tc.mode}, nil, &lines)
			b.consumed.Store(800_000)
			b.printProgressLine(4*time.Second, 812_000, 203_000)
			for _, w := range tc.want {
				if !strings.Contains(lines.String(), w) {
					t.Errorf("progress line %q lacks %q", lines.String(), w)
				}
			}
			if strings.Contains(lines.String(), tc.wantNot) {
				t.Errorf("progress line %q has %q", lines.String(), tc.wantNot)
			}
			b.errs.Store(3)
			if got := b.progressText(1, 0); !strings.Contains(got, "failed 3") {
				t.Errorf("progress text %q lacks the failures", got)
			}
		})
	}
}

// The sampler prints a line every progressLineEvery while the run goes on
// (polled: the test waits for the lines, it never times them).
func TestBenchSamplerPrintsProgressLines(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(p)
	})
	b := newBenchRun("127.0.0.1:1", benchFlags{mode: "produce", duration: time.Minute}, nil, w)
	b.produced.Store(42)
	stop := b.startSampler(context.Background())
	defer stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := out.String()
		mu.Unlock()
		if strings.Count(got, "\n") >= 2 {
			if !strings.HasPrefix(got, "sq bench produce: ") || !strings.Contains(got, "acked 42") || strings.Contains(got, "consumed") {
				t.Fatalf("progress lines:\n%s", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two progress lines within 30s:\n%s", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writerFunc adapts a func to io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestBenchFailureMessage(t *testing.T) {
	conn := fmt.Errorf("%w: 127.0.0.1:6064: dial tcp: connection refused", sdk.ErrConnection)
	err := benchFailure("127.0.0.1:6064", &BenchResult{SentRecords: 20000, PublishedRecords: 18766, Errors: 1234}, conn, &unreachedLeaders{})
	want := "1234 of 20000 records not acknowledged: server 127.0.0.1:6064 unreachable: "
	if !strings.HasPrefix(err.Error(), want) || !errors.Is(err, sdk.ErrConnection) {
		t.Fatalf("error %q, want prefix %q wrapping ErrConnection", err, want)
	}
	err = benchFailure("a:1", &BenchResult{Errors: 2}, errors.New("DISK_FULL: no space"), &unreachedLeaders{})
	if err.Error() != "2 records failed: DISK_FULL: no space" {
		t.Fatalf("error %q", err)
	}
}

// TestBenchFailureNamesLeaders: records that failed because their
// partition's leader could not be reached (the SDK's BatchError wrapping
// a LeaderConnectionError, as the bench's producers get them) name that
// leader, or those leaders with their partitions, not the --server node
// that was up; when the only such leader is the --server node, the
// server is named as before.
func TestBenchFailureNamesLeaders(t *testing.T) {
	const server = "127.0.0.1:6084"
	lost := func(p uint32, leader string) error {
		cause := fmt.Errorf("%w: %s: dial tcp: connection refused", sdk.ErrConnection, leader)
		return sdk.BatchError{Topic: "orders", Partition: p, Messages: make([]sdk.ProducerMessage, 3),
			Err: &sdk.LeaderConnectionError{Topic: "orders", Partition: p, Leader: leader, Err: cause}}
	}
	for _, tc := range []struct {
		name  string
		fails []error
		want  string
	}{
		{"one leader", []error{lost(0, "127.0.0.1:6074"), lost(0, "127.0.0.1:6074")},
			"6 of 10 records not acknowledged: the leader of orders partition 0, 127.0.0.1:6074, could not be reached: "},
		{"one leader of two partitions", []error{lost(2, "127.0.0.1:6074"), lost(0, "127.0.0.1:6074")},
			"6 of 10 records not acknowledged: the leader of orders partitions 0,2, 127.0.0.1:6074, could not be reached: "},
		{"two leaders", []error{lost(1, "127.0.0.1:6064"), lost(2, "127.0.0.1:6074"), lost(0, "127.0.0.1:6074")},
			"9 of 10 records not acknowledged: the leaders of orders partitions 1 (127.0.0.1:6064) and 0,2 (127.0.0.1:6074) could not be reached: "},
		{"the server itself", []error{lost(0, server)},
			"3 of 10 records not acknowledged: server " + server + " unreachable: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBenchRun(server, benchFlags{}, nil, nil)
			for _, e := range tc.fails {
				b.fail(3, e)
			}
			res := &BenchResult{SentRecords: 10, PublishedRecords: 10 - 3*int64(len(tc.fails)), Errors: b.errs.Load()}
			err := benchFailure(server, res, b.firstError(), &b.unreached)
			if !strings.HasPrefix(err.Error(), tc.want) || !errors.Is(err, sdk.ErrConnection) {
				t.Fatalf("error %q, want prefix %q wrapping ErrConnection", err, tc.want)
			}
			if tc.name != "the server itself" && (strings.Contains(err.Error(), "server "+server) || !strings.HasSuffix(err.Error(), "could not be reached: sdk: connection failed: 127.0.0.1:6064: dial tcp: connection refused") && !strings.HasSuffix(err.Error(), "could not be reached: sdk: connection failed: 127.0.0.1:6074: dial tcp: connection refused")) {
				t.Fatalf("error %q blames the --server node or does not end with the first failure's cause", err)
			}
			var lce *sdk.LeaderConnectionError
			if !errors.As(err, &lce) {
				t.Fatalf("error %q does not unwrap to the LeaderConnectionError", err)
			}
		})
	}
}

// The JSON result of a produce run says nothing about consumers.
func TestBenchJSONProduceHasNoConsumed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	r := &BenchResult{BenchConditions: BenchConditions{Mode: "produce"}, PublishedRecords: 10, SentRecords: 10,
		Throughput: []BenchSample{{Second: 0.25, Produced: 5}, {Second: 0.5, Produced: 5}}}
	if err := writeBenchJSON(path, r); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "consum") {
		t.Fatalf("produce-mode JSON mentions consumers:\n%s", data)
	}
}

// A --record-size the server cannot store is refused before the run:
// before, sq bench created its topic and failed at the first record, or
// ran out of memory allocating a value of 100 GB.
func TestBenchRecordSizeCheckedAgainstServerLimit(t *testing.T) {
	lim := sdk.Limits{MaxRecordBytes: 1 << 20}
	for _, tc := range []struct {
		size, keys int
		want       string // "" for accepted
	}{
		{0, 0, ""},
		{1 << 20, 0, ""},
		{1<<20 - 6, 20, ""}, // "key-19" is 6 bytes
		{1<<20 + 1, 0, "--record-size 1048577 is over the server's record limit of 1048576 bytes"},
		{1 << 20, 20, "--record-size 1048576 plus a key of up to 6 bytes is over the server's record limit of 1048576 bytes (key, value and headers; sq-server --max-record-bytes): give at most --record-size 1048570"},
		{99_999_999_999, 0, "give at most --record-size 1048576"},
	} {
		err := checkBenchRecordSize(benchFlags{recordSize: tc.size, keys: tc.keys}, lim)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("--record-size %d --keys %d: %v, want accepted", tc.size, tc.keys, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("--record-size %d --keys %d: %v, want %q", tc.size, tc.keys, err, tc.want)
		}
	}
}

// With many producers, the one that could not connect is named; with one,
// the message is the connection error as for any command.
func TestBenchRunErrorNamesTheWorker(t *testing.T) {
	conn := fmt.Errorf("%w: 127.0.0.1:6064: dial tcp: connection refused", sdk.ErrConnection)
	err := benchRunError("127.0.0.1:6064", &benchConnectError{who: "producer", id: 417, of: 1000, err: conn})
	if want := "producer 417 of 1000 could not connect: cannot reach the SQ server at 127.0.0.1:6064"; !strings.HasPrefix(err.Error(), want) || !errors.Is(err, sdk.ErrConnection) {
		t.Fatalf("error %q, want it to start %q and wrap sdk.ErrConnection", err, want)
	}
	err = benchRunError("127.0.0.1:6064", &benchConnectError{who: "producer", id: 0, of: 1, err: conn})
	if want := "cannot reach the SQ server at 127.0.0.1:6064"; !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %q, want it to start %q", err, want)
	}
	if err := benchRunError("a:1", context.Canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ctrl-C: %v, want context.Canceled", err)
	}
}

// A negative --linger sends at once, as 0 does: the conditions say 0 ms,
// not a negative linger.
func TestBenchConditionsNegativeLingerIsNone(t *testing.T) {
	for _, l := range []time.Duration{-time.Second, 0} {
		if c := benchConditions(benchFlags{mode: "produce", linger: l}, sdk.Limits{}); c.LingerMs != 0 {
			t.Errorf("--linger %v: conditions linger %v ms, want 0", l, c.LingerMs)
		}
	}
	if c := benchConditions(benchFlags{mode: "produce", linger: 5 * time.Millisecond}, sdk.Limits{}); c.LingerMs != 5 {
		t.Errorf("--linger 5ms: conditions linger %v ms", c.LingerMs)
	}
}
