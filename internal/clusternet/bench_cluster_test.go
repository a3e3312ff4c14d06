package clusternet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/clusternet"
)

// TestBenchCluster is `make bench-cluster` (docs/performance.md,
// "Replicated cluster"): the real `sq bench produce` CLI, run in the client
// namespace, against a single node (RF 1, acks leader) and against a
// 3-node cluster (RF 3, acks all, min.insync.replicas 2 by default), every
// node a real sq-server in its own namespace with the same flags, topic
// sync policy every-batch, same record and batch size. The two
// configurations alternate round by round (SQ_BENCH_RUNS rounds, default
// 5; SQ_BENCH_DURATION each, default 8s; batches of SQ_BENCH_BATCH_BYTES,
// default 1 MiB, as sq bench's), so both see the same load of
// the machine. It prints every run and then, per configuration, the
// median, min and max, with the 1-minute load average before and after
// each run. With SQ_BENCH_PROFILE=DIR it then makes one more,
// unmeasured, run of each configuration while it takes a CPU profile of
// every server (and of sq bench, its --cpuprofile), writes them to DIR
// with the sq-server binary they need, and prints the top functions.
//
// The servers are built with one extra file (go build -overlay) that
// serves net/http/pprof on port benchPprofPort when the environment sets
// SQBENCH_PPROF_ADDR; sq-server has no profiling endpoint of its own.
//
// It runs only with SQ_BENCH_CLUSTER=1 (it is a benchmark, not a test, and
// takes about two minutes) and needs what every harness test needs (root,
// ip, nft).
func TestBenchCluster(t *testing.T) {
	if os.Getenv("SQ_BENCH_CLUSTER") != "1" {
		t.Skip("a benchmark: set SQ_BENCH_CLUSTER=1 (make bench-cluster)")
	}
	clusternet.Require(t)
	cfg := benchConfigFromEnv(t)
	b := buildBenchBins(t)
	// Read by the overlay's init in every server started below (the
	// harness passes the environment on without its SQ_* variables).
	t.Setenv("SQBENCH_PPROF_ADDR", ":"+strconv.Itoa(benchPprofPort))

	single := clusternet.New(t, clusternet.Config{Nodes: 1, ServerBin: b.server})
	three := clusternet.New(t, clusternet.Config{Nodes: 3, ServerBin: b.server})
	b.startNodes(t, single)
	b.startNodes(t, three)

	setups := []benchSetup{
		{name: "1 node, RF 1, acks leader", c: single, acks: "leader", rf: 1},
		{name: "3 nodes, RF 3, acks all", c: three, acks: "all", rf: 3},
	}
	runs := make([][]benchRun, len(setups))
	fmt.Printf("sq bench produce, %v per run, record %d B, batch %d B, 1 partition, 1 producer, sync every-batch\n\n",
		cfg.duration, benchRecordSize, cfg.batchBytes)
	fmt.Println("| round | configuration | records/s | MB/s | ack p50 ms | ack p99 ms | servers CPU s | sq bench CPU s | load before | load after |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for round := 1; round <= cfg.runs; round++ {
		order := []int{0, 1}
		if round%2 == 0 {
			order = []int{1, 0} // alternate which goes first
		}
		for _, i := range order {
			r := b.run(t, setups[i], fmt.Sprintf("bench-r%d-s%d", round, i), cfg)
			runs[i] = append(runs[i], r)
			fmt.Printf("| %d | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s |\n", round, setups[i].name,
				r.res.RecordsPerSec, r.res.MBPerSec, r.res.AckLatencyMs.P50, r.res.AckLatencyMs.P99,
				r.serverCPU.Seconds(), r.clientCPU.Seconds(), r.loadBefore, r.loadAfter)
		}
	}

	fmt.Printf("\nmedian of %d (min to max), each column's own median; ratio = median records/s / the single node's\n\n", cfg.runs)
	fmt.Println("| configuration | records/s | min | max | MB/s | ack p50 ms | ack p99 ms | servers CPU s | sq bench CPU s | load (1 min) before each run | load after each run | ratio |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	base := 0.0
	for i, s := range setups {
		rs := runs[i]
		rate := median(rs, func(r benchRun) float64 { return r.res.RecordsPerSec })
		if i == 0 {
			base = rate
		}
		fmt.Printf("| %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s | %.2f |\n", s.name, rate,
			minOf(rs, func(r benchRun) float64 { return r.res.RecordsPerSec }),
			maxOf(rs, func(r benchRun) float64 { return r.res.RecordsPerSec }),
			median(rs, func(r benchRun) float64 { return r.res.MBPerSec }),
			median(rs, func(r benchRun) float64 { return r.res.AckLatencyMs.P50 }),
			median(rs, func(r benchRun) float64 { return r.res.AckLatencyMs.P99 }),
			median(rs, func(r benchRun) float64 { return r.serverCPU.Seconds() }),
			median(rs, func(r benchRun) float64 { return r.clientCPU.Seconds() }),
			joinLoads(rs, func(r benchRun) string { return r.loadBefore }),
			joinLoads(rs, func(r benchRun) string { return r.loadAfter }),
			rate/base)
	}

	if cfg.profileDir != "" {
		for i, s := range setups {
			b.profile(t, s, fmt.Sprintf("bench-prof-s%d", i), cfg)
		}
	}
}

// Conditions of every run of TestBenchCluster.
const (
	benchRecordSize  = 100     // bytes of each record's value
	benchBufferBytes = 8 << 20 // producer buffer, as make bench-peers uses
	benchPprofPort   = 6070    // net/http/pprof of the servers built for the benchmark
	benchRunTimeout  = 2 * time.Minute
)

// benchConfig is what the environment sets for TestBenchCluster.
type benchConfig struct {
	runs       int           // SQ_BENCH_RUNS, rounds of both configurations
	batchBytes int           // SQ_BENCH_BATCH_BYTES, the producer's batch bound
	duration   time.Duration // SQ_BENCH_DURATION, publish time per run
	profileDir string        // SQ_BENCH_PROFILE, where profiles go ("" none)
}

func benchConfigFromEnv(t *testing.T) benchConfig {
	t.Helper()
	c := benchConfig{runs: 5, duration: 8 * time.Second, batchBytes: 1 << 20, profileDir: os.Getenv("SQ_BENCH_PROFILE")}
	if v := os.Getenv("SQ_BENCH_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SQ_BENCH_RUNS=%q: want a count of at least 1", v)
		}
		c.runs = n
	}
	if v := os.Getenv("SQ_BENCH_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			t.Fatalf("SQ_BENCH_DURATION=%q: want a Go duration of at least 1s", v)
		}
		c.duration = d
	}
	if v := os.Getenv("SQ_BENCH_BATCH_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SQ_BENCH_BATCH_BYTES=%q: want a byte count of at least 1", v)
		}
		c.batchBytes = n
	}
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			t.Fatalf("SQ_BENCH_PROFILE: %v", err)
		}
	}
	return c
}

