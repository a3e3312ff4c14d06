package e2e

import (
	"net"
	"strings"
	"testing"
)

// badPort is a listen address that cannot be bound, so a server given it
// fails at once and names it.
const badPort = "127.0.0.1:99999"

// TestServerFlags checks sq-server's configuration: SQ_* environment
// variables, flags winning over them, the seed's command line, a clear
// error for an invalid value, and a clean SIGTERM stop whose data a restart
// finds.
func TestServerFlags(t *testing.T) {
	t.Parallel()

	t.Run("env applies", func(t *testing.T) {
		p := launch(t, []string{"SQ_CAPNP_HOST=127.0.0.1:0", "SQ_LOG_FORMAT=json"}, "serve", "--data-dir", t.TempDir())
		addr := p.waitListening(t)
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" || port == "6064" || port == "0" {
			t.Fatalf("listening on %q: want 127.0.0.1 and the free port SQ_CAPNP_HOST asked for", addr)
		}
		sqOK(t, addr, nil, "topic", "list")
		if !strings.HasPrefix(strings.TrimSpace(p.log.String()), "{") {
			t.Errorf("SQ_LOG_FORMAT=json ignored; log:\n%s", p.log)
		}

		bad := launch(t, []string{"SQ_CAPNP_HOST=" + badPort}, "serve", "--data-dir", t.TempDir())
		code, ok := bad.exitCode(startTimeout)
		if !ok || code == 0 || !strings.Contains(bad.log.String(), "99999") {
			t.Errorf("SQ_CAPNP_HOST=%s: status %d (exited %v), log %q; want a failure naming the address", badPort, code, ok, bad.log)
		}
	})

	t.Run("flag wins over env", func(t *testing.T) {
		p := launch(t, []string{"SQ_CAPNP_HOST=" + badPort, "SQ_SYNC_POLICY=bogus"},
			"serve", "--capnp-host", "127.0.0.1:0", "--sync-policy", "none", "--data-dir", t.TempDir(), "--log-format", "json")
		addr := p.waitListening(t)
		sqOK(t, addr, nil, "topic", "list")
	})

	t.Run("seed command line", func(t *testing.T) {
		p := launch(t, nil, "--node-id", "n1", "--capnp-host", "127.0.0.1:0", "--data-dir", t.TempDir(), "serve")
		addr := p.waitListening(t)
		sqOK(t, addr, nil, "topic", "create", "seed", "--partitions", "2")
		if out := sqOK(t, addr, nil, "topic", "list"); !strings.Contains(out, "seed") {
			t.Errorf("topic list:\n%s", out)
		}
	})

	t.Run("invalid sync policy", func(t *testing.T) {
		p := launch(t, nil, "serve", "--capnp-host", "127.0.0.1:0", "--data-dir", t.TempDir(), "--sync-policy", "sometimes")
		code, ok := p.exitCode(startTimeout)
		log := p.log.String()
		if !ok || code == 0 || !strings.Contains(log, "sync-policy") || !strings.Contains(log, "sometimes") || !strings.Contains(log, "every-batch") {
			t.Errorf("--sync-policy sometimes: status %d (exited %v), output %q; want a non-zero exit naming the flag, the value and the accepted forms", code, ok, log)
		}
	})

	t.Run("SIGTERM then restart", func(t *testing.T) {
		srv := startServer(t, t.TempDir())
		sqOK(t, srv.addr, nil, "topic", "create", "kept", "--partitions", "2")
		sqOK(t, srv.addr, []byte("one\ntwo\nthree\n"), "produce", "--topic", "kept")
		srv = srv.restart(t) // requires exit status 0 after SIGTERM
		out := sqOK(t, srv.addr, nil, "consume", "--topic", "kept")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 3 || !strings.Contains(out, "one\n") || !strings.Contains(out, "two\n") || !strings.Contains(out, "three\n") {
			t.Errorf("after restart consumed %q, want one, two, three", out)
		}
	})
}
