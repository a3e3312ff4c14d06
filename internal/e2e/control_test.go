package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// controlAddrs returns the gRPC and HTTP addresses a server logged
// ("control plane listening", "HTTP listening"; JSON logs), waiting until
// both are there.
func controlAddrs(t *testing.T, s *server) (grpcAddr, httpAddr string) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		text, changed := s.log.Snapshot()
		for line := range strings.SplitSeq(text, "\n") {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			switch rec.Msg {
			case "control plane listening":
				grpcAddr = rec.Addr
			case "HTTP listening":
				httpAddr = rec.Addr
			}
		}
		if grpcAddr != "" && httpAddr != "" {
			return grpcAddr, httpAddr
		}
		select {
		case <-changed:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("no control plane and HTTP listening lines; log:\n%s", s.log)
		}
	}
}

func httpBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestControlPlaneOfTheBinary: the server binary serves /readyz, /metrics
// and the gRPC control plane, and the CLI reaches it with --control.
func TestControlPlaneOfTheBinary(t *testing.T) {
	srv := startServer(t, t.TempDir())
	grpcAddr, httpAddr := controlAddrs(t, srv)
	base := "http://" + httpAddr
	deadline := time.Now().Add(startTimeout)
	for {
		code, _ := httpBody(t, base+"/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sqOK(t, srv.addr, nil, "topic", "create", "ops", "--partitions", "1")
	sqOK(t, srv.addr, []byte("a\nb\nc\n"), "produce", "--topic", "ops")
	if _, body := httpBody(t, base+"/metrics"); !strings.Contains(body, `sq_published_records_total{topic="ops"} 3`) {
		t.Errorf("/metrics lacks sq_published_records_total{topic=\"ops\"} 3:\n%s", body)
	}
	out := sqOK(t, srv.addr, nil, "--control", grpcAddr, "cluster", "info")
	for _, want := range []string{"node-1", "I/O backend:", "1 topic", srv.addr} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster info lacks %q:\n%s", want, out)
		}
	}
	if code := srv.stop(); code != 0 {
		t.Fatalf("exit status %d after SIGTERM; log:\n%s", code, srv.log)
	}
}
