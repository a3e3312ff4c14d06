package ring

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// iovMax is the most iovecs one pwritev(2) accepts on Linux (UIO_MAXIOV).
const iovMax = 1024

// WriteAt writes bufs at off with pwritev(2), looping over short writes,
// EINTR and batches of more than 1024 buffers.
func (*Portable) WriteAt(f File, bufs [][]byte, off int64) (int64, error) {
	return pwritev(f, bufs, off, 0)
}

// WriteAtDsync writes bufs at off with pwritev2(2) and RWF_DSYNC (Linux
// 4.7), looping as WriteAt does: each completed call is durable like a
// pwritev(2) followed by fdatasync(2) of its range.
func (*Portable) WriteAtDsync(f File, bufs [][]byte, off int64) (int64, error) {
	return pwritev(f, bufs, off, unix.RWF_DSYNC)
}

// pwritev writes bufs at off with pwritev2(2) and flags (pwritev(2) when
// flags is 0), looping over short writes, EINTR and batches of more than
// 1024 buffers.
func pwritev(f File, bufs [][]byte, off int64, flags int) (int64, error) {
	fd := int(f.Fd())
	var total int64
	bufs = skipEmpty(bufs)
	op := "pwritev"
	if flags != 0 {
		op = "pwritev2"
	}
	for len(bufs) > 0 {
		chunk := bufs
		if len(chunk) > iovMax {
			chunk = chunk[:iovMax]
		}
		var n int
		var err error
		if flags == 0 {
			n, err = unix.Pwritev(fd, chunk, off+total)
		} else {
			n, err = unix.Pwritev2(fd, chunk, off+total, flags)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, &os.PathError{Op: op, Path: f.Name(), Err: err}
		}
		if n == 0 {
			return total, fmt.Errorf("ring: %s %s: %w", op, f.Name(), io.ErrShortWrite)
		}
		total += int64(n)
		bufs = advance(bufs, n)
	}
	return total, nil
}

// Sync calls fdatasync(2) on every file.
func (*Portable) Sync(files ...File) error {
	var errs []error
	for _, f := range files {
		for {
			err := unix.Fdatasync(int(f.Fd()))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				errs = append(errs, &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err})
			}
			break
		}
	}
	return errors.Join(errs...)
}

// Allocate calls fallocate(2) with mode 0. Where the file system does not
// support it (EOPNOTSUPP), it grows the file with ftruncate(2) instead, which
// reserves no blocks.
func (*Portable) Allocate(f File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	for {
		err := unix.Fallocate(int(f.Fd()), 0, off, n)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EOPNOTSUPP:
			fi, serr := f.Stat()
			if serr != nil {
				return serr
			}
			if fi.Size() >= off+n {
				return nil
			}
			return f.Truncate(off + n)
		default:
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
		}
	}
}

// Truncate calls ftruncate(2).
func (*Portable) Truncate(f File, size int64) error { return f.Truncate(size) }

// SyncFS calls syncfs(2) on the file system holding f.
func (*Portable) SyncFS(f File) error {
	for {
		err := unix.Syncfs(int(f.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "syncfs", Path: f.Name(), Err: err}
		}
		return nil
	}
}

// SyncFSReportsErrors reports whether syncfs(2) returns write-back errors
// on this kernel (Linux 5.8 and later, which report them through the
// superblock's errseq_t; earlier kernels return 0 even when data was
// lost), and the kernel release read from uname(2).
func SyncFSReportsErrors() (bool, string) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false, "uname: " + err.Error()
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(rel, "%d.%d", &major, &minor); err != nil {
		return false, rel
	}
	return major > 5 || major == 5 && minor >= 8, rel
}
