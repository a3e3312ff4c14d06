package faultfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/ring"
)

// tree makes root/t/a and root/t/0/seg: adopted (written with package
// os before the FS saw them) when adopted, else created and synced
// through fs, every directory synced.
func tree(t *testing.T, fs *FS, root string, adopted bool) {
	t.Helper()
	sub := filepath.Join(root, "t", "0")
	if adopted {
		_ = os.MkdirAll(sub, 0o755)
		_ = os.WriteFile(filepath.Join(root, "t", "a"), []byte("A"), 0o644)
		_ = os.WriteFile(filepath.Join(sub, "seg"), []byte("SEG"), 0o644)
		return
	}
	if err := fs.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = write(t, fs, filepath.Join(root, "t", "a"), "A").Sync()
	_ = write(t, fs, filepath.Join(sub, "seg"), "SEG").Sync()
	for _, d := range []string{sub, filepath.Join(root, "t"), root} {
		if err := fs.SyncDir(d); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRemoveAllCrash: a RemoveAll whose parent directory was not fsynced
// is undone by a crash, with the durable content of everything below it;
// after SyncDir of the parent it stays done.
func TestRemoveAllCrash(t *testing.T) {
	for _, tc := range []struct {
		name             string
		adopted, syncDir bool
	}{
		{"tracked-unsynced", false, false},
		{"adopted-unsynced", true, false},
		{"tracked-synced", false, true},
		{"adopted-synced", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			fs := New(root, nil)
			tree(t, fs, root, tc.adopted)
			if err := fs.RemoveAll(filepath.Join(root, "t")); err != nil {
				t.Fatal(err)
			}
			if _, ok := content(t, filepath.Join(root, "t", "a")); ok {
				t.Fatal("RemoveAll left a file")
			}
			if tc.syncDir {
				_ = fs.SyncDir(root)
			}
			fs.Crash()
			if err := fs.Restore(nil); err != nil {
				t.Fatal(err)
			}
			for path, want := range map[string]string{"t/a": "A", "t/0/seg": "SEG"} {
				got, ok := content(t, filepath.Join(root, path))
				if tc.syncDir && ok {
					t.Errorf("%s came back after a synced RemoveAll", path)
				}
				if !tc.syncDir && got != want {
					t.Errorf("%s = %q (exists %v) after an unsynced RemoveAll, want %q", path, got, ok, want)
				}
			}
		})
	}
}

// TestDirRenameCrash: a directory renamed into another one is back under
// its old name, with its durable content, unless both directories were
// fsynced; then only the new name holds it.
func TestDirRenameCrash(t *testing.T) {
	for _, tc := range []struct {
		name             string
		adopted, syncDir bool
	}{
		{"tracked-unsynced", false, false},
		{"adopted-unsynced", true, false},
		{"tracked-synced", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			fs := New(root, nil)
			tree(t, fs, root, tc.adopted)
			trash := filepath.Join(root, "trash")
			_ = fs.MkdirAll(trash, 0o755)
			_ = fs.SyncDir(root)
			if err := fs.Rename(filepath.Join(root, "t"), filepath.Join(trash, "x")); err != nil {
				t.Fatal(err)
			}
			if tc.syncDir {
				_ = fs.SyncDir(root)
				_ = fs.SyncDir(trash)
			}
			fs.Crash()
			if err := fs.Restore(nil); err != nil {
				t.Fatal(err)
			}
			oldSeg, oldOK := content(t, filepath.Join(root, "t", "0", "seg"))
			newSeg, newOK := content(t, filepath.Join(trash, "x", "0", "seg"))
			switch {
			case tc.syncDir && (oldOK || newSeg != "SEG"):
				t.Fatalf("synced rename: old %q (%v), new %q (%v)", oldSeg, oldOK, newSeg, newOK)
			case !tc.syncDir && (oldSeg != "SEG" || newOK):
				t.Fatalf("unsynced rename: old %q (%v), new %q (%v)", oldSeg, oldOK, newSeg, newOK)
			}
		})
	}
}

// TestLockAndStatfs: Lock excludes a second holder until Close; Statfs
// passes through; both can be failed by rules and are counted.
func TestLockAndStatfs(t *testing.T) {
	root := t.TempDir()
	fs := New(root, nil)
	path := filepath.Join(root, "LOCK")
	l, err := fs.Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Lock(path); !errors.Is(err, ring.ErrLocked) {
		t.Fatalf("second lock: %v, want ring.ErrLocked", err)
	}
	if _, err := ring.OS.Lock(path); !errors.Is(err, ring.ErrLocked) {
		t.Fatalf("lock through ring.OS: %v, want ring.ErrLocked", err)
	}
	l.Close()
	l, err = fs.Lock(path)
	if err != nil {
		t.Fatalf("lock after Close: %v", err)
	}
	l.Close()
	sp, err := fs.Statfs(root)
	if err != nil || sp.Avail <= 0 || sp.Total < sp.Avail {
		t.Fatalf("Statfs = %+v, %v", sp, err)
	}
	fs.Inject(Rule{Ops: OpStatfs | OpLock, Err: syscall.EIO})
	if _, err := fs.Statfs(root); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Statfs with a rule: %v", err)
	}
	if _, err := fs.Lock(path); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Lock with a rule: %v", err)
	}
	if s := fs.Stats(); s.Count(OpLock) != 4 || s.Count(OpStatfs) != 2 {
		t.Fatalf("stats: %d locks, %d statfs", s.Count(OpLock), s.Count(OpStatfs))
	}
}
