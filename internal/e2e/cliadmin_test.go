package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seedqueue/sq/internal/testnet"
)

// versionLine is the documented shape of `sq --version` and `sq-server
// --version`: NAME VERSION (commit C, goX.Y); C is "unknown" in a build
// without VCS information.
var versionLine = regexp.MustCompile(`^(sq|sq-server) \S+ \(commit (unknown|[0-9a-f]{7}(-dirty)?), go\d+\.\d+\)$`)

// TestVersionOfTheBinaries: both binaries print their version line, `sq
// version` prints the same, and the server logs it at start.
func TestVersionOfTheBinaries(t *testing.T) {
	t.Parallel()
	lines := map[string]string{}
	for _, run := range []struct {
		bin  string
		args []string
	}{
		{bins.cli, []string{"--version"}},
		{bins.cli, []string{"version"}},
		{bins.server, []string{"--version"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		cmd := exec.CommandContext(ctx, run.bin, run.args...)
		cmd.Env = cleanEnv()
		out, err := cmd.Output()
		cancel()
		line := strings.TrimSuffix(string(out), "\n")
		if err != nil || !versionLine.MatchString(line) || strings.Contains(line, "\n") {
			t.Fatalf("%s %v: %q, %v; want a line matching %v", run.bin, run.args, out, err, versionLine)
		}
		lines[run.bin+" "+run.args[0]] = line
	}
	if a, b := lines[bins.cli+" --version"], lines[bins.cli+" version"]; a != b {
		t.Errorf("sq --version %q and sq version %q differ", a, b)
	}
	srv := startServer(t, t.TempDir())
	want := lines[bins.server+" --version"]
	if !strings.Contains(srv.log.String(), `"build":"`+want+`"`) {
		t.Errorf("the server's start does not log %q:\n%s", want, srv.log)
	}
}

// runSQArgs runs sq with exactly args (no --server added) and returns
// its outputs and exit status.
func runSQArgs(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.cli, args...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sq %v: no exit within %v; stderr:\n%s", args, cliTimeout, stderr.String())
	}
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("sq %v: %v", args, err)
	}
	return r
}

// decodeOne parses out as exactly one JSON object.
func decodeOne(t *testing.T, what, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: stdout is not JSON: %v\n%s", what, err, out)
	}
	if dec.More() {
		t.Fatalf("%s: stdout holds more than one JSON document:\n%s", what, out)
	}
}

