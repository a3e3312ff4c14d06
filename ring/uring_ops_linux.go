package ring

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

var (
	probeOnce   sync.Once
	probeOK     bool
	probeReason string
)

// Probe reports whether the io_uring backend can run here, and why (the
// reason is meant for a log line). The check runs once per process; see
// probe for what it tests.
func Probe() (ok bool, reason string) {
	probeOnce.Do(func() { probeOK, probeReason = probe() })
	return probeOK, probeReason
}

// NewUring returns the io_uring backend ("uring"): one ring of 256 SQEs
// shared by every caller, writes as IORING_OP_WRITEV, syncs as
// IORING_OP_FSYNC with IORING_FSYNC_DATASYNC, the syncs of many files in
// one io_uring_enter(2). It also implements WriteSyncer and DsyncWriter.
// Allocate and Truncate are the portable calls. Call Probe first: NewUring
// fails where the kernel refuses io_uring. Close it after its last use;
// Close waits for the operations in flight. It is NewUringWith with the
// zero UringOptions.
//
// The kernel runs a request on behalf of the thread that submitted it and
// cancels it if that thread exits, so callers must not submit from a
// goroutine that ends while locked to its thread (runtime.LockOSThread).
func NewUring() (Backend, error) { return NewUringWith(UringOptions{}) }

// NewUringWith returns the io_uring backend driven as o says (see
// UringOptions); everything else is as for NewUring. It fails with the
// kernel's error where io_uring_setup(2) refuses the flags (EINVAL before
// Linux 6.1 for DeferTaskrun), or where the kernel lacks IORING_OP_READ
// (before 5.6), which the issuer needs for its eventfd; DeferTaskrun with
// SQPoll is refused without asking the kernel.
func NewUringWith(o UringOptions) (Backend, error) {
	if !o.DeferTaskrun && !o.SQPoll {
		r, err := newRing(uringEntries)
		if err != nil {
			return nil, err
		}
		return &uringBackend{r: r, submit: r.submit, per: int(r.sqEntries), close: r.close}, nil
	}
	var flags, idle uint32
	switch {
	case o.DeferTaskrun && o.SQPoll:
		return nil, fmt.Errorf("ring: io_uring: DeferTaskrun and SQPoll exclude each other (io_uring_setup(2) refuses IORING_SETUP_DEFER_TASKRUN with IORING_SETUP_SQPOLL)")
	case o.DeferTaskrun:
		flags = ioringSetupSingleIssuer | ioringSetupDeferTaskrun
	default:
		flags = ioringSetupSQPoll
		idle = uint32(o.SQPollIdleMs)
		if idle == 0 {
			idle = defaultSQPollIdleMs
		}
	}
	i, err := newIssuer(flags, idle)
	if err != nil {
		return nil, err
	}
	return &uringBackend{submit: i.submit, per: i.limit, close: i.close}, nil
}

// defaultSQPollIdleMs is UringOptions.SQPollIdleMs when it is 0.
const defaultSQPollIdleMs = 10

// uringBackend is the Backend over one ring, shared by its callers (r set)
// or driven by an issuer goroutine.
type uringBackend struct {
	Portable        // Allocate and Truncate
	r        *uring // nil when an issuer drives the ring
	submit   submitFunc
	per      int // operations per submission at most
	close    func() error
}

// Name returns "uring".
func (*uringBackend) Name() string { return "uring" }

// Close waits for the operations in flight, then releases the ring.
func (b *uringBackend) Close() error { return b.close() }

// WriteAt writes bufs at off with IORING_OP_WRITEV, resubmitting the rest
// after a short write.
func (b *uringBackend) WriteAt(f File, bufs [][]byte, off int64) (int64, error) {
	return writeSync(b.submit, f, bufs, off, false, 0)
}

// WriteAndSync writes bufs at off and fdatasyncs f: IORING_OP_WRITEV linked
// (IOSQE_IO_LINK) to IORING_OP_FSYNC in one io_uring_enter(2).
func (b *uringBackend) WriteAndSync(f File, bufs [][]byte, off int64) (int64, error) {
	return writeSync(b.submit, f, bufs, off, true, 0)
}

// WriteAtDsync writes bufs at off with IORING_OP_WRITEV and rw_flags
// RWF_DSYNC: each completed WRITEV is durable like a write followed by
// fdatasync(2) of its range.
func (b *uringBackend) WriteAtDsync(f File, bufs [][]byte, off int64) (int64, error) {
	return writeSync(b.submit, f, bufs, off, false, unix.RWF_DSYNC)
}

// Sync fdatasyncs every file, submitting up to 255 or 256 syncs per
// io_uring_enter(2); they run concurrently in the kernel.
func (b *uringBackend) Sync(files ...File) error {
	return syncFiles(b.submit, b.per, files)
}

// submitFunc submits ops in one enter and returns each one's cqe.res.
type submitFunc func(ops []op) ([]int32, error)

// iovecs returns the iovec array of bufs (none empty).
func iovecs(bufs [][]byte) []unix.Iovec {
	iov := make([]unix.Iovec, len(bufs))
	for i, b := range bufs {
		iov[i].Base = &b[0]
		iov[i].SetLen(len(b))
	}
	return iov
}

