// Package testutil holds helpers shared by the tests of several packages.
package testutil

import (
	"testing"

	"github.com/seedqueue/sq/ring"
)

// ForEachBackend runs fn once per I/O backend, as subtests named
// "backend=portable" and "backend=uring" (docs/architecture.md §3.4: the segment and
// engine suites run on both). The uring subtest skips with the probe's
// reason where the kernel refuses io_uring. The backend is closed when the
// subtest ends.
func ForEachBackend(t *testing.T, fn func(t *testing.T, be ring.Backend)) {
	t.Helper()
	for _, mode := range []string{ring.ModePortable, ring.ModeUring} {
		t.Run("backend="+mode, func(t *testing.T) { fn(t, NewBackend(t, mode)) })
	}
}

// NewBackend returns the backend of mode (ring.ModePortable or
// ring.ModeUring), closed at the end of the test, or skips the test when
// io_uring is unavailable.
func NewBackend(t testing.TB, mode string) ring.Backend {
	t.Helper()
	if mode == ring.ModePortable {
		return ring.NewPortable()
	}
	if ok, why := ring.Probe(); !ok {
		t.Skip("io_uring unavailable: " + why)
	}
	be, err := ring.NewUring()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Errorf("closing the backend: %v", err)
		}
	})
	return be
}