// benchBins are the binaries of TestBenchCluster.
type benchBins struct {
	dir         string
	server, cli string
	goBin       string
}

// benchPprofFile is added to package main of cmd/sq-server by the
// benchmark's build (go build -overlay): it serves net/http/pprof at
// $SQBENCH_PPROF_ADDR when that is set.
const benchPprofFile = `package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if addr := os.Getenv("SQBENCH_PPROF_ADDR"); addr != "" {
		go http.ListenAndServe(addr, nil)
	}
}
`

// buildBenchBins builds sq (as it is) and sq-server (with benchPprofFile)
// into a temporary directory.
func buildBenchBins(t *testing.T) benchBins {
	t.Helper()
	b := benchBins{dir: t.TempDir()}
	var err error
	if b.goBin, err = exec.LookPath("go"); err != nil {
		b.goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out, err := exec.Command(b.goBin, "list", "-f", "{{.Dir}}", "github.com/seedqueue/sq/cmd/sq-server").Output()
	if err != nil {
		t.Fatalf("go list cmd/sq-server: %v", err)
	}
	pprofSrc := filepath.Join(b.dir, "pprof.go")
	if err := os.WriteFile(pprofSrc, []byte(benchPprofFile), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(strings.TrimSpace(string(out)), "zz_bench_pprof.go"): pprofSrc,
	}})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(b.dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	b.server, b.cli = filepath.Join(b.dir, "sq-server"), filepath.Join(b.dir, "sq")
	for _, c := range [][]string{
		{"build", "-overlay", overlayFile, "-o", b.server, "github.com/seedqueue/sq/cmd/sq-server"},
		{"build", "-o", b.cli, "github.com/seedqueue/sq/cmd/sq"},
	} {
		if out, err := exec.Command(b.goBin, c...).CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", c, err, out)
		}
	}
	return b
}

