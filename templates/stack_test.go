package templates

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/clusternet"
	"github.com/seedqueue/sq/internal/s3fake"
	"github.com/seedqueue/sq/sdk"
)

// Bounds of the stack test's waits; they guard against hangs only.
const (
	stackWait   = 90 * time.Second // one state polled for
	cliTimeout  = 30 * time.Second // one sq command
	promAPIPort = "9090"
	stackTopic  = "orders"
	stackGroup  = "dashboard"
)

// stack is the compose file's SQ services running in namespaces, with the
// stand-ins of its other services.
type stack struct {
	c      *clusternet.Cluster
	f      *composeFile
	sq     []string                // SQ service names; sq[i] runs on node i+1
	nodes  map[string]nodeSettings // per SQ service
	hosts  map[string]string       // service name -> IP in the namespaces' hosts files
	s3     *s3fake.Server
	otlp   *otlpSink
	bucket string

	putCount atomic.Int64 // PUTs of segment objects seen so far
}

// TestStack runs the compose file's three SQ nodes as it configures them
// (same command, same environment over the image's ENV), each in a
// network namespace whose hosts file resolves every service name of the
// compose file: the SQ services to their nodes' addresses, the others to
// the client namespace, where the test serves gofakes3 for MinIO (with the
// bucket that minio-init creates), an OTLP trace sink for Jaeger and
// Debian's prometheus with prometheus.yml unchanged. The only value
// rewritten is the data directory (each node's own temporary directory
// for /data); the test prints it and every name it resolves. A producer
// and a consumer group run while segments roll and are tiered. Then every
// node's spans reach the sink, Prometheus reports the 3 targets up and
// every query of the Grafana dashboard returns series. With
// SQ_DASHBOARD_PNG=DIR (make dashboard-png) the run goes on for
// SQ_DASHBOARD_SECONDS (default 120) and each panel's queries are
// plotted into DIR.
func TestStack(t *testing.T) {
	promBin := requireTool(t, "prometheus")
	clusternet.Require(t)
	s := newStack(t)
	start := time.Now()
	traffic := startTraffic(t, s)

	eventually(t, "sealed segments uploaded to the bucket", func() error {
		if n := s.puts(); n == 0 {
			return errors.New("no PUT of a segment yet")
		}
		return nil
	})
	eventually(t, "spans from every node at the OTLP sink", func() error {
		got := s.otlp.Spans()
		for _, name := range s.sq {
			id := instanceID(s.nodes[name])
			if got[id] == 0 {
				return fmt.Errorf("no span with service.instance.id %q; received %v", id, got)
			}
		}
		return nil
	})
	t.Logf("spans received per service.instance.id: %v", s.otlp.Spans())

	prom := s.startPrometheus(t, promBin)
	eventually(t, "Prometheus scraping the 3 nodes", func() error {
		ts, err := prom.targets()
		if err != nil {
			return err
		}
		up := 0
		for _, tg := range ts {
			if tg.Health == "up" {
				up++
			}
		}
		if len(ts) != len(s.sq) || up != len(s.sq) {
			return fmt.Errorf("%d targets, %d up: %+v", len(ts), up, ts)
		}
		return nil
	})
	ts, _ := prom.targets()
	for _, tg := range ts {
		t.Logf("prometheus target %s (node=%s): %s", tg.ScrapeURL, tg.Labels["node"], tg.Health)
	}
	queries := promQueries(t)
	eventually(t, "every dashboard query to return series", func() error {
		var empty []string
		for _, q := range queries {
			res, err := prom.query(q.Expr)
			if err != nil {
				return err
			}
			if len(res) == 0 {
				empty = append(empty, fmt.Sprintf("panel %q query %s: %s", q.Panel.Title, q.RefID, q.Expr))
			}
		}
		if len(empty) > 0 {
			return fmt.Errorf("no series for:\n%s", strings.Join(empty, "\n"))
		}
		return nil
	})
	for _, q := range queries {
		res, _ := prom.query(q.Expr)
		t.Logf("panel %q query %s: %d series", q.Panel.Title, q.RefID, len(res))
	}
	if dir := os.Getenv("SQ_DASHBOARD_PNG"); dir != "" {
		secs, err := strconv.Atoi(cmpOr(os.Getenv("SQ_DASHBOARD_SECONDS"), "120"))
		if err != nil {
			t.Fatalf("SQ_DASHBOARD_SECONDS: %v", err)
		}
		traffic.runFor(t, time.Until(start.Add(time.Duration(secs)*time.Second)))
		plotDashboard(t, prom, queries, start, time.Now(), dir)
	}
	traffic.stop(t)
}

