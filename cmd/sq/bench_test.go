package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
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
		{"negative count", []string{"--count", "-1"}, "must not be negative"},
		{"json dir missing", []string{"--json", filepath.Join(dir, "no", "r.json")}, "--json: directory of"},
		{"plot is a directory", []string{"--plot", dir}, "--plot: " + dir + " is a directory"},
		{"count 0 means duration", []string{"--count", "0", "--duration", "1s", "--json", filepath.Join(dir, "r.json")}, ""},
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
		{"produce, no rate", BenchResult{BenchConditions: BenchConditions{Mode: "produce", Partitions: 1, Producers: 1, IOBackend: "uring"}},
			[]string{"partitions 1, producers 1, keys", "I/O backend uring", "note: no --rate"}, []string{"consumers"}},
		{"e2e at a rate", BenchResult{BenchConditions: BenchConditions{Mode: "e2e", Partitions: 2, Producers: 1, Consumers: 2, RateTarget: 1000, IOBackend: "unknown"}},
			[]string{"producers 1, consumers 2", "rate 1,000 records/s"}, []string{"note: no --rate"}},
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
	c := benchConditions(benchFlags{mode: "produce", consumers: 1}, sdk.Limits{MaxBatchBytes: 1 << 20})
	if c.Consumers != 0 {
		t.Fatalf("produce mode conditions: consumers %d, want 0", c.Consumers)
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
