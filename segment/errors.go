package segment

import (
	"errors"
	"fmt"
	"syscall"
)

// Sentinel errors. Test with errors.Is: every *CorruptError is ErrCorrupt,
// every *OffsetOutOfRangeError is ErrOffsetOutOfRange.
var (
	// ErrCorrupt is the class of corruption found in data known to be
	// durable (below the recovery point) or in a mapped segment.
	ErrCorrupt = errors.New("segment: corrupt")
	// ErrOffsetOutOfRange is returned by Read for an offset below the log
	// start offset.
	ErrOffsetOutOfRange = errors.New("segment: offset out of range")
	// ErrClosed is returned by calls on a closed Log.
	ErrClosed = errors.New("segment: log closed")
	// ErrFailed wraps the error of a failed sync: the Log accepts no more
	// appends or syncs until it is reopened (docs/architecture.md §3.3).
	ErrFailed = errors.New("segment: log failed")
	// ErrNotContiguous is returned by AppendReplica for batches whose
	// offsets do not continue the log.
	ErrNotContiguous = errors.New("segment: offsets do not continue the log")
	// ErrNotBoundary is returned by TruncateTo for an offset that is not
	// the first offset of a batch, the log end offset, or within the log.
	ErrNotBoundary = errors.New("segment: not a batch boundary of the log")
)

// CorruptError reports corruption at byte Position of File (-1 when a
// memory fault on a mapping gives no position). Recovery never truncates
// data that it reports this way.
type CorruptError struct {
	File     string // path of the damaged file
	Position int64  // byte position in File where the damage was found
	Err      error  // what is wrong
}

// Error returns "segment: corrupt <file> at byte <position>: <cause>".
func (e *CorruptError) Error() string {
	return fmt.Sprintf("segment: corrupt %s at byte %d: %v", e.File, e.Position, e.Err)
}

// Unwrap returns the cause.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// OffsetOutOfRangeError reports a read below the log start offset. Start is
// the log start offset and End the log end offset when the read was made:
// valid offsets are [Start, End).
type OffsetOutOfRangeError struct {
	Offset     uint64 // the offset asked for
	Start, End uint64 // log start offset and log end offset
}

// Error returns "segment: offset <n> out of range [<start>, <end>)".
func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("segment: offset %d out of range [%d, %d)", e.Offset, e.Start, e.End)
}

// Is reports whether target is ErrOffsetOutOfRange.
func (e *OffsetOutOfRangeError) Is(target error) bool { return target == ErrOffsetOutOfRange }

// isNoSpace reports whether err says the file system is full (ENOSPC) or
// the user's quota is used up (EDQUOT): the two errors after which a file
// that only caches what the log holds (an index, a time index, the
// recovery point) is kept in memory and written later instead of failing.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
