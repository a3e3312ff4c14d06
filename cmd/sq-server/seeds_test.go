package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/ratelog"
	"github.com/seedqueue/sq/internal/testutil"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
)

// joiningServer runs a clustered sq-server (all listeners on 127.0.0.1
// port 0) with --seeds seeds until the returned stop is called; stop
// returns run's error. The server logs at DEBUG into the buffer returned.
func joiningServer(t *testing.T, seeds []string) (httpAddr func() string, logs *testutil.LogBuffer, stop func() error) {
	t.Helper()
	var c config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bindFlags(fs, &c)
	if err := fs.Parse([]string{"--data-dir", t.TempDir(), "--capnp-host", "127.0.0.1:0", "--grpc-host", "127.0.0.1:0",
		"--http-host", "127.0.0.1:0", "--io-backend", "portable", "--seeds", strings.Join(seeds, ",")}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var addr string
	c.hooks = &hooks{listening: func(plane, a string) {
		if plane == "http" {
			mu.Lock()
			addr = a
			mu.Unlock()
		}
	}}
	logs = testutil.NewLogBuffer()
	// The server's own limiter (config.logger) around the handler.
	log := slog.New(ratelog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}), ratelog.Options{}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, &c, log) }()
	stopped := false
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the server did not stop within 20 s of its stop")
			}
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	httpAddr = func() string {
		mu.Lock()
		defer mu.Unlock()
		return addr
	}
	return httpAddr, logs, stop
}

// readyz returns /readyz's status and body.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// poll waits until cond holds, failing after d.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, d, what, cond)
}

// --seeds that are not SQ nodes (nothing listening, an HTTP server, a
// gRPC server without the Cluster service) are each logged once as a
// WARN with a hint while the node keeps trying; /readyz says the node is
// joining through the seeds; a stop then exits cleanly.
func TestSeedsThatAreNotNodes(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other := grpc.NewServer()
	go func() { _ = other.Serve(gln) }()
	defer other.Stop()
	webAddr := strings.TrimPrefix(web.URL, "http://")
	seeds := []string{refused, webAddr, gln.Addr().String()}
	hints := map[string]string{refused: "is the node up", webAddr: "does not speak gRPC", gln.Addr().String(): "not an SQ node"}

	httpAddr, logs, stop := joiningServer(t, seeds)
	warns := func(seed string) int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "seed="+seed) {
				n++
			}
		}
		return n
	}
	poll(t, 20*time.Second, "a WARN per seed and three rounds of retries", func() bool {
		for _, s := range seeds {
			if warns(s) == 0 {
				return false
			}
		}
		return strings.Count(logs.String(), "join failed; retrying") >= 3
	})
	for _, l := range strings.Split(logs.String(), "\n") {
		for seed, hint := range hints {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "seed="+seed) && !strings.Contains(l, hint) {
				t.Errorf("WARN about seed %s has no hint %q: %s", seed, hint, l)
			}
		}
	}
	for _, s := range seeds {
		if n := warns(s); n != 1 {
			t.Errorf("seed %s: %d WARN lines, want 1", s, n)
		}
	}
	code, body := readyz(t, httpAddr())
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "joining the cluster through --seeds "+strings.Join(seeds, ",")) {
		t.Errorf("/readyz while joining: %d %q", code, body)
	}
	if err := stop(); err != nil {
		t.Fatalf("stop while joining: %v, want a clean exit", err)
	}
}

// A stop (SIGINT, SIGTERM) while the node waits for a seed that accepts
// connections and never answers ends the join at once and exits cleanly.
func TestStopWhileJoiningASilentSeed(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	defer func() {
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	}()
	httpAddr, _, stop := joiningServer(t, []string{silent.Addr().String()})
	var c net.Conn
	select {
	case c = <-accepted:
		accepted <- c
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not dial its seed")
	}
	poll(t, 10*time.Second, "/readyz says the node is joining", func() bool {
		a := httpAddr()
		if a == "" {
			return false
		}
		code, body := readyz(t, a)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "joining the cluster through --seeds "+silent.Addr().String())
	})
	if err := stop(); err != nil {
		t.Fatalf("stop while joining a silent seed: %v, want a clean exit", err)
	}
}
