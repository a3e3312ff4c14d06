package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
)

// trashDir is where deleted topics' directories wait, under the data
// directory, until their last reader is done; leftovers are removed at
// start.
const trashDir = "trash"

// topicRefs counts the users of a topic's files: one for the topic map
// and one per fetch in progress (held until its result is released). The
// directory of a deleted topic is removed when the count drops to zero.
type topicRefs struct {
	n     atomic.Int64 // starts at 1, the topic map's reference
	trash atomic.Pointer[string]
	log   func(msg string, args ...any)
}

func newTopicRefs(logf func(string, ...any)) *topicRefs {
	r := &topicRefs{log: logf}
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
		if err := os.RemoveAll(*dir); err != nil {
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
	for _, p := range t.parts {
		p.markDeleted()
	}
	if err := closeParts(t.parts); err != nil {
		e.log.Warn("closing a deleted topic's partitions", "topic", name, "err", err)
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
		e.log.Warn("moving a deleted topic's directory to the trash failed; it is removed at the next create of the name", "topic", name, "err", err)
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

// trashTopicDir renames the topic's directory into the trash and makes
// both names durable. It returns the new path.
func (e *Engine) trashTopicDir(name string) (string, error) {
	dir := filepath.Join(e.opts.DataDir, trashDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// The topic name is not part of the new name: it may be 249 bytes.
	to := filepath.Join(dir, fmt.Sprintf("%020d", time.Now().UnixNano()))
	if err := os.Rename(e.topicDir(name), to); err != nil {
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
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, ent := range ents {
		p := filepath.Join(dir, ent.Name())
		if err := os.RemoveAll(p); err != nil {
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
