package segment

import (
	"container/list"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/seedqueue/sq/ring"
)

// segment is one .log file and its .index.
type segment struct {
	base     uint64 // offset of the first batch; the file name
	logPath  string
	idxPath  string
	tidxPath string

	// Guarded by Log.mu: written by the append goroutine (and recovery)
	// with mu held, read by readers and Sync under mu.RLock.
	end   int64        // bytes of whole batches: the write position
	next  uint64       // offset after the last batch
	index []indexEntry // sparse index, append-only while active; nil when sealed and the .index file is read through the mapping
	maxTs int64        // largest batch maxTimestamp seen (Unix ms); see SegmentInfo
	// Broker append times (timeindex.go): times is the active segment's
	// time index (nil when sealed: read from the .timeindex file);
	// firstAppend and maxAppend are the first and last entry's time, -1
	// when the segment has none.
	times       []timeEntry
	firstAppend int64
	maxAppend   int64

	// Owned by the append goroutine while the segment is active; closed
	// when it is sealed (roll), which syncs them first. Each open one
	// counts in the FileCache.
	file ring.File // the .log, read-write; nil once sealed
	idx  ring.File // the .index, read-write; nil once sealed
	// tidx is the .timeindex, read-write; nil once sealed. tidxFailed: a
	// write to it failed.
	tidx       ring.File
	tidxFailed bool
	alloc      int64 // fallocated size of file in bytes
	dirty      int64 // end of bytes a failed write may have left past end
	// idxFailed: an index write failed, so the .index file has a hole.
	idxFailed bool

	mapMu sync.Mutex
	m     *mapping // current read mapping; nil until first read if sealed, and after eviction

	lru *list.Element // in FileCache.lru while sealed and mapped; guarded by FileCache.mu
}

// Log is one partition's log: a directory of segments (docs/architecture.md §3.1). Append,
// Sync, Checkpoint and Close are called from one goroutine at a time (the
// partition's append goroutine; Sync and Checkpoint may also come from a
// ticker goroutine); Read and the accessors are safe from any goroutine.
type Log struct {
	dir  string
	fs   ring.FS
	be   ring.Backend
	opts Options
	ix   indexer

	files *FileCache // opts.Files: counts and bounds open files and mappings

	mu   sync.RWMutex
	segs []*segment // sorted by base; the last is active
	next uint64     // log end offset
	size int64      // bytes of batches in all segments
	// spare is the active segment's alloc - end (Spare), stored by the
	// append goroutine after each grow and write.
	spare  atomic.Int64
	closed bool
	failed error // sticky: a sync failed
	// lastAppend is the latest broker append time recorded (Unix ms), -1
	// if none: time index entries never go below it.
	lastAppend int64
	// timeFloor, during recovery only: the last time index entry read
	// from an earlier segment's file (recoverTimeIndex).
	timeFloor int64
	// undated, during recovery only: the segments whose time index waits
	// for a later segment's first real time (recoverTimeIndex).
	undated []undated

	// direct is the O_DIRECT descriptor of the active segment under
	// Options.DirectWrites (direct.go).
	direct directWriter

	warnMu    sync.Mutex    // guards unwritten
	unwritten unwrittenWarn // rate limit of warnUnwritten

	syncMu       sync.Mutex    // serializes Sync, Checkpoint and Close
	synced       recoveryPoint // last synced position
	checkpointed recoveryPoint // last recovery point written
}

// AppendInfo describes one successful Append.
type AppendInfo struct {
	BaseOffset uint64 // offset of the first appended record
	NextOffset uint64 // log end offset after the append
	Segment    uint64 // base offset of the segment written
	Position   int64  // byte position of the first batch in the segment's .log
	Bytes      int64  // bytes written
	Rolled     bool   // a new segment was created (its name is durable)
}

// LogStartOffset returns the first offset still stored.
func (l *Log) LogStartOffset() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.segs[0].base
}

// Spare returns the bytes the active segment has allocated beyond its
// last batch: an append that fits in them takes no more disk space (it
// may still roll to a new segment when the segment is full). It is safe
// from any goroutine and lags the append goroutine by at most one append.
func (l *Log) Spare() int64 { return max(l.spare.Load(), 0) }

// NextOffset returns the log end offset: the offset the next appended record
// will get.
func (l *Log) NextOffset() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.next
}

// SizeBytes returns the bytes of batches on disk, not counting preallocated
// space.
func (l *Log) SizeBytes() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.size
}

// SegmentCount returns the number of segments, the active one included.
func (l *Log) SegmentCount() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.segs)
}

// Dir returns the partition directory.
func (l *Log) Dir() string { return l.dir }

// active returns the active segment. Callers hold mu or are the append
// goroutine.
func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

// find returns the index in l.segs of the segment holding offset off
// (the last with base <= off). l.mu must be held; off >= segs[0].base.
func (l *Log) find(off uint64) int {
	return sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > off }) - 1
}