// newStack starts the SQ services of the compose file and the stand-ins
// of the services they use.
func newStack(t *testing.T) *stack {
	t.Helper()
	f := readCompose(t)
	d := readDockerfile(t)
	b := buildBins(t)
	s := &stack{f: f, sq: f.sqServices(), nodes: map[string]nodeSettings{}, hosts: map[string]string{}}
	s.c = clusternet.New(t, clusternet.Config{Nodes: len(s.sq), ServerBin: b.server})
	for name := range f.Services {
		s.hosts[name] = clusternet.ClientIP
	}
	for i, name := range s.sq {
		s.hosts[name] = s.c.Node(i + 1).IP
		s.nodes[name] = f.settings(d, name)
	}
	s.c.SetHosts(s.hosts)
	for _, name := range sortedKeys(s.hosts) {
		t.Logf("hosts: %s -> %s", name, s.hosts[name])
	}
	s.startS3(t)
	s.startOTLP(t)
	for _, name := range startOrder(t, f, s.sq) {
		s.startNode(t, name)
	}
	for _, name := range s.sq {
		s.waitReady(t, name)
	}
	return s
}

// startS3 serves gofakes3, with the bucket the nodes tier to, at the
// address of the nodes' S3 endpoint.
func (s *stack) startS3(t *testing.T) {
	t.Helper()
	first := s.nodes[s.sq[0]]
	endpoint, bucket := first.setting("s3-endpoint", ""), first.setting("s3-bucket", "")
	if endpoint == "" || bucket == "" {
		t.Fatalf("%s: no --s3-endpoint or --s3-bucket: the compose file does not tier to MinIO", s.sq[0])
	}
	for _, name := range s.sq[1:] {
		if n := s.nodes[name]; n.setting("s3-endpoint", "") != endpoint || n.setting("s3-bucket", "") != bucket {
			t.Fatalf("%s tiers to another endpoint or bucket than %s", name, s.sq[0])
		}
	}
	host, port, err := hostPortOf(endpoint)
	if err != nil {
		t.Fatalf("S3 endpoint %q: %v", endpoint, err)
	}
	s3fake.SetAWSEnv(t)
	s.s3, s.bucket = s3fake.New(t, bucket), bucket
	addr := net.JoinHostPort(s.hosts[host], port)
	l, err := s.c.Client().Listen("tcp", addr)
	if err != nil {
		t.Fatalf("S3 endpoint %s: %v", endpoint, err)
	}
	srv := &http.Server{Handler: s.s3, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	t.Logf("S3 endpoint %s: gofakes3 on %s in the client namespace, bucket %s created (as minio-init does)", endpoint, addr, bucket)
}

// startOTLP serves the OTLP trace sink at the nodes' trace endpoint.
func (s *stack) startOTLP(t *testing.T) {
	t.Helper()
	env := s.nodes[s.sq[0]].Env
	endpoint := cmpOr(env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], env["OTEL_EXPORTER_OTLP_ENDPOINT"])
	if endpoint == "" {
		t.Fatalf("%s: no OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT: traces go nowhere", s.sq[0])
	}
	host, port, err := hostPortOf(endpoint)
	if err != nil {
		t.Fatalf("OTLP endpoint %q: %v", endpoint, err)
	}
	addr := net.JoinHostPort(s.hosts[host], port)
	s.otlp = startOTLPSink(t, s.c.Client(), addr)
	t.Logf("OTLP endpoint %s: trace sink on %s in the client namespace", endpoint, addr)
}

