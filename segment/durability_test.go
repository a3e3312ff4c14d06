package segment

import (
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/seedqueue/sq/ring"
)

// recordingFS records the metadata calls made through it.
type recordingFS struct {
	ring.FS
	mu  sync.Mutex
	ops []string
}

func (r *recordingFS) record(op, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op+" "+filepath.Base(name))
}

func (r *recordingFS) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := r.ops
	r.ops = nil
	return ops
}

func (r *recordingFS) Create(name string) (ring.File, error) {
	r.record("create", name)
	return r.FS.Create(name)
}

func (r *recordingFS) Rename(oldname, newname string) error {
	r.record("rename", oldname+"->"+filepath.Base(newname))
	return r.FS.Rename(oldname, newname)
}

func (r *recordingFS) Remove(name string) error {
	r.record("remove", name)
	return r.FS.Remove(name)
}

func (r *recordingFS) SyncDir(dir string) error {
	r.record("syncdir", dir)
	return r.FS.SyncDir(dir)
}

// recordingBackend records the fdatasyncs of .log files into an FS's log.
type recordingBackend struct {
	ring.Backend
	r *recordingFS
}

func (b *recordingBackend) Sync(files ...ring.File) error {
	for _, f := range files {
		if strings.HasSuffix(f.Name(), logSuffix) {
			b.r.record("sync", f.Name())
		}
	}
	return b.Backend.Sync(files...)
}

// TestDurabilityOrder checks that names are made durable before the calls
// that depend on them return: a rolled segment's files before Append
// returns, the recovery point's rename before Checkpoint returns; and that
// a roll fdatasyncs the sealed segment and checkpoints before it creates
// the next segment (doc.go: a torn write can only be in the last segment).
func TestDurabilityOrder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "p0")
	rfs := &recordingFS{FS: ring.OS}
	l, err := Open(dir, rfs, &recordingBackend{Backend: ring.NewPortable(), r: rfs}, smallOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := []string{"syncdir " + filepath.Base(filepath.Dir(dir)), "create 00000000000000000000.log", "create 00000000000000000000.index", "create 00000000000000000000.timeindex", "syncdir p0"}
	if got := rfs.take(); !slices.Equal(got, want) {
		t.Fatalf("Open of a new directory: %v, want %v", got, want)
	}
	for {
		info := appendBatches(t, l, 1, 1, 2, 50)[0]
		ops := rfs.take()
		if !info.Rolled {
			if len(ops) != 0 {
				t.Fatalf("append without a roll made metadata calls %v", ops)
			}
			continue
		}
		name := baseName(info.Segment)
		want := []string{"sync 00000000000000000000.log",
			"create recovery-point.sqtmp", "rename recovery-point.sqtmp->recovery-point", "syncdir p0",
			"create " + name + ".log", "create " + name + ".index", "create " + name + ".timeindex", "syncdir p0"}
		if !slices.Equal(ops, want) {
			t.Fatalf("rolling append: %v, want %v", ops, want)
		}
		break
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	rfs.take() // the fdatasyncs of Sync
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(rfs.take(), ", ")
	if want := "create recovery-point.sqtmp, rename recovery-point.sqtmp->recovery-point, syncdir p0"; got != want {
		t.Fatalf("Checkpoint: %s, want %s", got, want)
	}
}
