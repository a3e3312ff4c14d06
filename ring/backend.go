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

// EachSyncer is implemented by backends that fdatasync many files in one
// call and report each file's outcome: the io_uring backend submits one
// IORING_OP_FSYNC (IORING_FSYNC_DATASYNC) per file, up to its submission
// queue's size in one io_uring_enter(2), and the kernel runs them
// concurrently. A caller that syncs files on behalf of several owners
// (the engine's syncer) uses it to answer each owner with its own file's
// result, which Backend.Sync, joining the errors, does not tell apart.
type EachSyncer interface {
	// SyncEach makes the data written to every file of files durable, as
	// Backend.Sync does, and returns one error per file, by index (nil:
	// that file is durable). As after Backend.Sync, a file whose sync
	// failed must be treated as having lost its written data.
	SyncEach(files []File) []error
}

// FSSyncer is implemented by backends that can write back and commit a
// whole file system in one call (syncfs(2)): the portable backend and
// the io_uring backend (through its portable part) on Linux.
type FSSyncer interface {
	// SyncFS writes back every dirty file of the file system holding f
	// and waits for it to be durable (syncfs(2)). It returns the first
	// write-back error recorded anywhere on that file system since the
	// previous SyncFS through f (or since f was opened), which does not
	// say which file lost data; Linux reports such errors only since 5.8
	// (SyncFSReportsErrors), earlier kernels return 0 regardless. The
	// per-file error state that fdatasync(2) reports is left as it was:
	// after a failed SyncFS, an fdatasync of each file still tells which
	// one failed.
	SyncFS(f File) error
}
