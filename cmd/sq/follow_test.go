package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/longpoll"
	"github.com/seedqueue/sq/net/dataplane"
)

// countingEngine counts the fetches of an engine. With noWait every fetch
// returns at once with no records, as a server that caps the long poll
// would answer.
type countingEngine struct {
	*engine.Engine
	noWait  bool
	fetches atomic.Int64
}

func (e *countingEngine) FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	e.fetches.Add(1)
	if e.noWait {
		return &engine.FetchResult{}, nil
	}
	return e.Engine.FetchID(ctx, topic, id, partition, offset, maxBytes, maxWait)
}

// startData serves the data plane of a fresh engine with topic "orders" (2
// partitions) on loopback; it stops at the end of the test.
func startData(t *testing.T, noWait bool) (string, *countingEngine) {
	t.Helper()
	var ce *countingEngine
	addr := serveEngine(t, func(eng *engine.Engine) dataplane.Broker {
		ce = &countingEngine{Engine: eng, noWait: noWait}
		return ce
	})
	return addr, ce
}

// serveEngine serves the data plane of wrap(a fresh engine with topic
// "orders" of 2 partitions) on loopback; it stops at the end of the test.
func serveEngine(t *testing.T, wrap func(*engine.Engine) dataplane.Broker) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateTopic("orders", 2, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	srv, err := dataplane.New(wrap(eng), dataplane.Options{NodeID: "cli-node", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
		eng.Close()
	})
	return ln.Addr().String()
}

// follow runs `sq consume --follow` on addr until ctx ends and returns its
// error on the channel.
func follow(ctx context.Context, addr string) <-chan error {
	done := make(chan error, 1)
	go func() {
		var out, errOut bytes.Buffer
		root := newRootCommand(nil, &out, &errOut, func(string) string { return "" })
		root.SetArgs([]string{"--server", addr, "consume", "--topic", "orders", "--follow"})
		done <- root.ExecuteContext(ctx)
	}()
	return done
}

// waitUntil polls cond until it holds, failing the test after a deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// `sq consume --follow` stops cleanly (as at Ctrl-C) when its context
// ends, whether the server holds the long polls or answers them at once.
func TestFollowEndsWithItsContext(t *testing.T) {
	for _, noWait := range []bool{false, true} {
		name := "long poll"
		if noWait {
			name = "no wait"
		}
		t.Run(name, func(t *testing.T) {
			addr, ce := startData(t, noWait)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := follow(ctx, addr)
			waitUntil(t, "both partitions polled", func() bool { return ce.fetches.Load() >= 2 })
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("consume --follow stopped with %v, want a clean stop", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("consume --follow did not stop with its context")
			}
		})
	}
}

// A server that answers the long polls of --follow at once with nothing
// does not make it spin: each partition pauses (longpoll.Pause) after such
// an answer, so the fetches are bounded by the time elapsed.
func TestFollowPausesAfterAnEarlyEmptyFetch(t *testing.T) {
	addr, ce := startData(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	done := follow(ctx, addr)
	waitUntil(t, "six fetches", func() bool { return ce.fetches.Load() >= 6 })
	n := ce.fetches.Load()
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		t.Logf("sq consume --follow after cancel: %v", err)
	}
	if most := 2 * (int64(elapsed/longpoll.Pause(followMaxWait)) + 2); n > most {
		t.Fatalf("%d fetches in %v: --follow spins (at most %d)", n, elapsed, most)
	}
}
