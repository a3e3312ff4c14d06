package testutil

import (
	"os"
	"sync"
	"syscall"
	"testing"
)

// OpenFDs returns the number of file descriptors of this process (the
// entries of /proc/self/fd, less the one that reads the directory), or
// skips the test where there is no /proc.
func OpenFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents) - 1
}

// LimitOpenFiles lowers the soft RLIMIT_NOFILE of the whole process to n
// descriptors (never raises it) until the returned function, also run at
// the end of the test, restores it: opens past n fail with EMFILE
// (getrlimit(2)). Tests that use it must not run in parallel with others.
func LimitOpenFiles(t testing.TB, n int) (restore func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	low := old
	low.Cur = min(old.Cur, uint64(n))
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	var once sync.Once
	restore = func() {
		once.Do(func() {
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
				t.Errorf("restoring RLIMIT_NOFILE: %v", err)
			}
		})
	}
	t.Cleanup(restore)
	return restore
}

// ExhaustOpenFiles leaves the process no free file descriptor: it lowers
// RLIMIT_NOFILE to the descriptors open now and fills any left below it
// (up to 64) with /dev/null, so the next open fails with EMFILE, until the
// returned function, also run at the end of the test, closes them and
// restores the limit. Tests that use it must not run in parallel with
// others.
func ExhaustOpenFiles(t testing.TB) (restore func()) {
	t.Helper()
	lift := LimitOpenFiles(t, OpenFDs(t))
	var fill []*os.File
	for range 64 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		fill = append(fill, f)
	}
	var once sync.Once
	restore = func() {
		once.Do(func() {
			for _, f := range fill {
				f.Close()
			}
			lift()
		})
	}
	t.Cleanup(restore)
	return restore
}
