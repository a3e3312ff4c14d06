package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/testutil"
)

// buildServer builds the sq-server binary into a temporary directory.
func buildServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sq-server")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// notifySocket listens on a unixgram socket as systemd does for
// NOTIFY_SOCKET and returns its path and the messages it receives, in
// order. The path is short: sun_path holds 108 bytes.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sqn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan string, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return path, msgs
}

// TestSystemdNotify runs the binary as systemd runs a Type=notify unit
// with WatchdogSec, its settings from a config file, a variable and a
// flag together: it sends WATCHDOG=1 from the start, READY=1 only once
// /readyz answers 200, STOPPING=1 at SIGTERM, then exits 0; the effective
// settings are each layer's.
func TestSystemdNotify(t *testing.T) {
	bin := buildServer(t)
	sock, msgs := notifySocket(t)
	dataDir := t.TempDir()
	cfg := writeConfig(t, "sq-server.toml", `node-id = "from-file"
cluster-id = "file-cluster"
http-host = "127.0.0.1:0"
capnp-host = "127.0.0.1:0"
grpc-host = ""
io-backend = "portable"
data-dir = "/nonexistent/overridden-by-the-flag"
`)
	logs := testutil.NewLogBuffer()
	cmd := exec.Command(bin, "serve", "--data-dir", dataDir)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=400000", "SQ_CONFIG="+cfg, "SQ_NODE_ID=from-env")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			if err := <-exited; err != nil {
				t.Log(err) // killed: "signal: killed"
			}
		}
	})

	deadline := time.After(60 * time.Second)
	var got []string // the messages other than WATCHDOG=1, in order
	watchdogs := 0
	next := func(what string) string {
		t.Helper()
		for {
			select {
			case m := <-msgs:
				if m == "WATCHDOG=1" {
					watchdogs++
					continue
				}
				got = append(got, m)
				return m
			case err := <-exited:
				t.Fatalf("sq-server exited (%v) before %s; log:\n%s", err, what, logs.String())
			case <-deadline:
				t.Fatalf("no %s; messages %q; log:\n%s", what, got, logs.String())
			}
		}
	}
	if m := next("READY=1"); m != "READY=1" {
		t.Fatalf("first message %q, want READY=1", m)
	}
	addr := regexp.MustCompile(`msg="HTTP listening" addr=(\S+)`).FindStringSubmatch(logs.String())
	if addr == nil {
		t.Fatalf("no HTTP address in the log:\n%s", logs.String())
	}
	resp, err := http.Get("http://" + addr[1] + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz %d right after READY=1, want 200", resp.StatusCode)
	}
	if want := `node_id=from-env cluster_id=file-cluster data_dir=` + dataDir; !strings.Contains(logs.String(), want) {
		t.Errorf("start line without %q (env > file, flag > file):\n%s", want, logs.String())
	}
	testutil.Eventually(t, 30*time.Second, "a WATCHDOG=1 after READY=1", func() bool {
		select {
		case m := <-msgs:
			if m == "WATCHDOG=1" {
				return true
			}
			got = append(got, m)
		default:
		}
		return false
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if m := next("STOPPING=1"); m != "STOPPING=1" {
		t.Fatalf("after READY=1, %q; want STOPPING=1 (messages %q)", m, got)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; log:\n%s", err, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	if len(got) != 2 {
		t.Errorf("messages %q, want READY=1, STOPPING=1", got)
	}
}

// TestBinaryConfigFileError: the binary refuses a config file with a
// misspelled key, naming the key and its line, before it starts.
func TestBinaryConfigFileError(t *testing.T) {
	bin := buildServer(t)
	for _, tc := range []struct{ name, body, want string }{
		{"sq.toml", "node-id = \"n1\"\n# retention\nretention-msec = 1000\n", `sq.toml:3: unknown setting "retention-msec": did you mean "retention-ms"?`},
		{"sq.yaml", "node-id: n1\nretention-msec: 1000\n", `sq.yaml:2: unknown setting "retention-msec": did you mean "retention-ms"?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, "serve", "--config", writeConfig(t, tc.name, tc.body), "--data-dir", t.TempDir()).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), tc.want) {
				t.Fatalf("exit %v, output %q; want exit 1 and %q", err, out, tc.want)
			}
		})
	}
}
