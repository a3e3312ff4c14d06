package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/ring"
)

// gateBackend is a ring.Backend whose Sync calls can be held and fail per
// file path, and that counts the Sync calls in flight. Everything else
// goes to the backend it wraps.
type gateBackend struct {
	ring.Backend
	mu      sync.Mutex
	hold    func(path string) bool  // nil: hold nothing
	fail    func(path string) error // nil: fail nothing
	release chan struct{}           // held syncs wait for it to close
	held    []string                // paths of the syncs held now
	synced  []string                // paths synced, in order of return
	in      atomic.Int64            // Sync calls in flight
	maxIn   atomic.Int64            // most Sync calls in flight at once
	calls   atomic.Int64
}

func newGate(be ring.Backend) *gateBackend {
	return &gateBackend{Backend: be, release: make(chan struct{})}
}

func (g *gateBackend) Sync(files ...ring.File) error {
	n := g.in.Add(1)
	defer g.in.Add(-1)
	g.calls.Add(1)
	for {
		m := g.maxIn.Load()
		if n <= m || g.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	var errs []error
	for _, f := range files {
		g.mu.Lock()
		hold, fail, release := g.hold, g.fail, g.release
		held := hold != nil && hold(f.Name())
		if held {
			g.held = append(g.held, f.Name())
		}
		g.mu.Unlock()
		if held {
			<-release
		}
		var err error
		if fail != nil {
			err = fail(f.Name())
		}
		if err == nil {
			err = g.Backend.Sync(f)
		}
		errs = append(errs, err)
		g.mu.Lock()
		if held {
			g.held = removeOne(g.held, f.Name())
		}
		if err == nil {
			g.synced = append(g.synced, f.Name())
		}
		g.mu.Unlock()
	}
	return errors.Join(errs...)
}

func removeOne(s []string, v string) []string {
	for i, x := range s {
		if x == v {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// heldCount returns the number of syncs held now.
func (g *gateBackend) heldCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held)
}

// syncedCount returns how many syncs of paths containing sub returned nil.
func (g *gateBackend) syncedCount(sub string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, p := range g.synced {
		if strings.Contains(p, sub) {
			n++
		}
	}
	return n
}

// pollUntil polls cond until it holds or the deadline passes.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// partDir is the path fragment of partition p of topic t.
func partDir(topic string, p int) string {
	return string(filepath.Separator) + filepath.Join(topic, fmt.Sprint(p)) + string(filepath.Separator)
}

// TestSyncerAckAfterOwnSync: a partition acknowledges its batch only once
// its own .log's sync has returned: while that sync is held, the other
// partitions' batches are acknowledged (each after its own sync), and
// this one is not; released, it is.
func TestSyncerAckAfterOwnSync(t *testing.T) {
	opts := testOptions(t.TempDir())
	gate := newGate(ring.NewPortable())
	opts.Backend = gate
	e := openTest(t, opts)
	const parts = 16
	if _, err := e.CreateTopic("t", parts, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	heldPart := partDir("t", 3)
	gate.mu.Lock()
	gate.hold = func(p string) bool { return strings.Contains(p, heldPart) && strings.HasSuffix(p, ".log") }
	gate.mu.Unlock()
	ctx := context.Background()
	pds := make([]*Pending, parts)
	for p := range parts {
		pd, err := e.AppendAsync(ctx, "t", p, mkBatch(t, fmt.Sprint("v", p)), nil)
		if err != nil {
			t.Fatal(err)
		}
		pds[p] = pd
	}
	for p, pd := range pds {
		if p == 3 {
			continue
		}
		res, err := pd.Wait(ctx)
		if err != nil || res.Durability != DurabilitySynced {
			t.Fatalf("partition %d: %+v, %v", p, res, err)
		}
		if got := gate.syncedCount(partDir("t", p)); got < 1 {
			t.Fatalf("partition %d acknowledged with %d syncs of its files returned", p, got)
		}
	}
	pollUntil(t, "the held sync", func() bool { return gate.heldCount() == 1 })
	select {
	case <-pds[3].req.done:
		t.Fatal("partition 3 acknowledged while its sync is held")
	default:
	}
	if n := gate.syncedCount(heldPart); n != 0 {
		t.Fatalf("%d syncs of partition 3 returned while held", n)
	}
	gate.mu.Lock()
	gate.hold = nil
	close(gate.release)
	gate.mu.Unlock()
	res, err := pds[3].Wait(ctx)
	if err != nil || res.Durability != DurabilitySynced {
		t.Fatalf("partition 3 after release: %+v, %v", res, err)
	}
	if n := gate.syncedCount(heldPart); n < 1 {
		t.Fatal("partition 3 acknowledged without a sync of its .log")
	}
}

// TestSyncerFailsOnlyItsPartition: among many partitions committing at
// once, an injected EIO on one partition's fdatasync fails only that
// partition (PARTITION_FAILED, and every later append); the others are
// acknowledged and stay writable.
func TestSyncerFailsOnlyItsPartition(t *testing.T) {
	opts, _ := faultOptions(t.TempDir())
	gate := newGate(opts.Backend)
	opts.Backend = gate
	e := openTest(t, opts)
	const bound = 16
	e.syncer.setLimit(bound)
	const parts = bound + 36
	if _, err := e.CreateTopic("t", parts, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	bad := partDir("t", 17)
	// Hold every .log sync until all partitions have handed theirs over,
	// so that they queue behind each other and run in the syncer's passes.
	gate.mu.Lock()
	gate.hold = func(p string) bool { return strings.HasSuffix(p, ".log") }
	gate.fail = func(p string) error {
		if strings.Contains(p, bad) && strings.HasSuffix(p, ".log") {
			return &os.PathError{Op: "fdatasync", Path: p, Err: syscall.EIO}
		}
		return nil
	}
	gate.mu.Unlock()
	ctx := context.Background()
	pds := make([]*Pending, parts)
	for p := range parts {
		pd, err := e.AppendAsync(ctx, "t", p, mkBatch(t, "a"), nil)
		if err != nil {
			t.Fatal(err)
		}
		pds[p] = pd
	}
	// The first sync runs inline, the others in passes up to the bound;
	// the rest wait in the queue.
	pollUntil(t, "syncs in flight", func() bool { return gate.heldCount() == bound })
	gate.mu.Lock()
	gate.hold = nil
	close(gate.release)
	gate.mu.Unlock()
	for p, pd := range pds {
		_, err := pd.Wait(ctx)
		if p == 17 {
			if codeOf(err) != api.CodePartitionFailed {
				t.Fatalf("partition 17 with a failed sync = %v, want PARTITION_FAILED", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("partition %d = %v", p, err)
		}
	}
	if _, err := e.Append(ctx, "t", 17, mkBatch(t, "b")); codeOf(err) != api.CodePartitionFailed {
		t.Fatalf("append to the failed partition = %v, want PARTITION_FAILED", err)
	}
	for p := range parts {
		if p == 17 {
			continue
		}
		if res, err := e.Append(ctx, "t", p, mkBatch(t, "b")); err != nil || res.BaseOffset != 1 {
			t.Fatalf("partition %d after the failure: %+v, %v", p, res, err)
		}
	}
	if m := gate.maxIn.Load(); m > bound {
		t.Fatalf("%d Sync calls in flight at once, bound %d", m, bound)
	}
}

// TestSyncerBoundHolds: with more partitions committing than the bound
// (lowered to 32 here; syncCallsMax otherwise), the Sync calls in flight
// through the backend reach it and never pass it; every batch is
// acknowledged once its sync returns.
func TestSyncerBoundHolds(t *testing.T) {
	opts := testOptions(t.TempDir())
	gate := newGate(ring.NewPortable())
	opts.Backend = gate
	e := openTest(t, opts)
	const bound = 32
	e.syncer.setLimit(bound)
	parts := bound*2 + 7
	if _, err := e.CreateTopic("t", parts, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	gate.mu.Lock()
	gate.hold = func(p string) bool { return strings.HasSuffix(p, ".log") }
	gate.mu.Unlock()
	ctx := context.Background()
	pds := make([]*Pending, parts)
	for p := range parts {
		pd, err := e.AppendAsync(ctx, "t", p, mkBatch(t, "a"), nil)
		if err != nil {
			t.Fatal(err)
		}
		pds[p] = pd
	}
	pollUntil(t, "the bound reached", func() bool { return gate.heldCount() == bound })
	pollUntil(t, "the rest queued", func() bool {
		e.syncer.mu.Lock()
		defer e.syncer.mu.Unlock()
		return len(e.syncer.queue) == parts-bound
	})
	if n := gate.in.Load(); n != bound {
		t.Fatalf("%d Sync calls in flight, want the bound %d", n, bound)
	}
	gate.mu.Lock()
	gate.hold = nil
	close(gate.release)
	gate.mu.Unlock()
	for p, pd := range pds {
		if res, err := pd.Wait(ctx); err != nil || res.Durability != DurabilitySynced {
			t.Fatalf("partition %d: %+v, %v", p, res, err)
		}
	}
	if m := gate.maxIn.Load(); m != bound {
		t.Fatalf("at most %d Sync calls in flight, want the bound %d", m, bound)
	}
}

// fakeBackend is a ring.Backend for the syncer alone: Sync fails the
// files fail names, and optionally SyncEach and SyncFS are counted.
type fakeBackend struct {
	ring.Portable
	mu     sync.Mutex
	fail   map[string]error // by file name
	fsErr  error            // SyncFS's result
	order  []string         // "sync NAME", "each N", "syncfs"
	gate   chan struct{}    // nil, or Sync waits for it
	inSync atomic.Int64
	maxIn  atomic.Int64
}

func (b *fakeBackend) Sync(files ...ring.File) error {
	n := b.inSync.Add(1)
	defer b.inSync.Add(-1)
	for m := b.maxIn.Load(); n > m && !b.maxIn.CompareAndSwap(m, n); m = b.maxIn.Load() {
	}
	if b.gate != nil {
		<-b.gate
	}
	var errs []error
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range files {
		b.order = append(b.order, "sync "+f.Name())
		errs = append(errs, b.fail[f.Name()])
	}
	return errors.Join(errs...)
}

// eachBackend adds SyncEach to fakeBackend.
type eachBackend struct{ *fakeBackend }

func (b eachBackend) SyncEach(files []ring.File) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.order = append(b.order, fmt.Sprint("each ", len(files)))
	errs := make([]error, len(files))
	for i, f := range files {
		errs[i] = b.fail[f.Name()]
	}
	return errs
}

// fsBackend adds SyncFS to fakeBackend.
type fsBackend struct{ *fakeBackend }

func (b fsBackend) SyncFS(ring.File) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.order = append(b.order, "syncfs")
	return b.fsErr
}

// fakeFile is a ring.File that only has a name.
type fakeFile struct {
	ring.File
	name string
}

func (f fakeFile) Name() string { return f.name }
func (f fakeFile) Close() error { return nil }

func fakeFiles(n int) []ring.File {
	fs := make([]ring.File, n)
	for i := range fs {
		fs[i] = fakeFile{name: fmt.Sprint("f", i)}
	}
	return fs
}

// syncAll hands every file to s from its own goroutine while the syncer,
// bound to one call, is busy with a held inline sync, so that they all
// queue, and returns their results by index after release is closed.
func syncAll(t *testing.T, s *syncer, files []ring.File, release chan struct{}) []error {
	t.Helper()
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() { errs[i] = s.Sync(f) })
	}
	synctest.Wait() // every Sync is queued behind the held one
	s.mu.Lock()
	queued := len(s.queue)
	s.mu.Unlock()
	if queued != len(files) {
		t.Fatalf("%d of %d files queued", queued, len(files))
	}
	close(release)
	wg.Wait()
	return errs
}

// holdInline starts one Sync of a file named "first" that blocks inside
// the backend (inline, the syncer being idle) until release is closed.
func holdInline(t *testing.T, s *syncer, b *fakeBackend) (release chan struct{}, done chan error) {
	t.Helper()
	release = make(chan struct{})
	b.gate = release
	done = make(chan error, 1)
	go func() { done <- s.Sync(fakeFile{name: "first"}) }()
	synctest.Wait()
	if b.inSync.Load() != 1 {
		t.Fatal("the first Sync did not run inline")
	}
	return release, done
}

// TestSyncerPasses: with a backend that reports each file (EachSyncer), a
// queue of files is synced in one call per pass and each file gets its own
// error; with syncfs, a pass of many files is one SyncFS, and when it
// fails each file is synced on its own so that only the failed one fails.
func TestSyncerPasses(t *testing.T) {
	failed := &os.PathError{Op: "fdatasync", Path: "f7", Err: syscall.EIO}
	t.Run("each", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fb := &fakeBackend{fail: map[string]error{"f7": failed}}
			s := newSyncer(eachBackend{fb}, nil, 0)
			s.limit = 1 // everything queues behind the held sync
			release, first := holdInline(t, s, fb)
			errs := syncAll(t, s, fakeFiles(20), release)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			for i, err := range errs {
				if (i == 7) != (err != nil) {
					t.Fatalf("file %d: %v", i, err)
				}
			}
			fb.mu.Lock()
			defer fb.mu.Unlock()
			if len(fb.order) != 2 || fb.order[0] != "sync first" || fb.order[1] != "each 20" {
				t.Fatalf("backend calls %q, want the inline sync then one SyncEach of 20", fb.order)
			}
		})
	})
	t.Run("syncfs", func(t *testing.T) {
		for _, fsErr := range []error{nil, syscall.EIO} {
			t.Run(fmt.Sprint(fsErr), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					fb := &fakeBackend{fail: map[string]error{"f7": failed}, fsErr: fsErr}
					if fsErr == nil {
						fb.fail = nil // syncfs succeeds: no file failed
					}
					s := newSyncer(fsBackend{fb}, fakeFile{name: "dir"}, 4)
					if s.fs == nil {
						t.Skip("syncfs does not report errors on this kernel")
					}
					s.limit = 1 // everything queues behind the held sync
					release, first := holdInline(t, s, fb)
					errs := syncAll(t, s, fakeFiles(20), release)
					if err := <-first; err != nil {
						t.Fatal(err)
					}
					for i, err := range errs {
						if (fsErr != nil && i == 7) != (err != nil) {
							t.Fatalf("file %d: %v", i, err)
						}
					}
					fb.mu.Lock()
					defer fb.mu.Unlock()
					want := 2 // the inline sync, one syncfs
					if fsErr != nil {
						want += 20 // then each file on its own
					}
					if len(fb.order) != want || fb.order[1] != "syncfs" {
						t.Fatalf("backend calls %q, want %d starting with the inline sync and one syncfs", fb.order, want)
					}
				})
			})
		}
	})
	t.Run("bound", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fb := &fakeBackend{}
			s := newSyncer(fb, nil, 0)
			release, first := holdInline(t, s, fb)
			var wg sync.WaitGroup
			for _, f := range fakeFiles(3 * syncCallsMax) {
				wg.Go(func() {
					if err := s.Sync(f); err != nil {
						t.Error(err)
					}
				})
			}
			synctest.Wait()
			if n := fb.inSync.Load(); n != syncCallsMax {
				t.Fatalf("%d syncs in flight, want the bound %d", n, syncCallsMax)
			}
			close(release)
			wg.Wait()
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			if m := fb.maxIn.Load(); m != syncCallsMax {
				t.Fatalf("at most %d syncs in flight, want %d", m, syncCallsMax)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.busy != 0 || len(s.queue) != 0 {
				t.Fatalf("after the syncs: busy %d, queued %d", s.busy, len(s.queue))
			}
		})
	})
}
