package segment

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"
)

// Defaults of Options.
const (
	DefaultSegmentBytes       = 1 << 30 // 1 GiB
	DefaultIndexIntervalBytes = 4096
	DefaultPreallocBytes      = 16 << 20 // 16 MiB
	DefaultMaxBatchBytes      = 16 << 20 // 16 MiB
)

// MaxClockAhead bounds persisted clock values (broker append times in the
// time index, a .log file's modification time) against Options.Now: a value
// more than this far in the future was written while the clock was ahead,
// and is logged and clamped to the current time rather than carried forward
// (docs/architecture.md §3.6).
const MaxClockAhead = time.Minute

// Durability says what an acknowledgement promised about the bytes of the
// last segment above the recovery point, which decides whether recovery may
// cut a hole followed by valid data there (docs/storage.md, Recovery).
// It is the topic's sync policy as seen by recovery.
type Durability uint8

const (
	// DurableEveryBatch: every acknowledged batch was fdatasynced before
	// its acknowledgement (sync policy every-batch). A bad batch followed
	// by a valid batch that continues the offsets is damage to synced
	// data: Open returns a *CorruptError and cuts nothing.
	DurableEveryBatch Durability = iota
	// DurableInterval: batches were acknowledged after the write and synced
	// on a timer (an interval policy). Only the part below the recovery
	// point is known synced; above it a hole followed by data the kernel
	// flushed out of order is possible after a power loss, and is cut,
	// logged at ERROR with the offsets dropped.
	DurableInterval
	// DurableNone: batches were acknowledged after the write and never
	// synced explicitly (sync policy none); a hole above the recovery point
	// is cut as under DurableInterval.
	DurableNone
)

// String returns "every-batch", "interval" or "none".
func (d Durability) String() string {
	switch d {
	case DurableEveryBatch:
		return "every-batch"
	case DurableInterval:
		return "interval"
	case DurableNone:
		return "none"
	}
	return fmt.Sprintf("Durability(%d)", uint8(d))
}

// Options configure a Log. The zero value is valid after Defaults.
type Options struct {
	// SegmentBytes: a segment rolls when an append would take it past this
	// many bytes, and before a relative offset or a file position would
	// overflow u32. At most 4 GiB - 1. Default 1 GiB.
	SegmentBytes int64
	// IndexIntervalBytes: the sparse index gets an entry for the first batch
	// of a segment and then for the first batch at least this many bytes
	// after the previous entry. Default 4096.
	IndexIntervalBytes int
	// PreallocBytes: the largest fallocate step of the active segment, which
	// grows on demand: the first step is 1 MiB (at most PreallocBytes) or
	// the append's size, and each later step doubles the file, up to this
	// many bytes. An empty segment takes no space. Default 16 MiB.
	PreallocBytes int64
	// AllocRoom, when set, returns the bytes the active segment may newly
	// allocate without taking its file system below the server's
	// free-space floor (free bytes minus the floor; may be negative). A
	// preallocation step larger than that shrinks to it, never below what
	// the append being written needs (docs/architecture.md §3.3). Nil: no
	// bound but the disk's.
	AllocRoom func() int64
	// Allocated, when set, is told the bytes of every successful
	// preallocation step, and how many of them the append being written
	// needed (the rest is spare), so that the owner of AllocRoom can count
	// them before its next look at the file system.
	Allocated func(step, needed int64)
	// MaxBatchBytes: the largest batch (header included) recovery and the
	// scrub read at once; a longer batch (written before the limit was
	// lowered) is checked in pieces of this size, never refused for its
	// length. Default 16 MiB.
	MaxBatchBytes int
	// Durability is the sync policy the log was written under, which
	// decides what recovery does with a hole followed by valid data above
	// the recovery point. The zero value, DurableEveryBatch, is the
	// strictest: such a hole is reported as corruption.
	Durability Durability
	// DsyncWrites: append the batches with RWF_DSYNC writes, each durable
	// when it returns, when the backend is a ring.DsyncWriter (both of
	// ring's are; otherwise this has no effect), so that Sync has no data
	// left to fdatasync and returns at once. For logs that sync after
	// every append (sync policy every-batch): under an interval policy it
	// would sync each append instead of one per interval. A failed dsync
	// write puts the Log in the failed state, as a failed Sync does.
	DsyncWrites bool
	// DirectWrites: write the active segment's batches with O_DIRECT,
	// from an aligned copy of whole blocks (direct.go), rather than
	// through the page cache; Sync still fdatasyncs (the device's cache
	// and the file's extents). Where the file system or the FS seam
	// refuses O_DIRECT the Log writes through the page cache, logging
	// it once. Readers are unaffected but read newly written bytes from
	// the device rather than from memory. DsyncWrites is ignored under
	// DirectWrites.
	DirectWrites bool
	// MinAppendTime is the earliest plausible broker append time (Unix
	// ms), such as the creation time of the log's topic; 0: none. At Open
	// a time index entry before it is damage (the index is rebuilt, dating
	// records by the .log's modification time, and never before it): a
	// time that is positive but too early, say 1 ms or a year back, would
	// otherwise expire records at once and make lookups by time start
	// late. A MinAppendTime after Options.Now (written while the clock
	// was ahead) is ignored: it is no evidence against real times.
	MinAppendTime int64
	// Now is the clock that bounds persisted times (MaxClockAhead) and
	// dates records whose time index entries are missing. Default
	// time.Now.
	Now func() time.Time
	// Logger receives recovery notes (stray files, torn tails, rebuilt
	// indexes). Default: discard.
	Logger *slog.Logger
	// Files counts and bounds the open files and mappings of segments; a
	// server shares one among all its Logs (see FileCache). Default: a
	// FileCache of DefaultMaxOpenSegmentFiles for this Log alone.
	Files *FileCache
}

// Defaults fills the zero fields of o.
func (o *Options) Defaults() {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.IndexIntervalBytes == 0 {
		o.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if o.PreallocBytes == 0 {
		o.PreallocBytes = DefaultPreallocBytes
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Files == nil {
		o.Files = NewFileCache(DefaultMaxOpenSegmentFiles)
	}
}

// Validate returns every problem with o at once (after Defaults).
func (o *Options) Validate() error {
	var errs []error
	if o.SegmentBytes <= 0 || o.SegmentBytes > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("segment: SegmentBytes %d not in [1, %d]", o.SegmentBytes, uint32(math.MaxUint32)))
	}
	if o.IndexIntervalBytes <= 0 {
		errs = append(errs, fmt.Errorf("segment: IndexIntervalBytes %d must be positive", o.IndexIntervalBytes))
	}
	if o.PreallocBytes <= 0 {
		errs = append(errs, fmt.Errorf("segment: PreallocBytes %d must be positive", o.PreallocBytes))
	}
	if o.Durability > DurableNone {
		errs = append(errs, fmt.Errorf("segment: unknown %v", o.Durability))
	}
	if o.MaxBatchBytes < 64 {
		errs = append(errs, fmt.Errorf("segment: MaxBatchBytes %d below the 64-byte batch header", o.MaxBatchBytes))
	}
	return errors.Join(errs...)
}
