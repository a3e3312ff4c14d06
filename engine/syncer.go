package engine

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/seedqueue/sq/ring"
)

// Bounds of the engine's syncer (docs/architecture.md §3.3).
const (
	// syncCallsMax bounds the fdatasync(2) calls in flight at once over
	// the whole engine, each of which blocks an OS thread: Go's runtime
	// stops the process past 10,000 threads (debug.SetMaxThreads), and
	// partitions committing by the thousand would otherwise reach it.
	// It is high because the syncs in flight at once are what the file
	// system shares (ext4 commits the metadata of every fdatasync waiting
	// in one journal commit), so a lower bound may cost throughput; at
	// 1,024 threads it stays a tenth of Go's limit (docs/performance.md,
	// "Many partitions on one node (P8)").
	syncCallsMax = 1024
	// syncEachCallsMax bounds the SyncEach calls (one io_uring_enter(2)
	// of up to syncEachFilesMax IORING_OP_FSYNC each) in flight at once
	// with a backend that has them (ring.EachSyncer): few calls, many
	// files each, so that partitions arriving meanwhile share the next.
	syncEachCallsMax = 4
	// syncEachFilesMax is the most files one SyncEach call syncs: one
	// submission of the io_uring backend's 256-entry queue.
	syncEachFilesMax = 255
)

// syncFSMinFiles, when above 0, makes a pass of at least that many files
// one syncfs(2) of the data directory's file system instead of one
// fdatasync(2) per file, where the backend has it (ring.FSSyncer) and the
// kernel reports write-back errors through it (ring.SyncFSReportsErrors).
// 0: never. It stays 0: on the measurements of docs/performance.md
// ("Many partitions on one node (P8)") syncfs was not ahead; the engine
// benchmarks set it to compare.
var syncFSMinFiles = 0

// syncer is the sync stage shared by every partition of an engine: the
// ring.Backend that their segment.Logs write through. Writes, allocation
// and truncation go straight to the engine's backend; Sync hands each file
// to the syncer and waits on a channel, holding no OS thread, for that
// file's own result. The syncer runs the files handed to it in passes with
// bounded concurrency: at most syncCallsMax backend Sync calls of one file
// each (each holds an OS thread while it runs), or, with a backend that syncs many files in one call and reports
// each one's outcome (ring.EachSyncer: io_uring), at most
// syncEachCallsMax calls of up to syncEachFilesMax files each (optionally
// one syncfs(2) for a pass of many files: syncFSMinFiles). Every file is
// answered with its own result, so a failed sync fails only the
// partitions whose files it covers, and a partition acknowledges its
// batches only after its own file is durable.
//
// When no sync is in flight and none waits, Sync runs on the caller's
// goroutine (as fdatasync did before the syncer): a lone partition pays
// no hand-off.
type syncer struct {
	ring.Backend
	each  ring.EachSyncer // the backend's, nil when it has none
	limit int             // backend sync calls in flight at most
	// syncfs(2), when fsMin > 0: fs is the backend's and fsDir the data
	// directory, open for it.
	fs    ring.FSSyncer
	fsDir ring.File
	fsMin int

	mu     sync.Mutex
	busy   int        // backend sync calls in flight, inline ones included
	fsBusy bool       // a syncfs pass is in flight
	queue  []*syncReq // files handed over and not yet taken by a pass

	calls  atomic.Uint64 // backend calls: Sync, SyncEach or SyncFS
	fsyncs atomic.Uint64 // files synced with their own fdatasync
	syncfs atomic.Uint64 // syncfs(2) calls
	passes atomic.Uint64 // passes run by the syncer's goroutines
}

// syncReq is one file handed to the syncer.
type syncReq struct {
	file ring.File
	err  error
	done chan struct{} // closed once err is set
}

// newSyncer returns the syncer over be. With fsDir (an open file on the
// data directory's file system) and fsMin > 0 it uses syncfs(2) for passes
// of at least fsMin files when be has it and the kernel reports errors
// through it; fsDir is then the syncer's to close (close).
func newSyncer(be ring.Backend, fsDir ring.File, fsMin int) *syncer {
	s := &syncer{Backend: be, limit: syncCallsMax}
	if each, ok := be.(ring.EachSyncer); ok {
		s.each, s.limit = each, syncEachCallsMax
	}
	if fss, ok := be.(ring.FSSyncer); ok && fsDir != nil && fsMin > 0 {
		if reports, _ := ring.SyncFSReportsErrors(); reports {
			// One pass at a time, of everything queued: what arrives
			// during a pass waits for the next, as in a group commit.
			s.fs, s.fsDir, s.fsMin, s.limit = fss, fsDir, fsMin, 1
		}
	}
	if s.fs == nil && fsDir != nil {
		fsDir.Close()
	}
	return s
}

