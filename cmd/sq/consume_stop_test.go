package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
)

// failingFetches fails every fetch of partition 1 with a corrupt batch, as
// a damaged log would.
type failingFetches struct{ *engine.Engine }

func (e failingFetches) FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	if partition == 1 {
		return nil, api.NewError(api.CodeCorruptBatch, "partition 1 of %q: batch at offset %d fails its checksum", topic, offset)
	}
	return e.Engine.FetchID(ctx, topic, id, partition, offset, maxBytes, maxWait)
}

// produceTo sends lines to partition p of "orders" at addr with sq produce.
func produceTo(t *testing.T, addr, lines string, p string) {
	t.Helper()
	if _, errOut, err := execConsumeCLI(context.Background(), lines, "--server", addr, "produce", "-t", "orders", "-p", p); err != nil {
		t.Fatalf("produce: %v (%s)", err, errOut)
	}
}

// A read that fails after it printed records says on stderr how many
// records it printed and each partition's next offset, as Ctrl-C does, so
// that it can be taken up again with -o; then the error. Bounded: partition
// 0 is read, partition 1 fails.
func TestConsumeFailureSaysWhereItStopped(t *testing.T) {
	addr := serveEngine(t, func(e *engine.Engine) dataplane.Broker { return failingFetches{e} })
	produceTo(t, addr, "a\nb\nc\n", "0")
	produceTo(t, addr, "d\n", "1")
	out, errOut, err := execConsumeCLI(context.Background(), "", "--server", addr, "consume", "-t", "orders")
	if !errors.Is(err, api.ErrCorruptBatch) {
		t.Fatalf("err = %v, want CORRUPT_BATCH (stderr %q)", err, errOut)
	}
	if out != "a\nb\nc\n" {
		t.Errorf("stdout = %q, want partition 0's records", out)
	}
	if want := "sq: stopped: printed 3 records of orders; next offsets 0:3 1:0\n"; !strings.Contains(errOut, want) {
		t.Errorf("stderr = %q, want %q", errOut, want)
	}
}

// The same with --follow, when the topic is deleted under it.
func TestConsumeFollowSaysWhereItStoppedWhenTheTopicGoes(t *testing.T) {
	var eng *engine.Engine
	addr := serveEngine(t, func(e *engine.Engine) dataplane.Broker { eng = e; return e })
	produceTo(t, addr, "a\nb\nc\n", "0")
	produceTo(t, addr, "d\n", "1")
	var out, errOut consumeBuffer
	root := newRootCommand(nil, &out, &errOut, func(string) string { return "" })
	root.SetArgs([]string{"--server", addr, "consume", "-t", "orders", "--follow"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(context.Background()) }()
	waitUntil(t, "the 4 records printed", func() bool { return strings.Count(out.String(), "\n") == 4 })
	if err := eng.DeleteTopic("orders"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("sq consume --follow returned nil after its topic was deleted (stderr %q)", errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sq consume --follow still runs 30s after its topic was deleted")
	}
	if want := "sq: stopped: printed 4 records of orders; next offsets 0:3 1:1\n"; !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr = %q, want %q", errOut.String(), want)
	}
}

// serverGoes stops the whole server at the first fetch of partition 1, as
// a server killed in the middle of a read.
type serverGoes struct {
	*engine.Engine
	stop func()
}

func (e serverGoes) FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	if partition == 1 {
		go e.stop()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return e.Engine.FetchID(ctx, topic, id, partition, offset, maxBytes, maxWait)
}

// A server lost in the middle of a read is said as such, not as an
// address to correct: it answered at start.
func TestConsumeSaysTheServerWasLost(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if _, err := eng.CreateTopic("orders", 2, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var srv *dataplane.Server
	var once sync.Once
	stop := func() { once.Do(func() { srv.Close() }) }
	srv, err = dataplane.New(serverGoes{eng, stop}, dataplane.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(served) }()
	defer func() { stop(); <-served }()
	addr := ln.Addr().String()
	produceTo(t, addr, "a\nb\n", "0")
	produceTo(t, addr, "c\n", "1")
	out, errOut, err := execConsumeCLI(context.Background(), "", "--server", addr, "--timeout", "2s", "consume", "-t", "orders")
	if err == nil || !strings.Contains(err.Error(), "lost the SQ server at "+addr) || strings.Contains(err.Error(), "set the address") {
		t.Fatalf("err = %v, want it to say the server at %s was lost (stderr %q)", err, addr, errOut)
	}
	if out != "a\nb\n" {
		t.Errorf("stdout = %q, want partition 0's records", out)
	}
	if want := "sq: stopped: printed 2 records of orders; next offsets 0:2 1:0\n"; !strings.Contains(errOut, want) {
		t.Errorf("stderr = %q, want %q", errOut, want)
	}
}

// The same for a group member (-g): the line also says whether what was
// printed is committed.
func TestConsumeGroupSaysWhereItStoppedWhenTheTopicGoes(t *testing.T) {
	var eng *engine.Engine
	addr := serveEngine(t, func(e *engine.Engine) dataplane.Broker { eng = e; return e })
	produceTo(t, addr, "a\nb\nc\n", "0")
	var out, errOut consumeBuffer
	root := newRootCommand(nil, &out, &errOut, func(string) string { return "" })
	root.SetArgs([]string{"--server", addr, "consume", "-t", "orders", "-g", "billing", "--follow"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(context.Background()) }()
	waitUntil(t, "the 3 records printed", func() bool { return strings.Count(out.String(), "\n") == 3 })
	if err := eng.DeleteTopic("orders"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("sq consume -g --follow returned nil after its topic was deleted (stderr %q)", errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sq consume -g --follow still runs 30s after its topic was deleted")
	}
	if want := "sq: stopped: printed 3 records of orders; next offsets 0:3"; !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr = %q, want %q", errOut.String(), want)
	}
}
