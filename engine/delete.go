package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/ring"
)

// trashDir is where deleted topics' directories wait, under the data
// directory, until their last reader is done; leftovers are removed at
// start.
const trashDir = "trash"

// deletingMarker is the file DeleteTopic creates in a topic's directory
// before it removes the metadata file (the commit point). At start, a
// topic directory without metadata that holds the marker is a deleted
// topic's remains and is removed; a topic with metadata that holds it was
// being deleted when the process died, before the commit point, and keeps
// serving (the marker is removed).
const deletingMarker = "deleting"

// topicRefs counts the users of a topic's files: one for the topic map
// and one per fetch in progress (held until its result is released). The
// directory of a deleted topic is removed when the count drops to zero.
type topicRefs struct {
	n     atomic.Int64 // starts at 1, the topic map's reference
	trash atomic.Pointer[string]
	fs    ring.FS
	log   func(msg string, args ...any)
}

func newTopicRefs(fs ring.FS, logf func(string, ...any)) *topicRefs {
	r := &topicRefs{fs: fs, log: logf}
	r.n.Store(1)
	return r
}

// acquire takes a reference; false once the topic is deleted and unused.
func (r *topicRefs) acquire() bool {
	for {
		n := r.n.Load()
		if n <= 0 {
			return false
		}
		if r.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release drops a reference; the last one removes the trashed directory.
func (r *topicRefs) release() {
	if r.n.Add(-1) != 0 {
		return
	}
	if dir := r.trash.Load(); dir != nil {
		if err := r.fs.RemoveAll(*dir); err != nil {
			r.log("removing a deleted topic's directory failed; it is removed at the next start", "path", *dir, "err", err)
		}
	}
}

// DeleteTopic deletes the topic name and all its data, safely while
// consumers are reading it:
//
//   - the topic leaves the topic map at once: new requests get
//     UNKNOWN_TOPIC, and long-poll fetches waiting on it are woken and get
//     UNKNOWN_TOPIC;
//   - its partitions are closed (appends already queued are committed);
//   - a marker file is created in its directory and the directory
//     fsynced, so that a restart that finds the directory without
//     metadata knows it was deleted (see deletingMarker);
//   - its metadata file is deleted and the directory fsynced: the commit
//     point, after which a restart does not bring it back;
//   - its directory is renamed into <data-dir>/trash/ (both directories
//     fsynced), so the name can be reused at once;
//   - the group offsets committed for it are dropped;
//   - the renamed directory is removed when the last fetch result that
//     holds its mappings is released (mappings stay valid after the
//     unlink); what a crash leaves in trash/ is removed at the next start.
//
// Errors: INVALID_TOPIC_NAME, UNKNOWN_TOPIC, SHUTTING_DOWN, STORAGE_ERROR
// (the topic is gone from memory; a restart may bring it back if the
// metadata file could not be removed).
func (e *Engine) DeleteTopic(name string) error {
	if err := ValidateTopicName(name); err != nil {
		return err
	}
	e.createMu.Lock()
	defer e.createMu.Unlock()
	if e.isClosing() {
		return api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	e.mu.Lock()
	t, ok := e.topics[name]
	delete(e.topics, name)
	e.mu.Unlock()
	if !ok {
		return unknownTopic(name)
	}
	for _, p := range t.parts() {
		p.markDeleted()
	}
	if err := closeParts(t.parts()); err != nil {
		e.log.Warn("closing a deleted topic's partitions", "topic", name, "err", err)
	}
	if err := e.markDeleting(name); err != nil {
		t.refs.release()
		return storageError("delete topic: mark its directory", err)
	}
	meta := filepath.Join(e.metaDir(), name+".json")
	if err := e.opts.FS.Remove(meta); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.refs.release()
		return storageError("delete topic metadata", err)
	}
	if err := syncDir(e.opts.FS, e.metaDir()); err != nil {
		t.refs.release()
		return storageError("delete topic metadata", err)
	}
	trash, err := e.trashTopicDir(name)
	if err != nil {
		e.log.Warn("moving a deleted topic's directory to the trash failed; it is removed at the next start or create of the name", "topic", name, "err", err)
	} else {
		t.refs.trash.Store(&trash)
	}
	if err := e.offsets.forgetTopic(name); err != nil {
		e.log.Warn("dropping a deleted topic's group offsets failed", "topic", name, "err", err)
	}
	t.refs.release()
	e.log.Info("topic deleted", "topic", name)
	return nil
}

// markDeleting creates the deletion marker in the topic's directory and
// makes it durable.
func (e *Engine) markDeleting(name string) error {
	fsys := e.opts.FS
	dir := e.topicDir(name)
	f, err := fsys.Create(filepath.Join(dir, deletingMarker))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no directory (removed by hand): nothing to mark
	}
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}

// trashTopicDir renames the topic's directory into the trash and makes
// both names durable. It returns the new path.
func (e *Engine) trashTopicDir(name string) (string, error) {
	fsys := e.opts.FS
	dir := filepath.Join(e.opts.DataDir, trashDir)
	if err := mkdirDurable(fsys, dir); err != nil {
		return "", err
	}
	// The topic name is not part of the new name: it may be 249 bytes.
	to := filepath.Join(dir, fmt.Sprintf("%020d", time.Now().UnixNano()))
	if err := fsys.Rename(e.topicDir(name), to); err != nil {
		return "", err
	}
	if err := syncDir(e.opts.FS, filepath.Dir(e.topicDir(name))); err != nil {
		return to, err
	}
	return to, syncDir(e.opts.FS, dir)
}

// emptyTrash removes what deleted topics left in the trash directory.
func (e *Engine) emptyTrash() {
	dir := filepath.Join(e.opts.DataDir, trashDir)
	names, err := e.opts.FS.ReadDir(dir)
	if err != nil {
		return
	}
	for _, name := range names {
		p := filepath.Join(dir, name)
		if err := e.opts.FS.RemoveAll(p); err != nil {
			e.log.Warn("removing a deleted topic's directory failed", "path", p, "err", err)
			continue
		}
		e.log.Info("removed a deleted topic's directory", "path", p)
	}
}

// holdTopic returns the function that finishes a fetch of t's partition p
// for which a reference on t was taken: the reference goes with the
// result, released by its Release, or at once on error, and an error of a
// partition deleted meanwhile becomes UNKNOWN_TOPIC.
func holdTopic(t *topic, p *partition, name string) func(*FetchResult, error) (*FetchResult, error) {
	return func(res *FetchResult, err error) (*FetchResult, error) {
		if err != nil || res == nil {
			t.refs.release()
			if err != nil && p.deleted.Load() {
				err = unknownTopic(name)
			}
			return res, err
		}
		inner := res.release
		res.release = func() {
			if inner != nil {
				inner()
			}
			t.refs.release()
		}
		return res, nil
	}
}

// markDeleted makes the partition answer UNKNOWN_TOPIC and wakes its long
// polls.
func (p *partition) markDeleted() {
	p.deleted.Store(true)
	ch := make(chan struct{})
	close(*p.notify.Swap(&ch))
}

// mkdirDurable creates dir if it is missing and then fsyncs its parent,
// so that the new entry survives a crash.
func mkdirDurable(fsys ring.FS, dir string) error {
	if _, err := fsys.Stat(dir); err == nil {
		return nil
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return fsys.SyncDir(filepath.Dir(dir))
}

// deletedDir reports whether the topic directory dir holds the deletion
// marker: it is what a committed delete left, safe to remove.
func deletedDir(fsys ring.FS, dir string) bool {
	_, err := fsys.Stat(filepath.Join(dir, deletingMarker))
	return err == nil
}

// finishDeletes completes the deletes a crash interrupted: a topic
// directory without metadata that holds the deletion marker (its delete
// committed) is moved to the trash and removed; the marker is removed
// from the directory of a topic that has metadata (its delete did not
// commit; the topic serves). Failures are logged: the next start tries
// again.
func (e *Engine) finishDeletes(metas []topicMeta) {
	fsys := e.opts.FS
	names, err := fsys.ReadDir(filepath.Join(e.opts.DataDir, "topics"))
	if err != nil {
		return
	}
	known := make(map[string]bool, len(metas))
	for _, m := range metas {
		known[m.Name] = true
	}
	for _, name := range names {
		dir := e.topicDir(name)
		if !deletedDir(fsys, dir) {
			continue
		}
		if known[name] {
			err := fsys.Remove(filepath.Join(dir, deletingMarker))
			if err == nil {
				err = fsys.SyncDir(dir)
			}
			e.log.Warn("topic delete interrupted before its commit point; the topic is kept", "topic", name, "err", err)
			continue
		}
		// Renamed first, so that a crash in the middle of the removal
		// leaves a partial tree in the trash, not under topics/.
		to, err := e.trashTopicDir(name)
		if err == nil {
			err = fsys.RemoveAll(to)
		}
		if err != nil {
			e.log.Warn("removing a deleted topic's directory failed; retried at the next start", "path", dir, "err", err)
			continue
		}
		e.log.Info("removed the directory of a topic whose delete was interrupted", "path", dir)
	}
}
