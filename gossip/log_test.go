package gossip

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestMain fails the run when a goroutine of this package, of raft or of
// memberlist outlives the tests (a small stand-in for goleak).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(5 * time.Second)
		for {
			leaked := leakedGoroutines()
			if leaked == "" {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goroutines leaked:\n%s\n", leaked)
				code = 1
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	os.Exit(code)
}

func leakedGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 || strings.Contains(g, "gossip.TestMain") {
			continue
		}
		for _, pkg := range []string{"github.com/seedqueue/sq/gossip.", "github.com/hashicorp/raft.", "github.com/hashicorp/memberlist."} {
			if strings.Contains(g, pkg) {
				out = append(out, g)
				break
			}
		}
	}
	return strings.Join(out, "\n\n")
}

// testWriter writes log lines to t.Log until the test has cleaned up: a
// line from a goroutine that is still stopping is dropped then.
type testWriter struct {
	t    *testing.T
	done *atomic.Bool
}

func (w testWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// testLogger logs to t at INFO.
func testLogger(t *testing.T) *slog.Logger {
	done := new(atomic.Bool)
	t.Cleanup(func() { done.Store(true) }) // registered first, runs last
	return slog.New(slog.NewTextHandler(testWriter{t, done}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