// startOrder returns the SQ services in an order that starts each after
// the SQ services it depends on (compose's depends_on).
func startOrder(t *testing.T, f *composeFile, sq []string) []string {
	t.Helper()
	var order []string
	started := map[string]bool{}
	for len(order) < len(sq) {
		progress := false
		for _, name := range sq {
			if started[name] {
				continue
			}
			ready := true
			for dep := range f.Services[name].DependsOn {
				if slices.Contains(sq, dep) && !started[dep] {
					ready = false
				}
			}
			if ready {
				order, started[name], progress = append(order, name), true, true
			}
		}
		if !progress {
			t.Fatalf("depends_on of the SQ services has a cycle: started %v of %v", order, sq)
		}
	}
	return order
}

// node returns the namespace node of SQ service name.
func (s *stack) node(name string) *clusternet.Node {
	return s.c.Node(slices.Index(s.sq, name) + 1)
}

// env returns the environment of SQ service name as KEY=value items, its
// data directory rewritten to the node's own.
func (s *stack) env(t *testing.T, name string) []string {
	t.Helper()
	n := s.nodes[name]
	var env []string
	for _, k := range sortedKeys(n.Env) {
		v := n.Env[k]
		if k == "SQ_DATA_DIR" {
			v = s.node(name).DataDir
		}
		env = append(env, k+"="+v)
	}
	return env
}

// args returns the command of SQ service name, a --data-dir rewritten to
// the node's own.
func (s *stack) args(name string) []string {
	args := slices.Clone(s.nodes[name].Args)
	for i := range args {
		if args[i] == "--data-dir" && i+1 < len(args) {
			args[i+1] = s.node(name).DataDir
		} else if strings.HasPrefix(args[i], "--data-dir=") {
			args[i] = "--data-dir=" + s.node(name).DataDir
		}
	}
	return args
}

// startNode starts SQ service name on its node and waits until its health
// check passes (depends_on: service_healthy).
func (s *stack) startNode(t *testing.T, name string) {
	t.Helper()
	n := s.node(name)
	t.Logf("%s on node %d (%s): rewrote the data directory %s -> %s", name, n.Index, n.IP,
		s.nodes[name].setting("data-dir", "./data"), n.DataDir)
	t.Logf("%s: sq-server %s", name, strings.Join(s.args(name), " "))
	n.StartEnv(s.env(t, name), s.args(name)...)
	s.waitReady(t, name)
}

// waitReady runs the image's health check, `sq-server probe --ready`, in
// the node's namespace with the service's environment until it passes.
func (s *stack) waitReady(t *testing.T, name string) {
	t.Helper()
	n := s.node(name)
	eventually(t, name+" healthy (sq-server probe --ready)", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		defer cancel()
		cmd := n.Command(ctx, buildBins(t).server, "probe", "--ready")
		cmd.Env = append(cmd.Env, s.env(t, name)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
		}
		return nil
	})
}

// puts returns how many PUTs of segment objects the bucket has received.
func (s *stack) puts() int {
	n := 0
	for _, r := range s.s3.Requests() {
		if strings.HasPrefix(r, "PUT /"+s.bucket+"/") && strings.Contains(r, ".log") {
			n++
		}
	}
	s.putCount.Add(int64(n))
	return int(s.putCount.Load())
}

// startPrometheus runs Debian's prometheus with prometheus.yml, unchanged,
// in the client namespace (whose hosts file resolves the targets) until
// the test ends.
func (s *stack) startPrometheus(t *testing.T, bin string) *promAPI {
	t.Helper()
	cfg, err := filepath.Abs("prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(clusternet.ClientIP, promAPIPort)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := s.c.Client().Command(ctx, bin, "--config.file="+cfg, "--storage.tsdb.path="+t.TempDir(),
		"--web.listen-address="+addr, "--log.level=warn")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", out.String())
		}
	})
	t.Logf("prometheus %s with %s (targets unchanged: the hosts file resolves them), API on %s", bin, cfg, addr)
	return newPromAPI(s.c.Client(), addr)
}

