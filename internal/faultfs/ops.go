package faultfs

import (
	"math/bits"
	"path/filepath"
)

// Op is a kind of call, as a bit so that a Rule can match several.
type Op uint32

// The kinds of calls. File calls and Backend calls on a file share a kind:
// File.WriteAt and Backend.WriteAt are both OpWrite.
const (
	OpCreate   Op = 1 << iota // FS.Create
	OpOpen                    // FS.Open, FS.OpenReadWrite
	OpRemove                  // FS.Remove, FS.RemoveAll
	OpRename                  // FS.Rename
	OpReadDir                 // FS.ReadDir
	OpMkdir                   // FS.MkdirAll
	OpSyncDir                 // FS.SyncDir
	OpStat                    // FS.Stat
	OpRead                    // File.ReadAt
	OpWrite                   // File.WriteAt, Backend.WriteAt
	OpSync                    // File.Sync, Backend.Sync (per file)
	OpAllocate                // Backend.Allocate
	OpTruncate                // File.Truncate, Backend.Truncate
	OpLock                    // FS.Lock
	OpStatfs                  // FS.Statfs
	numOps     = iota
)

// Counted are the kinds of calls counted by CrashAfter: those that change
// the file system.
const Counted = OpCreate | OpRemove | OpRename | OpMkdir | OpSyncDir | OpWrite | OpSync | OpAllocate | OpTruncate | OpLock

// AllOps matches every kind of call.
const AllOps Op = 1<<numOps - 1

var opNames = [numOps]string{"create", "open", "remove", "rename", "readdir", "mkdir", "syncdir", "stat", "read", "write", "sync", "allocate", "truncate", "lock", "statfs"}

// String names a single kind ("write"), for errors.
func (o Op) String() string {
	if bits.OnesCount32(uint32(o)) == 1 {
		return "faultfs " + opNames[opIndex(o)]
	}
	return "faultfs op"
}

func opIndex(o Op) int { return bits.TrailingZeros32(uint32(o)) % numOps }

// Rule fails chosen calls. The zero Rule matches nothing.
type Rule struct {
	// Ops are the kinds of calls the rule matches.
	Ops Op
	// Path is a filepath.Match pattern for the base name of the call's
	// path ("*.log"); empty matches every path.
	Path string
	// After is the number of matching calls that succeed before the rule
	// fires.
	After int
	// Times is how many calls fail before the rule retires; 0: every
	// matching call from then on.
	Times int
	// Err is the cause returned (wrapped in an *os.PathError), for
	// example syscall.EIO or syscall.ENOSPC.
	Err error
	// Partial makes a failing write write the first half of its bytes
	// before it returns the error, as a short write on a full disk does.
	Partial bool
}

type rule struct {
	Rule
	seen, fired int
}

// fire reports whether r fails this call; fs.mu is held.
func (r *rule) fire(op Op, path string) (error, bool, bool) { //nolint:staticcheck // ST1008: the error is the failure to inject, not fire's own
	if r.Ops&op == 0 {
		return nil, false, false
	}
	if r.Path != "" {
		if ok, _ := filepath.Match(r.Path, filepath.Base(path)); !ok {
			return nil, false, false
		}
	}
	r.seen++
	if r.seen <= r.After || (r.Times > 0 && r.fired >= r.Times) {
		return nil, false, false
	}
	r.fired++
	return r.Err, r.Partial && op == OpWrite, true
}

// Inject adds rule r; rules are tried in the order added and the first
// that fires decides. It returns a function that removes the rule.
func (fs *FS) Inject(r Rule) (remove func()) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	rr := &rule{Rule: r}
	fs.rules = append(fs.rules, rr)
	return func() {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		for i, x := range fs.rules {
			if x == rr {
				fs.rules = append(fs.rules[:i], fs.rules[i+1:]...)
				return
			}
		}
	}
}

// Stats are counters of the calls made through an FS.
type Stats struct {
	// Calls counts calls by kind, indexed by the bit number of the Op
	// (use Stats.Count).
	Calls [numOps]int64
	// ReadBytes is the bytes returned by File.ReadAt, per path.
	ReadBytes map[string]int64
}

// Count returns the calls of kind op (a single kind).
func (s Stats) Count(op Op) int64 { return s.Calls[opIndex(op)] }

func (s *Stats) addRead(path string, n int) {
	if s.ReadBytes == nil {
		s.ReadBytes = map[string]int64{}
	}
	s.ReadBytes[filepath.Clean(path)] += int64(n)
}

// Stats returns a copy of the counters.
func (fs *FS) Stats() Stats {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	s := fs.stats
	s.ReadBytes = make(map[string]int64, len(fs.stats.ReadBytes))
	for k, v := range fs.stats.ReadBytes {
		s.ReadBytes[k] = v
	}
	return s
}

// ResetStats zeroes the counters.
func (fs *FS) ResetStats() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.stats = Stats{}
}
