package clusternet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/clusternet"
)

// Deadlines; they only guard against hangs.
const (
	cliTimeout  = 30 * time.Second // one sq command
	waitTimeout = 30 * time.Second // a state polled for
	cutTimeout  = 500 * time.Millisecond
)

var bins struct {
	once        sync.Once
	dir         string
	server, cli string
	err         error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// newCluster makes a cluster of n nodes running the sq-server built from
// this tree (built once, after Require, so a skipped run builds nothing).
func newCluster(t *testing.T, n int) *clusternet.Cluster {
	t.Helper()
	clusternet.Require(t)
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "sq-clusternet-bin-")
		if bins.err != nil {
			return
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		out, err := exec.Command(goBin, "build", "-o", bins.dir+string(filepath.Separator),
			"github.com/seedqueue/sq/cmd/sq-server", "github.com/seedqueue/sq/cmd/sq").CombinedOutput()
		if err != nil {
			bins.err = fmt.Errorf("building sq-server and sq: %v\n%s", err, out)
		}
		bins.server = filepath.Join(bins.dir, "sq-server")
		bins.cli = filepath.Join(bins.dir, "sq")
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return clusternet.New(t, clusternet.Config{Nodes: n, ServerBin: bins.server})
}

// result is the outcome of one sq command.
type result struct {
	stdout, stderr string
	code           int
}

// runSQ runs the sq CLI in namespace ns against the data-plane address
// addr (its control plane at the same host's GRPCPort).
func runSQ(t *testing.T, ns *clusternet.Namespace, addr string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := ns.Command(ctx, bins.cli, append([]string{"--server", addr}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Stdin = strings.NewReader(stdin)
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("sq %v in %s: no exit within %v; stderr:\n%s", args, ns.Name, cliTimeout, r.stderr)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("sq %v in %s: %v", args, ns.Name, err)
	}
	return r
}

// sqOK runs sq and fails the test unless it exits with status 0.
func sqOK(t *testing.T, ns *clusternet.Namespace, addr string, stdin string, args ...string) string {
	t.Helper()
	r := runSQ(t, ns, addr, stdin, args...)
	if r.code != 0 {
		t.Fatalf("sq --server %s %v in %s: exit status %d; stderr:\n%s", addr, args, ns.Name, r.code, r.stderr)
	}
	return r.stdout
}

// eventually polls f until it returns nil, failing the test with f's last
// error after waitTimeout.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, waitTimeout, err)
		}
		time.Sleep(50 * time.Millisecond) // between polls of a bounded wait
	}
}

// dial connects from ns to addr within d and closes the connection.
func dial(ns *clusternet.Namespace, addr string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := ns.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// processGone reports whether pid no longer runs.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
