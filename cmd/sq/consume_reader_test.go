package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
	"github.com/seedqueue/sq/sdk"
)

// recordConsumers replaces newConsumer for the test: each configuration
// is recorded, and the consumer started by start. It returns the
// configurations seen so far.
func recordConsumers(t *testing.T, start func(context.Context, sdk.ConsumerConfig) (*sdk.Consumer, error)) func() []sdk.ConsumerConfig {
	t.Helper()
	var mu sync.Mutex
	var cfgs []sdk.ConsumerConfig
	old := newConsumer
	newConsumer = func(ctx context.Context, cfg sdk.ConsumerConfig) (*sdk.Consumer, error) {
		mu.Lock()
		cfgs = append(cfgs, cfg)
		mu.Unlock()
		return start(ctx, cfg)
	}
	t.Cleanup(func() { newConsumer = old })
	return func() []sdk.ConsumerConfig {
		mu.Lock()
		defer mu.Unlock()
		return append([]sdk.ConsumerConfig(nil), cfgs...)
	}
}

// describeConsumer is the part of a consumer's configuration that says
// what it reads: "partitions [0] start map[0:1] end map[0:3]".
func describeConsumer(c sdk.ConsumerConfig) string {
	return fmt.Sprintf("partitions %v start %v end %v", c.Partitions, c.StartOffsets, c.EndOffsets)
}

// TestConsumeReadsThroughConsumer: every record `sq consume` prints, with
// or without --follow and --group, comes through an sdk.Consumer: without
// --follow one per partition in turn, bounded by the high watermarks at
// start; with --follow one over every partition; and when no consumer can
// be started, nothing is printed and the command fails with its error.
func TestConsumeReadsThroughConsumer(t *testing.T) {
	addr, _ := startData(t, false)
	if _, stderr, err := execConsumeCLI(context.Background(), "a\nb\nc\n", "--server", addr, "produce", "--topic", "orders", "--partition", "0"); err != nil {
		t.Fatalf("produce: %v %s", err, stderr)
	}
	if _, stderr, err := execConsumeCLI(context.Background(), "d\ne\n", "--server", addr, "produce", "--topic", "orders", "--partition", "1"); err != nil {
		t.Fatalf("produce: %v %s", err, stderr)
	}
	for _, tc := range []struct {
		args      []string
		out       string
		consumers []string
	}{
		{[]string{"-o", "+1"}, "b\nc\ne\n", []string{"partitions [0] start map[0:1] end map[0:3]", "partitions [1] start map[1:1] end map[1:2]"}},
		{[]string{"-p", "1"}, "d\ne\n", []string{"partitions [1] start map[1:0] end map[1:2]"}},
		{[]string{"-o", "-1", "-c", "1"}, "c\n", []string{"partitions [0] start map[0:2] end map[0:3]"}},
		{[]string{"-o", "end"}, "", nil}, // nothing below the high watermarks: no read at all
		{[]string{"--follow", "-o", "1", "-c", "3"}, "", []string{"partitions [0 1] start map[0:1 1:1] end map[]"}},
		{[]string{"-g", "readers", "-c", "5"}, "", []string{"partitions [] start map[] end map[]"}},
	} {
		seen := recordConsumers(t, sdk.NewConsumer)
		out, stderr, err := execConsumeCLI(context.Background(), "", append([]string{"--server", addr, "consume", "-t", "orders"}, tc.args...)...)
		if err != nil {
			t.Errorf("sq consume %v: %v %s", tc.args, err, stderr)
			continue
		}
		if tc.out != "" && out != tc.out {
			t.Errorf("sq consume %v printed %q, want %q", tc.args, out, tc.out)
		}
		if want := strings.Count(out, "\n"); tc.out == "" && want != atoiCount(tc.args) {
			t.Errorf("sq consume %v printed %d records, want %d", tc.args, want, atoiCount(tc.args))
		}
		var got []string
		for _, c := range seen() {
			got = append(got, describeConsumer(c))
		}
		if strings.Join(got, "; ") != strings.Join(tc.consumers, "; ") {
			t.Errorf("sq consume %v read through consumers %q, want %q", tc.args, got, tc.consumers)
		}
	}
	refused := errors.New("no consumer for this test")
	for _, args := range [][]string{nil, {"--follow"}, {"-p", "0", "-o", "-2"}, {"-g", "readers2"}} {
		recordConsumers(t, func(context.Context, sdk.ConsumerConfig) (*sdk.Consumer, error) { return nil, refused })
		out, _, err := execConsumeCLI(context.Background(), "", append([]string{"--server", addr, "consume", "-t", "orders"}, args...)...)
		if !errors.Is(err, refused) || out != "" {
			t.Errorf("sq consume %v without a consumer: printed %q, %v; want nothing and the consumer's error", args, out, err)
		}
	}
}

// atoiCount returns the value of -c in args (the records a run with
// --follow or --group prints, in whatever order they come).
func atoiCount(args []string) int {
	for i, a := range args {
		if a == "-c" && i+1 < len(args) {
			var n int
			_, _ = fmt.Sscan(args[i+1], &n)
			return n
		}
	}
	return 0
}

// shortEngine answers the fetches of partition 0 at or past offset cut
// with no records and a high watermark of cut, as a server whose log lost
// its tail in a restart would; once set, cut applies.
type shortEngine struct {
	*engine.Engine
	cut atomic.Int64 // -1: off
}

func (e *shortEngine) FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	if cut := e.cut.Load(); cut >= 0 && partition == 0 && offset >= uint64(cut) {
		return &engine.FetchResult{TopicID: id, HighWatermark: uint64(cut)}, nil
	}
	return e.Engine.FetchID(ctx, topic, id, partition, offset, maxBytes, maxWait)
}

// TestConsumeLogEndsShort: without --follow, a partition whose log now
// ends below the high watermark seen at start is read as far as it goes,
// said on stderr, and the next partitions are read: sq does not wait for
// the records lost.
func TestConsumeLogEndsShort(t *testing.T) {
	var se *shortEngine
	addr := serveEngine(t, func(eng *engine.Engine) dataplane.Broker {
		se = &shortEngine{Engine: eng}
		se.cut.Store(-1)
		return se
	})
	for p, in := range []string{"a\nb\nc\nd\n", "e\n"} {
		if _, stderr, err := execConsumeCLI(context.Background(), in, "--server", addr, "produce", "--topic", "orders", "--partition", fmt.Sprint(p)); err != nil {
			t.Fatalf("produce: %v %s", err, stderr)
		}
	}
	se.cut.Store(0)                                                       // (one batch holds a to d: a cut inside it would not show)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // guards against a hang only
	defer cancel()
	out, stderr, err := execConsumeCLI(ctx, "", "--server", addr, "consume", "-t", "orders")
	want := "sq: partition 0: no records at offset 0 below the high watermark 4; skipping the rest\n"
	if err != nil || out != "e\n" || stderr != want {
		t.Errorf("consume of a log cut back: %q, stderr %q, %v; want %q and stderr %q", out, stderr, err, "e\n", want)
	}
}
