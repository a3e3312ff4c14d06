package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchSmoke runs a tiny `sq bench` in each mode against a real server
// and checks only that it completes and reports non-zero figures.
func TestBenchSmoke(t *testing.T) {
	srv := startServer(t, t.TempDir())
	help := sqOK(t, srv.addr, nil, "bench", "--help")
	for _, flag := range []string{"--producers", "--consumers", "--topic", "--partitions", "--record-size", "--keys",
		"--batch-bytes", "--linger", "--in-flight", "--sync-policy", "--duration", "--count", "--rate", "--json", "--plot", "--quiet"} {
		if !strings.Contains(help, flag) {
			t.Errorf("sq bench --help does not document %s", flag)
		}
	}
	grpcAddr, _ := controlAddrs(t, srv)
	tests := []struct {
		mode  string
		extra []string
	}{
		{"e2e", []string{"--partitions", "2", "--keys", "4"}},
		{"produce", []string{"--rate", "20000", "--linger", "0", "--control", grpcAddr}},
		{"consume", []string{"--consumers", "2", "--partitions", "2", "--sync-policy", "none"}},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			jsonFile, plotFile := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.png")
			args := append([]string{"bench", tc.mode, "--count", "2000", "--quiet", "--json", jsonFile, "--plot", plotFile}, tc.extra...)
			out := sqOK(t, srv.addr, nil, args...)
			if !strings.Contains(out, "records/s") || !strings.Contains(out, "conditions:") {
				t.Fatalf("report lacks figures or conditions:\n%s", out)
			}
			data, err := os.ReadFile(jsonFile)
			if err != nil {
				t.Fatal(err)
			}
			var res struct {
				RecordsPerSec float64 `json:"records_per_sec"`
				MBPerSec      float64 `json:"mb_per_sec"`
				Published     int64   `json:"published_records"`
				Errors        int64   `json:"errors"`
				SyncPolicy    string  `json:"sync_policy"`
				Consumed      int64   `json:"consumed_records"`
				ConsumeRate   float64 `json:"consume_records_per_sec"`
				CPUs          int     `json:"cpus"`
				IOBackend     string  `json:"io_backend"`
				Ack           *struct {
					P50, P99, Max float64
				} `json:"ack_latency_ms"`
			}
			if err := json.Unmarshal(data, &res); err != nil {
				t.Fatalf("--json output: %v\n%s", err, data)
			}
			if res.RecordsPerSec <= 0 || res.MBPerSec <= 0 || res.Published != 2000 || res.Errors != 0 ||
				res.Ack == nil || res.Ack.Max <= 0 || res.SyncPolicy == "" || res.CPUs <= 0 {
				t.Fatalf("--json result lacks figures:\n%s", data)
			}
			if tc.mode == "produce" && (res.IOBackend == "" || res.IOBackend == "unknown" || strings.Contains(out, "consumers")) {
				t.Fatalf("produce with --control: I/O backend %q (want the server's), report:\n%s", res.IOBackend, out)
			}
			if tc.mode != "produce" && (res.Consumed != 2000 || res.ConsumeRate <= 0) {
				t.Fatalf("--json result lacks consume figures:\n%s", data)
			}
			if st, err := os.Stat(plotFile); err != nil || st.Size() == 0 {
				t.Fatalf("--plot file: %v", err)
			}
		})
	}
	// --rate over --duration sends exactly rate x duration records.
	t.Run("rate over a duration", func(t *testing.T) {
		jsonFile := filepath.Join(t.TempDir(), "r.json")
		sqOK(t, srv.addr, nil, "bench", "produce", "--rate", "4000", "--duration", "500ms", "--quiet", "--json", jsonFile)
		data, err := os.ReadFile(jsonFile)
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Published int64 `json:"published_records"`
		}
		if err := json.Unmarshal(data, &res); err != nil || res.Published != 2000 {
			t.Fatalf("published %d records at 4000/s for 500ms, want 2000 (%v)", res.Published, err)
		}
	})
}

// TestBenchReadsWell runs the real `sq bench` with its output going to a
// pipe, as in CI or `| tee`: the default run's latency footer says what
// was measured and points to --rate, produce mode says nothing about
// consumers, and --plot refuses an extension it does not write before
// anything is sent.
func TestBenchReadsWell(t *testing.T) {
	srv := startServer(t, t.TempDir())
	r := runSQ(t, srv.addr, nil, "bench", "produce", "--count", "3000")
	if r.code != 0 {
		t.Fatalf("sq bench produce: exit %d\n%s", r.code, r.stderr)
	}
	all := r.stdout + r.stderr
	if !strings.Contains(all, "unbounded in-flight") || !strings.Contains(all, "--rate") {
		t.Errorf("the latency footer does not say what was measured or suggest --rate:\n%s", all)
	}
	if strings.Contains(all, "consumed") {
		t.Errorf("produce mode reports consumers:\n%s", all)
	}
	// A paced run measures latency at a fixed load: no such footer.
	r = runSQ(t, srv.addr, nil, "bench", "produce", "--count", "1000", "--rate", "20000")
	if r.code != 0 || strings.Contains(r.stdout+r.stderr, "unbounded in-flight") {
		t.Errorf("sq bench --rate: exit %d, output:\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, name := range []string{"r.svg", "r.PDF", "r"} {
		msg := sqFails(t, srv.addr, nil, "bench", "produce", "--count", "10", "--plot", filepath.Join(t.TempDir(), name))
		if !strings.Contains(msg, ".png") {
			t.Errorf("--plot %s: %q does not say which extension is written", name, msg)
		}
	}
	if topics := sqOK(t, srv.addr, nil, "topic", "list"); strings.Contains(topics, "sq-bench") {
		t.Errorf("a refused --plot left a bench topic behind:\n%s", topics)
	}
}
