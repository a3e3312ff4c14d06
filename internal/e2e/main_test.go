package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/testnet"
	"github.com/seedqueue/sq/internal/testutil"
)

// Deadlines of the helpers. They bound waits for state, they never pace
// the tests.
const (
	startTimeout = 30 * time.Second // a server logs "data plane listening"
	stopTimeout  = 40 * time.Second // a server exits after SIGTERM (its own shutdown timeout is 30s)
	cliTimeout   = 2 * time.Minute  // one sq command
)

// bins are the binaries built by TestMain.
var bins struct {
	server string // sq-server
	cli    string // sq
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sq-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	build := exec.Command(goBin, "build", "-o", dir+string(filepath.Separator),
		"github.com/seedqueue/sq/cmd/sq-server", "github.com/seedqueue/sq/cmd/sq")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building sq-server and sq:", err)
		return 1
	}
	bins.server = filepath.Join(dir, "sq-server")
	bins.cli = filepath.Join(dir, "sq")
	return m.Run()
}

// cleanEnv is the test's environment without SQ_* variables, so a
// developer's settings do not leak into the servers and CLIs under test.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQ_") {
			env = append(env, kv)
		}
	}
	// Free ports for the control plane, so servers never collide on the
	// defaults (6060, 6062); extra may override them.
	env = append(env, "SQ_GRPC_HOST=127.0.0.1:0", "SQ_HTTP_HOST=127.0.0.1:0")
	return append(env, extra...)
}

// logBuffer collects a process's output and wakes waiters on every
// write (testutil.LogBuffer).
type logBuffer = testutil.LogBuffer

func newLogBuffer() *logBuffer { return testutil.NewLogBuffer() }

// proc is a running sq-server process.
type proc struct {
	cmd    *exec.Cmd
	log    *logBuffer
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's result, set before exited is closed
}

// launch starts sq-server with args and env (added to cleanEnv) and stops
// it at the end of the test if it is still running.
func launch(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bins.server, args...), log: newLogBuffer(), exited: make(chan struct{})}
	p.cmd.Env = cleanEnv(env...)
	p.cmd.Stderr = p.log
	p.cmd.Stdout = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start sq-server: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		if code := p.stop(); code != 0 {
			t.Errorf("sq-server %v exited with status %d at cleanup; log:\n%s", args, code, p.log)
		}
	})
	return p
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// exitCode waits up to d for the process to exit and returns its status
// (-1 when killed by a signal), or false on timeout.
func (p *proc) exitCode(d time.Duration) (int, bool) {
	select {
	case <-p.exited:
	case <-time.After(d):
		return 0, false
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode(), true
	}
	if p.err != nil {
		return -1, true
	}
	return 0, true
}

// stop sends SIGTERM and returns the exit status; a process still running
// after stopTimeout is killed and reported as -1.
func (p *proc) stop() int {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code, ok := p.exitCode(stopTimeout); ok {
		return code
	}
	p.kill()
	return -1
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// listenLine matches the startup line of both log formats.
var listenLine = regexp.MustCompile(`msg="data plane listening" addr=(\S+)`)

// waitListening waits for the "data plane listening" log line and returns
// the address in it. It fails the test when the process exits first or the
// deadline passes.
func (p *proc) waitListening(t *testing.T) string {
	t.Helper()
	deadline := time.After(startTimeout)
	for {
		text, changed := p.log.Snapshot()
		if addr := listenAddr(text); addr != "" {
			return addr
		}
		select {
		case <-changed:
		case <-p.exited:
			// The last write may have raced the exit.
			if addr := listenAddr(p.log.String()); addr != "" {
				return addr
			}
			t.Fatalf("sq-server exited before listening (%v); log:\n%s", p.err, p.log)
		case <-deadline:
			t.Fatalf("sq-server did not log \"data plane listening\" within %v; log:\n%s", startTimeout, p.log)
		}
	}
}

// listenAddr finds the listening address in JSON or text logs.
func listenAddr(text string) string {
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, "{") {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "data plane listening" {
				return rec.Addr
			}
			continue
		}
		if m := listenLine.FindStringSubmatch(line); m != nil {
			return m[1]
		}
	}
	return ""
}

// server is a running sq-server on a data directory.
type server struct {
	*proc
	addr    string
	dataDir string
	extra   []string
}

// startServer starts sq-server on 127.0.0.1 (free port) with dataDir and
// extra flags, and waits until it listens.
func startServer(t *testing.T, dataDir string, extra ...string) *server {
	t.Helper()
	args := append([]string{"serve", "--capnp-host", "127.0.0.1:0", "--data-dir", dataDir, "--log-format", "json"}, extra...)
	p := launch(t, nil, args...)
	return &server{proc: p, addr: p.waitListening(t), dataDir: dataDir, extra: extra}
}

// fixedAddrs returns flags that put every listener of a server on
// loopback ports free a moment ago, and the data-plane address among them,
// for a test that restarts a server on the same address. With the control
// plane on port 0 (cleanEnv), a restarted server's control listeners, bound
// before the data plane, could take the data-plane port just freed.
func fixedAddrs(t *testing.T) (addr string, flags []string) {
	t.Helper()
	addr = testnet.FreeAddr(t)
	// Gossip and Raft get free ports of their own: the defaults, the gRPC
	// port + 6 and + 7, may be held by another test.
	return addr, []string{"--capnp-host", addr, "--grpc-host", testnet.FreeAddr(t), "--http-host", testnet.FreeAddr(t),
		"--gossip-host", testnet.FreeGossipAddr(t), "--raft-host", testnet.FreeAddr(t)}
}

// restart stops s with SIGTERM (requiring exit status 0) and starts a new
// server on the same data directory and flags.
func (s *server) restart(t *testing.T) *server {
	t.Helper()
	if code := s.stop(); code != 0 {
		t.Fatalf("sq-server exited with status %d after SIGTERM; log:\n%s", code, s.log)
	}
	return startServer(t, s.dataDir, s.extra...)
}

// result is the outcome of one sq command.
type result struct {
	stdout, stderr string
	code           int
}

// runSQ runs the sq CLI against addr with stdin and returns its outputs
// and exit status.
func runSQ(t *testing.T, addr string, stdin []byte, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.cli, append([]string{"--server", addr}, args...)...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("sq %v: no exit within %v; stderr:\n%s", args, cliTimeout, r.stderr)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("sq %v: %v", args, err)
	}
	return r
}

// sqOK runs sq and fails the test unless it exits with status 0.
func sqOK(t *testing.T, addr string, stdin []byte, args ...string) string {
	t.Helper()
	r := runSQ(t, addr, stdin, args...)
	if r.code != 0 {
		t.Fatalf("sq %v: exit status %d; stderr:\n%s", args, r.code, r.stderr)
	}
	return r.stdout
}

// sqFails runs sq, requires exit status 1 and returns its stderr.
func sqFails(t *testing.T, addr string, stdin []byte, args ...string) string {
	t.Helper()
	r := runSQ(t, addr, stdin, args...)
	if r.code != 1 {
		t.Fatalf("sq %v: exit status %d, want 1; stdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
	}
	return r.stderr
}
