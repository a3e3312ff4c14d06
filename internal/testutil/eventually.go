package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond every 10 ms until it holds, and fails the test
// naming what when it still does not after d: a wait for state by
// polling with a deadline, never by sleeping a guessed time.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not a wait for state
	}
}
