package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// trashEntries lists the data directory's trash.
func trashEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, trashDir))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestDeleteTopicWhileReading is case k: a topic deleted while a consumer
// holds a fetch result (its mappings) and another waits in a long poll: no
// crash, the long poll and new requests get UNKNOWN_TOPIC, the held
// result stays readable, the directory goes when it is released, and a
// new topic of the same name starts empty.
func TestDeleteTopicWhileReading(t *testing.T) {
	clk := newRetClock()
	dir := t.TempDir()
	opts := retentionOptions(dir, clk)
	e := openTest(t, opts)
	if _, err := e.CreateTopic("doomed", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, "doomed", 60, 20) // several segments
	if _, err := e.CommitOffsets("grp", "", -1, []OffsetCommit{{Topic: "doomed", Partition: 0, Offset: 10}}); err != nil {
		t.Fatal(err)
	}
	held, err := e.Fetch(context.Background(), "doomed", 0, 0, 1<<20, 0)
	if err != nil || len(held.Bufs) == 0 {
		t.Fatalf("Fetch = %v, %v", held, err)
	}
	polled := make(chan error, 1)
	go func() {
		r, err := e.Fetch(context.Background(), "doomed", 1, 0, 1<<20, 30*time.Second)
		if r != nil {
			r.Release()
		}
		polled <- err
	}()
	// Wait until the long poll is in progress (it may still be before its
	// wait; either way it must end with UNKNOWN_TOPIC).
	for deadline := time.Now().Add(10 * time.Second); e.InFlight() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("long poll never started")
		}
		runtime.Gosched()
	}
	if err := e.DeleteTopic("doomed"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-polled:
		if codeOf(err) != api.CodeUnknownTopic {
			t.Fatalf("long poll ended with %v, want UNKNOWN_TOPIC", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long poll not woken by the delete")
	}
	if _, err := os.Stat(filepath.Join(dir, "topics", "doomed")); !os.IsNotExist(err) {
		t.Fatalf("topic directory still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "meta", "topics", "doomed.json")); !os.IsNotExist(err) {
		t.Fatalf("metadata still there: %v", err)
	}
	if got := trashEntries(t, dir); len(got) != 1 {
		t.Fatalf("trash holds %v while a reader holds the topic", got)
	}
	for name, err := range map[string]error{
		"fetch":    fetchErr(e, "doomed"),
		"append":   appendErr(t, e, "doomed"),
		"describe": describeErr(e, "doomed"),
		"delete":   e.DeleteTopic("doomed"),
	} {
		if codeOf(err) != api.CodeUnknownTopic {
			t.Errorf("%s after delete = %v, want UNKNOWN_TOPIC", name, err)
		}
	}
	if _, _, err := e.ListOffsets("doomed", 0, -2); codeOf(err) != api.CodeUnknownTopic {
		t.Errorf("ListOffsets after delete = %v", err)
	}
	// The held result still reads: its mappings outlive the unlink.
	for _, buf := range held.Bufs {
		for len(buf) > 0 {
			b, rest, _, err := batch.Split(buf, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := batch.CheckHeader(b); err != nil {
				t.Fatal(err)
			}
			buf = rest
		}
	}
	held.Release()
	if got := trashEntries(t, dir); len(got) != 0 {
		t.Fatalf("trash still holds %v after the last reader released", got)
	}
	offs, err := e.FetchOffsets("grp", "doomed")
	if err != nil || len(offs) != 0 {
		t.Fatalf("group offsets of the deleted topic = %+v, %v", offs, err)
	}
	// The name is free at once, and the new topic is empty.
	if _, err := e.CreateTopic("doomed", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if pi := partInfo(t, e, "doomed"); pi.HighWatermark != 0 || pi.LogStartOffset != 0 || pi.SizeBytes != 0 {
		t.Fatalf("new topic of the same name: %+v", pi)
	}
	appendN(t, e, "doomed", 1, 3)
	if n := readRange(t, e, "doomed", 0); n != 3 {
		t.Fatalf("read %d records from the new topic", n)
	}
	// The deletion is durable, and the group offsets stay dropped.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, opts)
	if pi := partInfo(t, e, "doomed"); pi.HighWatermark != 3 {
		t.Fatalf("after restart: %+v", pi)
	}
	if offs, _ := e.FetchOffsets("grp", "doomed"); len(offs) != 0 {
		t.Fatalf("group offsets after restart: %+v", offs)
	}
}

// TestDeleteTopicLeftoversRemovedAtStart: what a crash leaves in the trash
// is removed by the next Open.
func TestDeleteTopicLeftoversRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	opts := retentionOptions(dir, newRetClock())
	e := openTest(t, opts)
	if _, err := e.CreateTopic("x", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	held, err := e.Fetch(context.Background(), "x", 0, 0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	if err := e.DeleteTopic("x"); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := trashEntries(t, dir); len(got) != 1 {
		t.Fatalf("trash holds %v", got)
	}
	e = openTest(t, opts)
	if got := trashEntries(t, dir); len(got) != 0 {
		t.Fatalf("trash holds %v after restart", got)
	}
	if len(e.ListTopics()) != 0 {
		t.Fatalf("topics after restart: %+v", e.ListTopics())
	}
}

func fetchErr(e *Engine, topic string) error {
	r, err := e.Fetch(context.Background(), topic, 0, 0, 1, 0)
	if r != nil {
		r.Release()
	}
	return err
}

func appendErr(t *testing.T, e *Engine, topic string) error {
	_, err := e.Append(context.Background(), topic, 0, mkBatch(t, "x"))
	return err
}

func describeErr(e *Engine, topic string) error {
	_, err := e.DescribeTopic(topic)
	return err
}

// TestDeleteTopicUnderLoad deletes and recreates a topic while producers
// and readers keep using it: every error is UNKNOWN_TOPIC (or a fetch
// offset beyond a recreated topic's end), nothing crashes, and the trash
// ends empty.
func TestDeleteTopicUnderLoad(t *testing.T) {
	dir := t.TempDir()
	e := openTest(t, retentionOptions(dir, newRetClock()))
	if _, err := e.CreateTopic("churn", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	report := func(err error) {
		switch {
		case err == nil, errors.Is(err, context.Canceled),
			codeOf(err) == api.CodeUnknownTopic, codeOf(err) == api.CodeOffsetOutOfRange:
		default:
			select {
			case errs <- err:
			default:
			}
		}
	}
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for ctx.Err() == nil {
				if w%2 == 0 {
					_, err := e.Append(ctx, "churn", w/2, mkBatch(t, "x", "y"))
					report(err)
					continue
				}
				r, err := e.Fetch(ctx, "churn", w/2, 0, 1<<16, 5*time.Millisecond)
				if err == nil {
					for _, buf := range r.Bufs {
						for len(buf) > 0 {
							b, rest, _, err := batch.Split(buf, 0)
							if err == nil {
								_, err = batch.CheckHeader(b)
							}
							if err != nil {
								report(fmt.Errorf("batch read while deleting: %w", err))
								break
							}
							buf = rest
						}
					}
					r.Release()
				}
				report(err)
			}
		})
	}
	for i := 0; i < 20; i++ {
		if err := e.DeleteTopic("churn"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.CreateTopic("churn", 2, TopicConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("unexpected error under delete: %v", err)
	}
	if got := trashEntries(t, dir); len(got) != 0 {
		t.Fatalf("trash holds %v after every reader finished", got)
	}
}