// instanceID returns the service.instance.id a node's
// OTEL_RESOURCE_ATTRIBUTES gives its spans ("" when none).
func instanceID(n nodeSettings) string {
	for kv := range strings.SplitSeq(n.Env["OTEL_RESOURCE_ATTRIBUTES"], ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k == "service.instance.id" {
			return v
		}
	}
	return ""
}

// traffic is a producer and a consumer group member running until stop.
type traffic struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	produced atomic.Int64
	consumed atomic.Int64
	mu       sync.Mutex
	err      error
}

// startTraffic creates the topic (3 partitions, replication factor 3,
// segments rolled every 2 s so that they are sealed and tiered) and
// starts a producer (batches of 50 records every 100 ms) and a member of
// the consumer group (auto-commit every second).
func startTraffic(t *testing.T, s *stack) *traffic {
	t.Helper()
	n1 := s.c.Node(1)
	ctl := net.JoinHostPort(n1.IP, strconv.Itoa(clusternet.GRPCPort))
	runCLI(t, s.c.Client(), "--server", n1.Addr, "--control", ctl, "topic", "create", stackTopic,
		"--partitions", "3", "--replication-factor", "3", "--segment-ms", "2000")
	ctx, cancel := context.WithCancel(context.Background())
	tr := &traffic{cancel: cancel}
	t.Cleanup(cancel)
	dial := sdk.DialFunc(s.c.Client().DialContext)
	prod, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n1.Addr, Dialer: dial})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: s.c.Node(2).Addr, Dialer: dial, Topic: stackTopic,
		ConsumerGroup: stackGroup, AutoCommit: true, AutoCommitInterval: time.Second, MaxWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tr.wg.Go(func() {
		defer prod.Close()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			msgs := make([]sdk.ProducerMessage, 50)
			for k := range msgs {
				msgs[k] = sdk.NewProducerMessage(stackTopic, fmt.Appendf(nil, "order %d-%d %s", i, k, strings.Repeat("x", 200)))
			}
			if _, err := prod.SendBatch(ctx, msgs); err != nil && ctx.Err() == nil {
				tr.fail(fmt.Errorf("publish: %w", err))
				return
			}
			tr.produced.Add(int64(len(msgs)))
		}
	})
	tr.wg.Go(func() {
		defer cons.Close()
		for ctx.Err() == nil {
			ms, err := cons.Poll(ctx)
			if err != nil && ctx.Err() == nil {
				tr.fail(fmt.Errorf("poll: %w", err))
				return
			}
			tr.consumed.Add(int64(len(ms)))
		}
	})
	return tr
}

func (tr *traffic) fail(err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.err == nil {
		tr.err = err
	}
}

// runFor lets the traffic run for d (the length of a dashboard's run),
// failing t on its first error.
func (tr *traffic) runFor(t *testing.T, d time.Duration) {
	t.Helper()
	end := time.After(d)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-end:
			return
		case <-tick.C:
			tr.mu.Lock()
			err := tr.err
			tr.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// stop ends the traffic and fails t if it failed or moved nothing.
func (tr *traffic) stop(t *testing.T) {
	t.Helper()
	tr.cancel()
	tr.wg.Wait()
	if tr.err != nil {
		t.Fatal(tr.err)
	}
	t.Logf("traffic: %d records published, %d consumed by group %s", tr.produced.Load(), tr.consumed.Load(), stackGroup)
	if tr.produced.Load() == 0 || tr.consumed.Load() == 0 {
		t.Fatalf("traffic: %d published, %d consumed: want both > 0", tr.produced.Load(), tr.consumed.Load())
	}
}

// runCLI runs the sq CLI in ns and fails t unless it exits 0.
func runCLI(t *testing.T, ns *clusternet.Namespace, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	out, err := ns.Command(ctx, buildBins(t).cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("sq %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// eventually polls f until it returns nil, failing t with f's last error
// after stackWait.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(stackWait)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, stackWait, err)
		}
		time.Sleep(250 * time.Millisecond) // between polls of a bounded wait
	}
}

// lockedBuffer is a bytes.Buffer safe for a process's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cmpOr returns a unless it is empty, else b.
func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