// sq runs the CLI in ns against node n (data and control plane) and
// returns its stdout and the CPU time it used; a non-zero exit is an
// error carrying its stderr.
func (b benchBins) sq(ctx context.Context, ns *clusternet.Namespace, n *clusternet.Node, args ...string) (string, time.Duration, error) {
	all := append([]string{"--server", n.Addr, "--control", grpcAddr(n)}, args...)
	cmd := ns.Command(ctx, b.cli, all...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var cpu time.Duration
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		return stdout.String(), cpu, fmt.Errorf("sq %s in %s: %v; stderr:\n%s", strings.Join(args, " "), ns.Name, err, stderr.String())
	}
	return stdout.String(), cpu, nil
}

// startNodes starts every node of c with the harness's arguments (node 1
// the seed of the others) and waits until node 1 lists them all alive
// with one controller.
func (b benchBins) startNodes(t *testing.T, c *clusternet.Cluster) {
	t.Helper()
	seed := grpcAddr(c.Node(1))
	for _, n := range c.Nodes() {
		args := n.ServerArgs()
		if n.Index > 1 {
			args = append(args, "--seeds", seed)
		}
		n.Start(args...)
	}
	want := len(c.Nodes())
	eventually(t, fmt.Sprintf("%d members alive", want), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		defer cancel()
		out, _, err := b.sq(ctx, c.Client(), c.Node(1), "cluster", "members", "--format", "json")
		if err != nil {
			return err
		}
		var ms []member
		if err := json.Unmarshal([]byte(out), &ms); err != nil {
			var wrapped struct {
				Members []member `json:"members"`
			}
			if err2 := json.Unmarshal([]byte(out), &wrapped); err2 != nil {
				return fmt.Errorf("members output %q: %v", out, err)
			}
			ms = wrapped.Members
		}
		alive, controllers := 0, 0
		for _, m := range ms {
			if m.State == "alive" {
				alive++
			}
			if m.Controller {
				controllers++
			}
		}
		if alive != want || controllers != 1 {
			return fmt.Errorf("members %+v: want %d alive and one controller", ms, want)
		}
		return nil
	})
}

// benchSetup is one configuration measured.
type benchSetup struct {
	name string
	c    *clusternet.Cluster
	acks string
	rf   int
}

// benchRun is one run of sq bench.
type benchRun struct {
	res                   benchResult
	serverCPU, clientCPU  time.Duration // user+system time of every server, and of sq bench
	loadBefore, loadAfter string        // 1-minute load average of the machine
}

// benchResult is the part of `sq bench --json` read here.
type benchResult struct {
	RecordsPerSec    float64 `json:"records_per_sec"`
	MBPerSec         float64 `json:"mb_per_sec"`
	PublishedRecords int64   `json:"published_records"`
	SentRecords      int64   `json:"sent_records"`
	Errors           int64   `json:"errors"`
	FirstError       string  `json:"first_error"`
	Acks             string  `json:"acks"`
	SyncPolicy       string  `json:"sync_policy"`
	AckLatencyMs     *struct {
		P50 float64 `json:"p50"`
		P99 float64 `json:"p99"`
	} `json:"ack_latency_ms"`
}

// benchArgs are the sq bench arguments of setup s on topic.
func benchArgs(s benchSetup, topic string, cfg benchConfig, jsonFile string) []string {
	return []string{"bench", "produce", "--quiet", "--topic", topic, "--duration", cfg.duration.String(),
		"--record-size", strconv.Itoa(benchRecordSize), "--batch-bytes", strconv.Itoa(cfg.batchBytes),
		"--buffer-bytes", strconv.Itoa(benchBufferBytes), "--partitions", "1", "--producers", "1",
		"--sync-policy", "every-batch", "--acks", s.acks, "--replication-factor", strconv.Itoa(s.rf),
		"--json", jsonFile}
}

