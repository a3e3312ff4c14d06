package ring

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Backend modes accepted by Select and by sq-server's --io-backend flag.
const (
	// ModeAuto selects io_uring when Probe passes and AutoPrefersUring is
	// true, the portable backend otherwise.
	ModeAuto = "auto"
	// ModeUring requires io_uring; Select fails if Probe does not pass.
	ModeUring = "uring"
	// ModePortable selects the portable backend (pwritev + fdatasync).
	ModePortable = "portable"
)

// AutoPrefersUring records the result of the committed append benchmark
// (benchmarks/, figures and machine in docs/performance.md): whether the
// io_uring backend was ahead of the portable one for every-batch appends.
// ModeAuto selects io_uring only when it is true. It was not, in either
// round: the shared ring, the SINGLE_ISSUER|DEFER_TASKRUN and SQPOLL
// drivers (UringOptions) and RWF_DSYNC writes were each no faster than
// pwritev + fdatasync, and some significantly slower. Re-run the benchmark
// and update this constant (and the document) when the write path changes.
const AutoPrefersUring = false

// WriteSyncer is implemented by backends that can submit a write and the
// fdatasync(2) that follows it together (the io_uring backend links them
// with IOSQE_IO_LINK in one io_uring_enter(2)). Callers that append and
// then sync the same file may type-assert a Backend to it.
type WriteSyncer interface {
	// WriteAndSync writes bufs back to back at byte offset off of f, like
	// Backend.WriteAt, then makes the file's data durable like
	// Backend.Sync(f). It returns the number of bytes written; a non-nil
	// error with n equal to the total means the sync failed, and the data
	// must then be treated as lost (see Backend.Sync).
	WriteAndSync(f File, bufs [][]byte, off int64) (n int64, err error)
}

// DsyncWriter is implemented by backends that can write with RWF_DSYNC
// (pwritev2(2), io_uring's WRITEV rw_flags): the write returns once its
// data, and the metadata needed to read it back (the file size, the
// conversion of preallocated unwritten extents), are durable, as if each
// write were followed by fdatasync(2) of its range, in one call. Both
// backends implement it. Callers that sync after every write may
// type-assert a Backend to it.
type DsyncWriter interface {
	// WriteAtDsync writes bufs back to back at byte offset off of f, like
	// Backend.WriteAt, each completed write durable before it returns. It
	// returns the number of bytes written, and durable; on error the rest
	// may be partly written and not durable, and, as after a failed
	// Backend.Sync, the caller must not trust a later sync of the same
	// data.
	WriteAtDsync(f File, bufs [][]byte, off int64) (n int64, err error)
}

// UringOptions selects how the io_uring backend drives its ring
// (NewUringWith). The zero value is NewUring's shared ring: every caller
// submits under a lock and the waiting caller reaps completions.
type UringOptions struct {
	// DeferTaskrun sets up the ring with IORING_SETUP_SINGLE_ISSUER and
	// IORING_SETUP_DEFER_TASKRUN (Linux 6.1; io_uring_setup(2)): one
	// goroutine locked to its OS thread submits every request and waits
	// for the completions, which the kernel posts only while it waits.
	// Callers hand their operations to it and are woken by it.
	DeferTaskrun bool
	// SQPoll sets up the ring with IORING_SETUP_SQPOLL: a kernel thread
	// polls the submission queue, so submitting costs no system call while
	// it is awake (it spins for SQPollIdleMs after the last submission, a
	// CPU's worth of time). Driven by one goroutine as for DeferTaskrun,
	// which it excludes.
	SQPoll bool
	// SQPollIdleMs is the time in ms the SQPOLL thread spins before it
	// sleeps; 0 means 10.
	SQPollIdleMs int
}

// closeUserData is a user_data that operation ids never reach.
const closeUserData = ^uint64(0)

// maxUringEntries bounds the submission queue size (IORING_MAX_ENTRIES).
const maxUringEntries = 32768

// errUringClosed is returned by calls on a closed io_uring backend.
var errUringClosed = errors.New("ring: io_uring backend is closed")

// Select returns the backend for mode (ModeAuto, ModeUring or
// ModePortable) and the reason for the choice, and logs the choice once at
// Info on logger (nil: slog.Default()). ModeUring fails with the probe's
// reason where the kernel refuses io_uring; an unknown mode fails. The
// caller closes the returned backend after its last use.
func Select(mode string, logger *slog.Logger) (Backend, string, error) {
	if logger == nil {
		logger = slog.Default()
	}
	var (
		be     Backend
		reason string
	)
	switch mode {
	case ModePortable:
		be, reason = NewPortable(), "forced by --io-backend=portable"
	case ModeUring:
		ok, why := Probe()
		if !ok {
			return nil, why, fmt.Errorf("ring: --io-backend=uring: io_uring is unavailable: %s", why)
		}
		u, err := NewUring()
		if err != nil {
			return nil, err.Error(), fmt.Errorf("ring: --io-backend=uring: %w", err)
		}
		be, reason = u, "forced by --io-backend=uring; probe: "+why
	case ModeAuto, "":
		be, reason = selectAuto()
	default:
		return nil, "", fmt.Errorf("ring: unknown I/O backend %q: want auto, uring or portable", mode)
	}
	logger.Info("I/O backend selected", "io_backend", be.Name(), "mode", mode, "reason", reason)
	return be, reason, nil
}

// selectAuto applies ModeAuto: io_uring only if the benchmark showed it
// ahead and the probe passes.
func selectAuto() (Backend, string) {
	ok, why := Probe()
	if !AutoPrefersUring {
		return NewPortable(), "auto: the committed benchmark (docs/performance.md) did not show io_uring ahead; probe: " + why
	}
	if !ok {
		return NewPortable(), "auto: io_uring unavailable: " + why
	}
	u, err := NewUring()
	if err != nil {
		return NewPortable(), "auto: io_uring setup failed: " + err.Error()
	}
	return u, "auto: probe passed and the benchmark showed io_uring ahead; probe: " + why
}

// call is one submission of one or more operations, finished when every
// operation has a completion.
type call struct {
	res  []int32       // completion results (cqe.res), by operation index
	left int           // operations still in flight; guarded by pendingTable.mu
	done chan struct{} // closed when left reaches 0
}

// pendingSlot locates an operation: its call and its index in it.
type pendingSlot struct {
	c *call
	i int
}

// pendingTable matches completions to operations by user_data, never by
// order: every operation in flight has a unique id (its user_data).
type pendingTable struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]pendingSlot
}

// add registers the n operations of c and returns the id of the first; the
// others have the following ids. It resets c's results and count.
func (t *pendingTable) add(c *call, n int) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[uint64]pendingSlot)
	}
	c.res = make([]int32, n)
	c.left = n
	if c.done == nil {
		c.done = make(chan struct{})
	}
	first := t.next + 1
	for i := range n {
		t.m[first+uint64(i)] = pendingSlot{c: c, i: i}
	}
	t.next += uint64(n)
	if t.next >= closeUserData-maxUringEntries {
		t.next = 0 // ids are unique while in flight; wrap long before closeUserData
	}
	return first
}

// complete records result res for operation id and closes its call's done
// channel if it was the call's last operation. It reports false for an
// unknown id (already completed, or never submitted).
func (t *pendingTable) complete(id uint64, res int32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	if !ok {
		return false
	}
	delete(t.m, id)
	s.c.res[s.i] = res
	s.c.left--
	if s.c.left == 0 {
		close(s.c.done)
	}
	return true
}

// size returns the number of operations in flight.
func (t *pendingTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
