package ring

import (
	"io"
	"os"
	"path/filepath"
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
