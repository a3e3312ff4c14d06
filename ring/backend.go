package ring

// Backend performs the write-path calls of a segment: gather writes,
// data syncs, preallocation and truncation. Implementations are safe for
// concurrent use on different files; calls on one file are serialized by
// the caller.
type Backend interface {
	// Name names the backend in logs and metrics ("portable", "uring").
	Name() string
	// WriteAt writes bufs back to back at byte offset off of f, as one
	// positioned gather write (pwritev(2)), retrying short writes. It
	// returns the number of bytes written, which is less than the total
	// only with a non-nil error.
	WriteAt(f File, bufs [][]byte, off int64) (n int64, err error)
	// Sync makes the data written to every file in files durable
	// (fdatasync(2)). All files are synced even if one fails; the errors
	// are joined. A failed sync means the written data may be lost: the
	// caller must not trust a later successful sync of the same data.
	Sync(files ...File) error
	// Allocate reserves the bytes [off, off+n) of f so that later writes
	// there do not fail for lack of space, growing the file to at least
	// off+n bytes (fallocate(2) mode 0; the new bytes read as zero).
	Allocate(f File, off, n int64) error
	// Truncate sets the size of f to size bytes (ftruncate(2)).
	Truncate(f File, size int64) error
	// Close releases the backend's resources (a ring, its threads). The
	// portable backend holds none.
	Close() error
}

// Portable is the backend that works on every kernel: pwritev(2),
// fdatasync(2), fallocate(2) (ftruncate(2) where the file system lacks
// it). Its zero value is ready to use.
type Portable struct{}

// NewPortable returns the portable backend.
func NewPortable() *Portable { return &Portable{} }

// Name returns "portable".
func (*Portable) Name() string { return "portable" }

// Close does nothing and returns nil.
func (*Portable) Close() error { return nil }
