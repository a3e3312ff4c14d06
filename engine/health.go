package engine

import (
	"errors"
	"fmt"
	"sort"
)

// SegmentFileStats counts the segment files and mappings of every
// partition (Options.MaxOpenSegmentFiles; segment.FileCache).
type SegmentFileStats struct {
	Max       int    // the bound, Options.MaxOpenSegmentFiles
	Files     int    // file descriptors held by segments (3 per active segment)
	Mappings  int    // live memory mappings of segment files
	Cached    int    // sealed segments kept mapped for later reads
	Evictions uint64 // sealed segments unmapped to stay within Max since Open
	// Err is the last "too many open files" (EMFILE, ENFILE) or mmap
	// ENOMEM error while the process still cannot open a file or map a
	// page; nil otherwise.
	Err error
}

// SegmentFiles returns the counts of open segment files and mappings. When
// an open or a mapping failed for want of descriptors or mappings, it
// first checks whether one can be made now (segment.FileCache.Recheck).
func (e *Engine) SegmentFiles() SegmentFileStats {
	_ = e.files.Recheck(e.opts.FS, e.opts.DataDir)
	st := e.files.Stats()
	return SegmentFileStats{Max: st.Max, Files: st.Files, Mappings: st.Mappings, Cached: st.Cached,
		Evictions: st.Evictions, Err: st.Err}
}

// maxHealthPartitions bounds the failed partitions FailedPartitions names
// one by one.
const maxHealthPartitions = 10

// Health returns nil while the engine as a whole can serve; otherwise an
// error that says why, for readiness probes: the last EMFILE, ENFILE or
// mmap ENOMEM error while the process still cannot open a file or map a
// page (segment.FileCache.Recheck), and a failed group offsets log
// (GroupOffsetsErr). A failed partition is not a problem of the whole
// node, as in Kafka, whose broker keeps serving its other partitions
// while one is offline: FailedPartitions reports those.
func (e *Engine) Health() error {
	var errs []error
	if err := e.files.Recheck(e.opts.FS, e.opts.DataDir); err != nil {
		errs = append(errs, fmt.Errorf("cannot open segment files: %w", err))
	}
	if err := e.GroupOffsetsErr(); err != nil {
		errs = append(errs, fmt.Errorf("group offsets log failed: %w", err))
	}
	return errors.Join(errs...)
}

// FailedPartitions returns nil while every partition serves; otherwise an
// error naming the failed partitions (at most maxHealthPartitions, with
// their errors, then a count). A failed partition stays failed until the
// server restarts (docs/architecture.md §3.3).
func (e *Engine) FailedPartitions() error {
	var errs []error
	e.mu.RLock()
	names := make([]string, 0, len(e.topics))
	for name := range e.topics {
		names = append(names, name)
	}
	sort.Strings(names)
	failed := 0
	for _, name := range names {
		for i, p := range e.topics[name].parts() {
			fe := p.failed.Load()
			if fe == nil {
				continue
			}
			if failed++; failed <= maxHealthPartitions {
				errs = append(errs, fmt.Errorf("partition %s/%d failed: %w", name, i, fe))
			}
		}
	}
	e.mu.RUnlock()
	if failed > maxHealthPartitions {
		errs = append(errs, fmt.Errorf("%d more partitions failed", failed-maxHealthPartitions))
	}
	return errors.Join(errs...)
}
