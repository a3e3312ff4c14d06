package control_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/longpoll"
)

// watchedEngine counts the fetches of an engine: those running, those
// started, and those started with a context already done (a loop that
// does not look at its context). With noWait every fetch returns at once
// with no records, as an engine that cannot wait would.
type watchedEngine struct {
	*engine.Engine
	noWait  bool
	active  atomic.Int64
	started atomic.Int64
	late    atomic.Int64
	lastCtx atomic.Value // context.Context of the latest fetch
}

// stopped reports whether the latest fetch's context is done, no fetch
// runs, and none started since the previous call (eventually calls it
// every few milliseconds).
func (e *watchedEngine) stopped(prev *int64) bool {
	ctx, _ := e.lastCtx.Load().(context.Context)
	n := e.started.Load()
	quiet := n == *prev
	*prev = n
	return ctx != nil && ctx.Err() != nil && e.active.Load() == 0 && quiet
}

func (e *watchedEngine) FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	e.lastCtx.Store(ctx)
	e.started.Add(1)
	if err := ctx.Err(); err != nil {
		e.late.Add(1)
		return nil, err // ends a loop that would otherwise spin on
	}
	e.active.Add(1)
	defer e.active.Add(-1)
	if e.noWait {
		return &engine.FetchResult{}, nil
	}
	return e.Engine.FetchID(ctx, topic, id, partition, offset, maxBytes, maxWait)
}

// subscribeWatched starts a node whose engine is watched and opens a
// Subscribe stream at the end of an empty partition.
func subscribeWatched(t *testing.T, noWait bool) (*node, *watchedEngine, context.CancelFunc) {
	n := startNode(t, control.Options{})
	w := &watchedEngine{Engine: n.eng, noWait: noWait}
	n.srv.SetEngine(w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "t", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := sqv1.NewMessagingClient(n.conn).Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "t", From: sqv1.StartFrom_START_FROM_LATEST}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stream fetching", func() bool { return w.started.Load() >= 2 })
	return n, w, cancel
}

// A Subscribe stream ends when its client cancels it or the server starts
// shutting down, whether the engine waits in a long poll or answers every
// fetch at once with nothing: no fetch runs afterwards and none starts
// with a done context.
func TestSubscribeEndsWithItsStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(n *node, cancel context.CancelFunc)
	}{
		{"client cancels", func(_ *node, cancel context.CancelFunc) { cancel() }},
		{"shutdown", func(n *node, _ context.CancelFunc) { n.srv.StartShutdown() }},
	} {
		for _, noWait := range []bool{false, true} {
			name := tc.name + "/long poll"
			if noWait {
				name = tc.name + "/no wait"
			}
			t.Run(name, func(t *testing.T) {
				n, w, cancel := subscribeWatched(t, noWait)
				tc.end(n, cancel)
				prev := int64(-1)
				eventually(t, "the stream's fetches to stop", func() bool { return w.stopped(&prev) })
				if late := w.late.Load(); late > 0 {
					t.Fatalf("%d fetches started after the stream ended", late)
				}
			})
		}
	}
}

// An engine that answers every fetch at once with nothing cannot make a
// Subscribe stream spin: after each early empty fetch the stream pauses
// (longpoll.Pause of SubscribeMaxWait, 100 ms in these tests), so the
// fetches are bounded by the time elapsed, however slow the machine.
func TestSubscribePausesAfterAnEarlyEmptyFetch(t *testing.T) {
	start := time.Now()
	_, w, _ := subscribeWatched(t, true)
	eventually(t, "ten fetches", func() bool { return w.started.Load() >= 10 })
	n := w.started.Load()
	if most := int64(time.Since(start)/longpoll.Pause(100*time.Millisecond)) + 2; n > most {
		t.Fatalf("%d fetches in %v: the stream spins (at most %d)", n, time.Since(start), most)
	}
}
