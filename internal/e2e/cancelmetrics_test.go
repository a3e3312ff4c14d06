package e2e

import (
	"bufio"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// counterSum adds the samples of counter name whose labels contain label
// (empty: every sample) in a /metrics body.
func counterSum(t *testing.T, body, name, label string) float64 {
	t.Helper()
	re := regexp.MustCompile(`^` + name + `(\{[^}]*\})? (\S+)$`)
	total := 0.0
	for line := range strings.SplitSeq(body, "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil || !strings.Contains(m[1], label) {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		total += v
	}
	return total
}

// TestConsumeFollowInterruptIsNotAnError: Ctrl-C (SIGINT) on `sq consume
// --follow` of a 3-partition topic, whose fetches wait at the high
// watermark, moves sq_fetch_canceled_total{code="CANCELED"} of the real
// server and leaves sq_fetch_errors_total and sq_publish_errors_total at
// nothing.
func TestConsumeFollowInterruptIsNotAnError(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	_, httpAddr := controlAddrs(t, srv)
	sqOK(t, srv.addr, nil, "topic", "create", "idle", "--partitions", "3")
	sqOK(t, srv.addr, []byte("x\n"), "produce", "--topic", "idle")
	cmd := exec.Command(bins.cli, "--server", srv.addr, "consume", "--topic", "idle", "--follow")
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "x" {
		t.Fatalf("consume --follow printed %q first, want x; stderr:\n%s", sc.Text(), stderr.String())
	}
	// Every partition's fetch waits at the high watermark.
	deadline := time.Now().Add(followTimeout)
	for metricValue(t, httpAddr, "sq_inflight_requests") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("sq_inflight_requests below 3 after %v", followTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() { // until the process closes stdout
	}
	_ = cmd.Wait() // its exit status is the CLI's business
	deadline = time.Now().Add(followTimeout)
	var body string
	for {
		_, body = httpBody(t, "http://"+httpAddr+"/metrics")
		if counterSum(t, body, "sq_fetch_canceled_total", `code="CANCELED"`) >= 1 && metricValue(t, httpAddr, "sq_inflight_requests") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sq_fetch_canceled_total{code=\"CANCELED\"} after SIGINT:\n%s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, name := range []string{"sq_fetch_errors_total", "sq_publish_errors_total"} {
		if v := counterSum(t, body, name, ""); v != 0 {
			t.Errorf("%s = %v after a client's Ctrl-C, want 0:\n%s", name, v, body)
		}
	}
}