// run runs sq bench once for setup s on a new topic (which sq bench
// creates and deletes) and fails the test unless every record sent was
// acknowledged. extra is appended to the arguments.
func (b benchBins) run(t *testing.T, s benchSetup, topic string, cfg benchConfig, extra ...string) benchRun {
	t.Helper()
	jsonFile := filepath.Join(t.TempDir(), "result.json")
	args := append(benchArgs(s, topic, cfg, jsonFile), extra...)
	r := benchRun{loadBefore: loadAvg(t)}
	cpu0 := serversCPU(t, s.c)
	ctx, cancel := context.WithTimeout(context.Background(), benchRunTimeout)
	defer cancel()
	_, clientCPU, err := b.sq(ctx, s.c.Client(), s.c.Node(1), args...)
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	r.serverCPU, r.clientCPU = serversCPU(t, s.c)-cpu0, clientCPU
	r.loadAfter = loadAvg(t)
	data, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatalf("%s: result of sq bench: %v", s.name, err)
	}
	if err := json.Unmarshal(data, &r.res); err != nil {
		t.Fatalf("%s: result of sq bench %q: %v", s.name, data, err)
	}
	switch {
	case r.res.Errors != 0 || r.res.PublishedRecords == 0 || r.res.PublishedRecords != r.res.SentRecords:
		t.Fatalf("%s: %d of %d records acknowledged, %d errors (first: %s)", s.name, r.res.PublishedRecords, r.res.SentRecords, r.res.Errors, r.res.FirstError)
	case r.res.Acks != s.acks || r.res.SyncPolicy != "every-batch" || r.res.AckLatencyMs == nil:
		t.Fatalf("%s: sq bench reports acks %q, sync policy %q, ack latency %v", s.name, r.res.Acks, r.res.SyncPolicy, r.res.AckLatencyMs)
	}
	return r
}

// profile makes one unmeasured run of setup s on a topic it creates
// first, so that it knows the partition's leader, while it takes a CPU
// profile of every server of the setup and of sq bench; it writes them to
// the profile directory (with the sq-server binary) and prints the top
// functions of each.
func (b benchBins) profile(t *testing.T, s benchSetup, topic string, cfg benchConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchRunTimeout)
	defer cancel()
	n1 := s.c.Node(1)
	if _, _, err := b.sq(ctx, s.c.Client(), n1, "topic", "create", topic, "--partitions", "1",
		"--replication-factor", strconv.Itoa(s.rf), "--sync-policy", "every-batch"); err != nil {
		t.Fatal(err)
	}
	var leader string
	eventually(t, "a leader of "+topic, func() error {
		out, _, err := b.sq(ctx, s.c.Client(), n1, "topic", "describe", topic, "--format", "json")
		if err != nil {
			return err
		}
		var d struct {
			Partitions []partitionRow `json:"partitions"`
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			return fmt.Errorf("describe output %q: %v", out, err)
		}
		if len(d.Partitions) != 1 || d.Partitions[0].Leader == "" || len(d.Partitions[0].Replicas) != s.rf {
			return fmt.Errorf("partitions %+v", d.Partitions)
		}
		leader = d.Partitions[0].Leader
		return nil
	})
	if err := copyFile(b.server, filepath.Join(cfg.profileDir, "sq-server")); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("rf%d", s.rf)
	clientProf := filepath.Join(cfg.profileDir, tag+"-sq-bench.pprof")
	secs := max(1, int(cfg.duration/time.Second))
	var wg sync.WaitGroup
	files := make([]string, len(s.c.Nodes()))
	errs := make([]error, len(s.c.Nodes()))
	for i, n := range s.c.Nodes() {
		role := "follower"
		if "node-"+strconv.Itoa(n.Index) == leader {
			role = "leader"
		}
		files[i] = filepath.Join(cfg.profileDir, fmt.Sprintf("%s-node%d-%s.pprof", tag, n.Index, role))
		wg.Go(func() { errs[i] = fetchProfile(ctx, s.c.Client(), n.IP, secs, files[i]) })
	}
	before := make([]map[string]float64, len(s.c.Nodes()))
	for i, n := range s.c.Nodes() {
		before[i] = scrapeMetrics(ctx, t, s.c.Client(), n)
	}
	r := b.run(t, s, topic, cfg, "--cpuprofile", clientProf)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("\nserver metrics over the profiled run, %s (means of the run)\n\n", s.name)
	fmt.Println("| node | fdatasyncs | mean fdatasync ms | batches per fdatasync | publishes | mean publish ms (arrival to ack) |")
	fmt.Println("|---|---|---|---|---|---|")
	for i, n := range s.c.Nodes() {
		d := scrapeMetrics(ctx, t, s.c.Client(), n)
		for k, v := range before[i] {
			d[k] -= v
		}
		fmt.Printf("| %s | %.0f | %.2f | %.2f | %.0f | %.2f |\n", filepath.Base(files[i]),
			d["sq_fsync_latency_seconds_count"], ratio(1000*d["sq_fsync_latency_seconds_sum"], d["sq_fsync_latency_seconds_count"]),
			ratio(d["sq_fsync_batches_sum"], d["sq_fsync_batches_count"]),
			d["sq_publish_latency_seconds_count"], ratio(1000*d["sq_publish_latency_seconds_sum"], d["sq_publish_latency_seconds_count"]))
	}
	if _, _, err := b.sq(ctx, s.c.Client(), n1, "topic", "delete", topic); err != nil {
		t.Logf("profile run: %v", err)
	}
	fmt.Printf("\nprofiled run (not measured), %s: %.0f records/s, servers CPU %.2f s, sq bench CPU %.2f s; profiles of %d s from the start of sq bench\n",
		s.name, r.res.RecordsPerSec, r.serverCPU.Seconds(), r.clientCPU.Seconds(), secs)
	for _, f := range append(files, clientProf) {
		bin := b.server
		if f == clientProf {
			bin = b.cli
		}
		out, err := exec.Command(b.goBin, "tool", "pprof", "-top", "-nodecount", "25", bin, f).CombinedOutput()
		if err != nil {
			t.Fatalf("pprof of %s: %v\n%s", f, err, out)
		}
		fmt.Printf("\n%s\n%s", filepath.Base(f), out)
	}
}

