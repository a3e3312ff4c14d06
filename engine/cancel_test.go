package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// A long poll (a fetch at the high watermark with a long maxWait) ends as
// soon as its context is cancelled, the engine closes or the topic is
// deleted, each with its own error, long before its wait runs out.
func TestLongPollEnds(t *testing.T) {
	tests := []struct {
		name  string
		end   func(e *Engine, cancel context.CancelFunc)
		check func(error) bool
	}{
		{"context", func(_ *Engine, cancel context.CancelFunc) { cancel() },
			func(err error) bool { return errors.Is(err, context.Canceled) }},
		{"Close", func(e *Engine, _ context.CancelFunc) { go e.Close() },
			func(err error) bool { return codeOf(err) == api.CodeShuttingDown }},
		{"DeleteTopic", func(e *Engine, _ context.CancelFunc) {
			if err := e.DeleteTopic("t"); err != nil {
				t.Error(err)
			}
		}, func(err error) bool { return codeOf(err) == api.CodeUnknownTopic }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := openTest(t, testOptions(t.TempDir()))
			if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				r, err := e.Fetch(ctx, "t", 0, 0, 1024, time.Hour)
				if r != nil {
					r.Release()
				}
				errc <- err
			}()
			deadline := time.Now().Add(20 * time.Second)
			for e.InFlight() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the long poll never started")
				}
				time.Sleep(time.Millisecond)
			}
			tc.end(e, cancel)
			select {
			case err := <-errc:
				if !tc.check(err) {
					t.Fatalf("long poll ended with %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("long poll did not end")
			}
		})
	}
}
