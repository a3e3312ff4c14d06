package longpoll

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Inside the bubble the clock moves only while every goroutine waits, so
// the pause is measured exactly.
func TestPauseAfterEmpty(t *testing.T) {
	tests := []struct {
		name    string
		maxWait time.Duration
		waited  time.Duration // how long the empty fetch took
		pause   time.Duration
	}{
		{"whole long poll", time.Second, time.Second, 0},
		{"early", time.Second, 10 * time.Millisecond, PauseMax},
		{"early, short long poll", 40 * time.Millisecond, 0, 10 * time.Millisecond},
		{"no long poll", 0, 0, time.Millisecond},
		{"tiny long poll", time.Microsecond, 0, time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				started := time.Now()
				time.Sleep(tc.waited)
				before := time.Now()
				if !PauseAfterEmpty(context.Background(), started, tc.maxWait) {
					t.Fatal("false without a cancelled context")
				}
				if got := time.Since(before); got != tc.pause {
					t.Fatalf("paused %v, want %v", got, tc.pause)
				}
			})
		})
	}
}

// A done context stops the loop at once, and a context cancelled during the
// pause ends the pause.
func TestPauseAfterEmptyEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan bool)
		go func() { done <- PauseAfterEmpty(ctx, time.Now(), time.Hour) }()
		synctest.Wait()
		cancel()
		synctest.Wait()
		select {
		case ok := <-done:
			if ok {
				t.Fatal("true after the context ended")
			}
		default:
			t.Fatal("the pause did not end with its context")
		}
		if PauseAfterEmpty(ctx, time.Now(), time.Hour) {
			t.Fatal("true with a done context")
		}
	})
}