// setLimit sets the bound of backend sync calls in flight (tests).
func (s *syncer) setLimit(n int) {
	s.mu.Lock()
	s.limit = n
	s.mu.Unlock()
}

// close releases the data directory opened for syncfs(2), if any. Every
// Sync must have returned.
func (s *syncer) close() error {
	if s.fsDir == nil {
		return nil
	}
	err := s.fsDir.Close()
	s.fsDir = nil
	return err
}

// Sync makes the data written to every file of files durable and returns
// the joined errors of the files whose sync failed (ring.Backend). It
// returns once each of its own files has its result.
func (s *syncer) Sync(files ...ring.File) error {
	if len(files) == 0 {
		return nil
	}
	s.mu.Lock()
	if s.busy == 0 && len(s.queue) == 0 {
		// Nothing to share a pass with: sync here.
		s.busy++
		s.mu.Unlock()
		err := s.Backend.Sync(files...)
		s.calls.Add(1)
		s.fsyncs.Add(uint64(len(files)))
		s.mu.Lock()
		s.busy--
		s.startLocked()
		s.mu.Unlock()
		return err
	}
	reqs := make([]syncReq, len(files))
	for i, f := range files {
		reqs[i] = syncReq{file: f, done: make(chan struct{})}
		s.queue = append(s.queue, &reqs[i])
	}
	s.startLocked()
	s.mu.Unlock()
	var errs []error
	for i := range reqs {
		<-reqs[i].done
		if reqs[i].err != nil {
			errs = append(errs, reqs[i].err)
		}
	}
	return errors.Join(errs...)
}

// startLocked starts a goroutine for each pass the queue holds while the
// bound allows. s.mu is held.
func (s *syncer) startLocked() {
	for len(s.queue) > 0 && s.busy < s.limit {
		pass, fs := s.takeLocked()
		if pass == nil {
			return
		}
		s.busy++
		go s.run(pass, fs)
	}
}

// takeLocked removes the next pass from the queue: with syncfs, every
// file queued, for one syncfs(2) (fs true) when there are at least fsMin;
// otherwise up to syncEachFilesMax for one SyncEach, or the first file
// alone.
// While a syncfs pass is in flight it takes nothing: what arrives
// meanwhile waits for the next pass, which covers it with one call too.
// s.mu is held.
func (s *syncer) takeLocked() (pass []*syncReq, fs bool) {
	n := len(s.queue)
	switch {
	case n == 0 || s.fsBusy:
		return nil, false
	case s.fs != nil:
		fs = n >= s.fsMin
		s.fsBusy = fs
	case s.each != nil:
		n = min(n, syncEachFilesMax)
	default:
		n = 1
	}
	pass = make([]*syncReq, n)
	copy(pass, s.queue)
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return pass, fs
}

// run syncs one pass, answers each of its files, and starts what the
// queue holds meanwhile.
func (s *syncer) run(pass []*syncReq, fs bool) {
	s.passes.Add(1)
	s.syncPass(pass, fs)
	s.mu.Lock()
	s.busy--
	if fs {
		s.fsBusy = false
	}
	s.startLocked()
	s.mu.Unlock()
}

// syncPass syncs the files of pass and answers each with its result. A
// syncfs(2) that fails does not say which file lost data: each file is
// then synced on its own, whose fdatasync reports its file's write-back
// error (the per-file errseq that syncfs leaves unread), so only the
// partitions whose files failed fail.
func (s *syncer) syncPass(pass []*syncReq, fs bool) {
	answer := func(i int, err error) {
		pass[i].err = err
		close(pass[i].done)
	}
	if fs {
		s.calls.Add(1)
		s.syncfs.Add(1)
		if err := s.fs.SyncFS(s.fsDir); err == nil {
			for i := range pass {
				answer(i, nil)
			}
			return
		}
	}
	if s.each != nil && len(pass) > 1 {
		files := make([]ring.File, len(pass))
		for i, r := range pass {
			files[i] = r.file
		}
		s.calls.Add(1)
		s.fsyncs.Add(uint64(len(files)))
		for i, err := range s.each.SyncEach(files) {
			answer(i, err)
		}
		return
	}
	for i, r := range pass {
		s.calls.Add(1)
		s.fsyncs.Add(1)
		answer(i, s.Backend.Sync(r.file))
	}
}
