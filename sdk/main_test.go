package sdk

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain fails the run when a goroutine of this package outlives the
// tests (a small stand-in for goleak that needs no extra module).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitNoLeaks(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func waitNoLeaks(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		leaked := leakedGoroutines()
		if leaked == "" || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func leakedGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // this goroutine
			continue
		}
		if strings.Contains(g, "github.com/seedqueue/sq/sdk.") && !strings.Contains(g, "sdk.TestMain") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// logBuffer is a concurrency-safe log sink for asserting on warnings.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func newTestProducer(t testing.TB, s *fakeServer, mod ...func(*ProducerConfig)) *Producer {
	t.Helper()
	cfg := ProducerConfig{Addr: s.addr, ClientID: "test-producer", RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond,
		ReconnectBackoff: time.Millisecond, ReconnectBackoffMax: 10 * time.Millisecond}
	for _, f := range mod {
		f(&cfg)
	}
	p, err := NewProducer(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func newTestConsumer(t testing.TB, s *fakeServer, cfg ConsumerConfig) *Consumer {
	t.Helper()
	return newConsumerAt(t, s.addr, cfg)
}

// newConsumerAt starts a consumer of the server at addr with short waits
// and backoffs, closed at the end of the test.
func newConsumerAt(t testing.TB, addr string, cfg ConsumerConfig) *Consumer {
	t.Helper()
	cfg.Addr = addr
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 50 * time.Millisecond
	}
	if cfg.ReconnectBackoff == 0 {
		cfg.ReconnectBackoff, cfg.ReconnectBackoffMax = time.Millisecond, 10*time.Millisecond
	}
	c, err := NewConsumer(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pollN polls until n messages arrived or the deadline passes.
func pollN(t testing.TB, c *Consumer, n int) []Message {
	t.Helper()
	ctx := testCtx(t)
	var out []Message
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d messages", len(out), n)
		}
		msgs, err := c.Poll(ctx)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		out = append(out, msgs...)
	}
	return out
}