// fetchProfile takes a CPU profile of secs seconds from the server at ip
// (its benchPprofPort, reached from namespace ns) into file.
func fetchProfile(ctx context.Context, ns *clusternet.Namespace, ip string, secs int, file string) error {
	client := &http.Client{Transport: &http.Transport{DialContext: ns.DialContext}}
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", net.JoinHostPort(ip, strconv.Itoa(benchPprofPort)), secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("profile of %s: %w", ip, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile of %s: status %s, %v: %s", ip, resp.Status, err, data)
	}
	return os.WriteFile(file, data, 0o644)
}

// scrapeMetrics reads the _sum and _count series of the histograms in
// n's /metrics (HTTPPort) that have no labels.
func scrapeMetrics(ctx context.Context, t *testing.T, ns *clusternet.Namespace, n *clusternet.Node) map[string]float64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DialContext: ns.DialContext}}
	url := "http://" + net.JoinHostPort(n.IP, strconv.Itoa(clusternet.HTTPPort)) + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("metrics of node %d: %v", n.Index, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics of node %d: status %s, %v", n.Index, resp.Status, err)
	}
	m := map[string]float64{}
	for line := range strings.SplitSeq(string(data), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") || !(strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count")) {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			m[name] = v
		}
	}
	return m
}

// ratio is a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}

// serversCPU is the user+system time the current server process of every
// node of c has used so far.
func serversCPU(t *testing.T, c *clusternet.Cluster) time.Duration {
	t.Helper()
	var sum time.Duration
	for _, n := range c.Nodes() {
		d, err := procCPU(n.Process().Pid())
		if err != nil {
			t.Fatalf("node %d: %v", n.Index, err)
		}
		sum += d
	}
	return sum
}

// procCPU reads utime+stime of pid (proc(5) fields 14 and 15, in clock
// ticks of 1/100 s, USER_HZ on Linux).
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, data)
	}
	f := strings.Fields(string(data[end+1:])) // f[0] is field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, data)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %v", pid, err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// loadAvg is the 1-minute load average (/proc/loadavg).
func loadAvg(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(data))[0]
}

func median(rs []benchRun, f func(benchRun) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func minOf(rs []benchRun, f func(benchRun) float64) float64 {
	m := f(rs[0])
	for _, r := range rs[1:] {
		m = min(m, f(r))
	}
	return m
}

func maxOf(rs []benchRun, f func(benchRun) float64) float64 {
	m := f(rs[0])
	for _, r := range rs[1:] {
		m = max(m, f(r))
	}
	return m
}

func joinLoads(rs []benchRun, f func(benchRun) string) string {
	var s []string
	for _, r := range rs {
		s = append(s, f(r))
	}
	return strings.Join(s, ", ")
}