// writeSync writes bufs back to back at off of f, at most iovMax buffers
// per WRITEV with rw_flags rwFlags (0 or RWF_DSYNC), and if sync links an
// FSYNC(DATASYNC) to the last WRITEV. A
// short write cancels its linked sync (-ECANCELED); the rest of the data is
// then resubmitted together with the sync. -EINTR and -EAGAIN results are
// resubmitted as they are.
func writeSync(submit submitFunc, f File, bufs [][]byte, off int64, sync bool, rwFlags uint32) (int64, error) {
	fd := int32(f.Fd())
	bufs = skipEmpty(bufs)
	var total int64
	for {
		chunk := bufs
		if len(chunk) > iovMax {
			chunk = chunk[:iovMax]
		}
		last := len(chunk) == len(bufs)
		var ops []op
		if len(chunk) > 0 {
			ops = append(ops, op{opcode: ioringOpWritev, fd: fd, off: uint64(off + total), iov: iovecs(chunk), opFlags: rwFlags})
		}
		if sync && last {
			if len(ops) > 0 {
				ops[0].flags = iosqeIOLink
			}
			ops = append(ops, op{opcode: ioringOpFsync, fd: fd, opFlags: ioringFsyncDatasync})
		}
		if len(ops) == 0 {
			return total, nil
		}
		res, err := submit(ops)
		runtime.KeepAlive(chunk)
		if err != nil {
			return total, fmt.Errorf("ring: io_uring write of %s: %w", f.Name(), err)
		}
		if len(chunk) > 0 {
			switch n := res[0]; {
			case n == -int32(unix.EINTR) || n == -int32(unix.EAGAIN):
				continue
			case n < 0:
				return total, &os.PathError{Op: "writev", Path: f.Name(), Err: unix.Errno(-n)}
			case n == 0:
				return total, fmt.Errorf("ring: writev %s: %w", f.Name(), io.ErrShortWrite)
			default:
				total += int64(n)
				bufs = advance(bufs, int(n))
			}
			if len(bufs) > 0 {
				continue // short write (its linked sync was cancelled) or more chunks
			}
		}
		if sync {
			if s := res[len(res)-1]; s == -int32(unix.EINTR) || s == -int32(unix.EAGAIN) {
				return total, syncFiles(submit, 1, []File{f})
			} else if s < 0 {
				return total, &os.PathError{Op: "fdatasync", Path: f.Name(), Err: unix.Errno(-s)}
			}
		}
		return total, nil
	}
}

// syncFiles fdatasyncs files, at most per operations per submission, and
// joins the errors. A sync that reports -EINTR or -EAGAIN is resubmitted.
func syncFiles(submit submitFunc, per int, files []File) error {
	var errs []error
	files = append([]File(nil), files...)
	for len(files) > 0 {
		chunk := files[:min(per, len(files))]
		files = files[len(chunk):]
		ops := make([]op, len(chunk))
		for i, f := range chunk {
			ops[i] = op{opcode: ioringOpFsync, fd: int32(f.Fd()), opFlags: ioringFsyncDatasync}
		}
		res, err := submit(ops)
		if err != nil {
			errs = append(errs, fmt.Errorf("ring: io_uring fdatasync: %w", err))
			continue
		}
		for i, r := range res {
			switch {
			case r == -int32(unix.EINTR) || r == -int32(unix.EAGAIN):
				files = append(files, chunk[i])
			case r < 0:
				errs = append(errs, &os.PathError{Op: "fdatasync", Path: chunk[i].Name(), Err: unix.Errno(-r)})
			}
		}
	}
	return errors.Join(errs...)
}

// SyncEach fdatasyncs every file like Sync, up to 255 or 256 per
// io_uring_enter(2), and returns each file's error by index.
func (b *uringBackend) SyncEach(files []File) []error {
	return syncFilesEach(b.submit, b.per, files)
}

// syncFilesEach is syncFiles reporting each file's error by index. A sync
// that reports -EINTR or -EAGAIN is resubmitted.
func syncFilesEach(submit submitFunc, per int, files []File) []error {
	errs := make([]error, len(files))
	todo := make([]int, len(files)) // indexes into files still to sync
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		chunk := todo[:min(per, len(todo))]
		todo = todo[len(chunk):]
		ops := make([]op, len(chunk))
		for k, i := range chunk {
			ops[k] = op{opcode: ioringOpFsync, fd: int32(files[i].Fd()), opFlags: ioringFsyncDatasync}
		}
		res, err := submit(ops)
		if err != nil {
			for _, i := range chunk {
				errs[i] = fmt.Errorf("ring: io_uring fdatasync of %s: %w", files[i].Name(), err)
			}
			continue
		}
		for k, r := range res {
			i := chunk[k]
			switch {
			case r == -int32(unix.EINTR) || r == -int32(unix.EAGAIN):
				todo = append(todo, i)
			case r < 0:
				errs[i] = &os.PathError{Op: "fdatasync", Path: files[i].Name(), Err: unix.Errno(-r)}
			}
		}
	}
	return errs
}