// keysOf returns the sorted keys of a JSON object.
func keysOf(v any) []string {
	m, _ := v.(map[string]any)
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestCLIAdminJSON: every admin command's --format json is one JSON
// document with the fields README.md documents.
func TestCLIAdminJSON(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	grpcAddr, _ := controlAddrs(t, srv)
	sqOK(t, srv.addr, nil, "topic", "create", "orders", "--partitions", "3")
	sqOK(t, srv.addr, []byte("a\nb\nc\nd\n"), "produce", "--topic", "orders")
	sqOK(t, srv.addr, nil, "group", "reset-offsets", "billing", "-t", "orders", "--to", "earliest")

	topicKeys := []string{"config", "name", "partition_count", "topic_id"}
	configKeys := []string{"local_retention_bytes", "local_retention_ms", "max_record_bytes", "min_insync_replicas", "retention_bytes", "retention_ms", "segment_bytes", "segment_ms",
		"sync_policy", "unclean_leader_election"}

	var list map[string][]map[string]any
	decodeOne(t, "topic list", sqOK(t, srv.addr, nil, "topic", "list", "-f", "json"), &list)
	if ts := list["topics"]; len(ts) != 1 || ts[0]["name"] != "orders" || ts[0]["partition_count"] != 3.0 ||
		!slices.Equal(keysOf(ts[0]), topicKeys) || !slices.Equal(keysOf(ts[0]["config"]), configKeys) {
		t.Errorf("topic list -f json: %v", list)
	}

	var topic map[string]any
	decodeOne(t, "topic describe", sqOK(t, srv.addr, nil, "topic", "describe", "orders", "--format", "JSON"), &topic)
	parts, _ := topic["partitions"].([]any)
	var records float64
	for _, p := range parts {
		if !slices.Equal(keysOf(p), []string{"high_watermark", "isr", "leader", "leader_epoch", "log_end_offset", "log_start_offset",
			"partition", "replicas", "segment_count", "size_bytes"}) {
			t.Errorf("topic describe partition %v", p)
		}
		records += p.(map[string]any)["high_watermark"].(float64)
	}
	if len(parts) != 3 || records != 4 || topic["replication_factor"] != 1.0 ||
		!slices.Equal(keysOf(topic), []string{"config", "name", "partition_count", "partitions", "replication_factor", "topic_id"}) {
		t.Errorf("topic describe --format JSON: %v", topic)
	}

	var groups map[string][]map[string]any
	decodeOne(t, "group list", sqOK(t, srv.addr, nil, "group", "list", "-f", "json"), &groups)
	if gs := groups["groups"]; len(gs) != 1 || gs[0]["group"] != "billing" ||
		!slices.Equal(keysOf(gs[0]), []string{"generation", "group", "member_count", "state"}) {
		t.Errorf("group list -f json: %v", groups)
	}

	var group map[string]any
	decodeOne(t, "group describe", sqOK(t, srv.addr, nil, "group", "describe", "billing", "-f", "json"), &group)
	offs, _ := group["offsets"].([]any)
	if len(offs) != 3 || !slices.Equal(keysOf(group), []string{"generation", "group", "member_count", "members", "offsets", "state"}) ||
		!slices.Equal(keysOf(offs[0]), []string{"committed_offset", "high_watermark", "lag", "log_end_offset", "member_id", "partition", "topic"}) {
		t.Errorf("group describe -f json: %v", group)
	}

	r := runSQArgs(t, "--control", grpcAddr, "cluster", "info", "-f", "json")
	if r.code != 0 {
		t.Fatalf("cluster info -f json: status %d\n%s", r.code, r.stderr)
	}
	var info map[string]any
	decodeOne(t, "cluster info", r.stdout, &info)
	want := []string{"applied_index", "capnp_address", "cluster_id", "commit_index", "controller_id", "data_bytes", "data_dir",
		"data_dir_free_bytes", "data_dir_total_bytes", "drained_nodes", "grpc_address", "http_address", "io_backend", "last_log_index",
		"leaderless_partitions", "member_count", "members", "metadata_hash", "node_id", "orphaned_topics", "partition_count", "raft_state",
		"raft_term", "ready", "topic_count", "uptime_ms", "version", "voter_count"}
	if !slices.Equal(keysOf(info), want) || info["capnp_address"] != srv.addr || info["topic_count"] != 1.0 {
		t.Errorf("cluster info -f json: %v", info)
	}

	for _, args := range [][]string{{"topic", "list"}, {"group", "describe", "billing"}} {
		stderr := sqFails(t, srv.addr, nil, append(args, "-f", "xml")...)
		if !strings.Contains(stderr, `--format "xml": want one of text, json`) {
			t.Errorf("sq %v -f xml: %s", args, stderr)
		}
	}

	r = runSQArgs(t, "--control", grpcAddr, "topic", "alter", "orders", "--segment-bytes", "1048576")
	if r.code != 1 || !strings.Contains(r.stderr, "unknown flag: --segment-bytes") {
		t.Errorf("topic alter --segment-bytes: status %d, stderr %s", r.code, r.stderr)
	}
}

// TestCLIWrongPort: each plane's address given for the other, the HTTP
// port or a TLS server, is named for what it is.
func TestCLIWrongPort(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	grpcAddr, httpAddr := controlAddrs(t, srv)
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	tlsAddr := tlsSrv.Listener.Addr().String()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server", grpcAddr, "topic", "list"}, grpcAddr + " is not an SQ data plane (it speaks HTTP/2; the data plane is on port 6064 by default)"},
		{[]string{"--server", httpAddr, "group", "list"}, httpAddr + " is not an SQ data plane (it speaks HTTP/1.x; the data plane is on port 6064 by default)"},
		{[]string{"--control", srv.addr, "cluster", "info"}, srv.addr + " is not an SQ control plane (it speaks SQ's data-plane protocol; the gRPC control plane is on port 6060 by default)"},
		{[]string{"--control", httpAddr, "topic", "alter", "t", "--retention-ms", "1"}, httpAddr + " is not an SQ control plane (it speaks HTTP/1.x"},
		// Not host:port: refused before dialing (gRPC would dial port 443).
		{[]string{"--control", "127.0.0.1", "cluster", "info"}, `address "127.0.0.1" has no port; want host:port such as 127.0.0.1:6060 (set it with --control or SQ_CONTROL)`},
		{[]string{"--server", "::1", "consume", "-t", "t", "-g", "g"}, `address "::1" has no port (an IPv6 address takes brackets); want host:port such as [::1]:6064 (set it with --server or SQ_SERVER)`},
		{[]string{"--server", "http://" + srv.addr, "topic", "list"}, `has a scheme (http://); want host:port such as ` + srv.addr},
		// A TLS server (waits for the client's hello): named as TLS on both planes.
		{[]string{"--server", tlsAddr, "topic", "list"}, tlsAddr + " is not an SQ data plane (it speaks TLS"},
		{[]string{"--control", tlsAddr, "cluster", "info"}, tlsAddr + " is not an SQ control plane (it speaks TLS"},
	} {
		r := runSQArgs(t, tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("sq %v: status %d, stdout %q, stderr %q; want status 1 and %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
}

// TestCLISilentListenerTimeout: a listener that accepts and never answers
// fails both planes within --timeout, with a message naming the address
// and the bound.
func TestCLISilentListenerTimeout(t *testing.T) {
	t.Parallel()
	addr := testnet.SilentListener(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "300ms", "--server", addr, "topic", "list"}, "no answer from the SQ server at " + addr + " within 300ms"},
		{[]string{"--timeout", "300ms", "--control", addr, "cluster", "info"}, "no answer from the SQ control plane at " + addr + " within 300ms"},
	} {
		r := runSQArgs(t, tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("sq %v: status %d, stderr %q; want status 1 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
