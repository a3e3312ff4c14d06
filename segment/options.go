package segment

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
)

// Defaults of Options.
const (
	DefaultSegmentBytes       = 1 << 30 // 1 GiB
	DefaultIndexIntervalBytes = 4096
	DefaultPreallocBytes      = 16 << 20 // 16 MiB
	DefaultMaxBatchBytes      = 16 << 20 // 16 MiB
)

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
	// MaxBatchBytes: the largest batch (header included) recovery accepts;
	// a longer length field is a torn write. Default 16 MiB.
	MaxBatchBytes int
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
	if o.MaxBatchBytes < 64 {
		errs = append(errs, fmt.Errorf("segment: MaxBatchBytes %d below the 64-byte batch header", o.MaxBatchBytes))
	}
	return errors.Join(errs...)
}
