package ring

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// File is an open file. *os.File implements it.
type File interface {
	io.Closer
	io.ReaderAt
	io.WriterAt
	// Name returns the path the file was opened with.
	Name() string
	// Stat returns the file's metadata; Size is in bytes.
	Stat() (os.FileInfo, error)
	// Sync flushes data and metadata to stable storage (fsync(2)).
	Sync() error
	// Truncate changes the file's size to size bytes (ftruncate(2)).
	Truncate(size int64) error
	// Fd returns the file descriptor, used by Backend and for mmap(2).
	Fd() uintptr
}

// FS is the file system seam. Paths are OS paths. Every call that creates,
// renames or removes a name must be followed by SyncDir on its directory
// before the change is durable.
type FS interface {
	// Create creates or truncates name for reading and writing (mode 0644).
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file for reading and writing.
	OpenReadWrite(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes name and everything below it; a missing name is
	// not an error (os.RemoveAll). Like Remove, the removal of name is
	// durable after SyncDir of its parent.
	RemoveAll(name string) error
	// Rename atomically replaces newname with oldname (rename(2)).
	Rename(oldname, newname string) error
	// ReadDir returns the names of the entries of dir, sorted.
	ReadDir(dir string) ([]string, error)
	// MkdirAll creates dir and any missing parents with mode perm.
	MkdirAll(dir string, perm os.FileMode) error
	// SyncDir fsyncs directory dir so that entries created, renamed or
	// removed in it are durable.
	SyncDir(dir string) error
	// Stat returns the metadata of name.
	Stat(name string) (os.FileInfo, error)
	// Lock opens name for reading and writing, creating it (mode 0644)
	// if needed, and takes an exclusive advisory lock on it without
	// waiting (flock(2) LOCK_EX|LOCK_NB). When another open file holds
	// the lock it fails with an error that errors.Is ErrLocked. Closing
	// the returned file releases the lock; so does the death of the
	// process, so a crash never leaves a stale lock.
	Lock(name string) (File, error)
	// Statfs returns the space of the file system holding name
	// (statfs(2)).
	Statfs(name string) (DiskSpace, error)
}

// DiskSpace is the space of a file system, in bytes.
type DiskSpace struct {
	// Avail is the space available to unprivileged users (f_bavail *
	// f_bsize).
	Avail int64
	// Total is the size of the file system (f_blocks * f_bsize).
	Total int64
}

// ErrLocked is the cause of FS.Lock's error when another open file holds
// the lock (EWOULDBLOCK from flock(2)).
var ErrLocked = errors.New("ring: file is locked by another process")

// ReadFile returns the whole content of name, read through fs (Open,
// Stat, ReadAt): the seam's os.ReadFile.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, fi.Size())
	n, err := f.ReadAt(data, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return data[:n], nil
}

// OS is the FS of the operating system.
var OS FS = osFS{}

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
}

func (osFS) Open(name string) (File, error) { return os.Open(name) }

func (osFS) OpenReadWrite(name string) (File, error) { return os.OpenFile(name, os.O_RDWR, 0) }

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

func (osFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

func (osFS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

func (osFS) RemoveAll(name string) error { return os.RemoveAll(name) }

func (osFS) Lock(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &os.PathError{Op: "flock", Path: name, Err: fmt.Errorf("%w (%w)", ErrLocked, err)}
		}
		return nil, &os.PathError{Op: "flock", Path: name, Err: err}
	}
	return f, nil
}

func (osFS) Statfs(name string) (DiskSpace, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(name, &st); err != nil {
		return DiskSpace{}, &os.PathError{Op: "statfs", Path: name, Err: err}
	}
	return DiskSpace{Avail: int64(st.Bavail) * int64(st.Bsize), Total: int64(st.Blocks) * int64(st.Bsize)}, nil
}
