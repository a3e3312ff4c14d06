package faultfs

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func write(t *testing.T, fs *FS, name, data string) *File {
	t.Helper()
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Backend().WriteAt(f, [][]byte{[]byte(data)}, 0); err != nil {
		t.Fatal(err)
	}
	return f.(*File)
}

func content(t *testing.T, path string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

// TestCrashKeepsOnlySynced: after Crash and Restore, file contents and
// directory entries are those of the last Sync and SyncDir.
func TestCrashKeepsOnlySynced(t *testing.T) {
	root := t.TempDir()
	_ = os.WriteFile(filepath.Join(root, "old"), []byte("adopted"), 0o644)
	fs := New(root, nil)
	sub := filepath.Join(root, "d")
	if err := fs.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = fs.SyncDir(root)
	a := write(t, fs, filepath.Join(sub, "a"), "synced")
	_ = fs.Backend().Sync(a)
	_ = fs.SyncDir(sub)
	_, _ = fs.Backend().WriteAt(a, [][]byte{[]byte("-lost")}, 6)
	c := write(t, fs, filepath.Join(sub, "c.tmp"), "renamed")
	_ = c.Sync()
	_ = fs.Rename(filepath.Join(sub, "c.tmp"), filepath.Join(sub, "c"))
	_ = fs.SyncDir(sub)
	b := write(t, fs, filepath.Join(sub, "b"), "never durable name")
	_ = b.Sync()
	_ = fs.Remove(filepath.Join(root, "old")) // removal not durable
	nd := filepath.Join(root, "nd")
	_ = fs.MkdirAll(nd, 0o755) // directory entry not durable
	_ = write(t, fs, filepath.Join(nd, "x"), "x").Sync()
	_ = fs.SyncDir(nd)
	osDir := filepath.Join(root, "made-with-os") // after root was adopted
	_ = os.Mkdir(osDir, 0o755)
	y := write(t, fs, filepath.Join(osDir, "y"), "y")
	_ = y.Sync()
	_ = fs.SyncDir(osDir)
	y.Close()
	fs.Crash()
	if _, err := fs.Backend().WriteAt(a, [][]byte{[]byte("z")}, 0); !errors.Is(err, ErrCrashed) {
		t.Fatalf("write after crash: %v", err)
	}
	for _, f := range []*File{a, b, c} {
		f.Close()
	}
	if err := fs.Restore(nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path   string
		want   string
		exists bool
	}{
		{filepath.Join(sub, "a"), "synced", true},
		{filepath.Join(sub, "b"), "", false},
		{filepath.Join(sub, "c"), "renamed", true},
		{filepath.Join(sub, "c.tmp"), "", false},
		{filepath.Join(root, "old"), "adopted", true},
		{filepath.Join(nd, "x"), "", false},
		{filepath.Join(osDir, "y"), "y", true},
	}
	for _, tc := range tests {
		got, ok := content(t, tc.path)
		if ok != tc.exists || got != tc.want {
			t.Errorf("%s: %q (exists %v), want %q (exists %v)", tc.path, got, ok, tc.want, tc.exists)
		}
	}
	if _, err := a.ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrCrashed) {
		t.Errorf("file opened before Restore: %v", err)
	}
}

// TestRules: injection by kind, path, After, Times, and partial writes.
func TestRules(t *testing.T) {
	root := t.TempDir()
	fs := New(root, nil)
	remove := fs.Inject(Rule{Ops: OpWrite, Path: "*.log", After: 1, Times: 1, Err: syscall.ENOSPC, Partial: true})
	f := write(t, fs, filepath.Join(root, "x.log"), "first")
	n, err := fs.Backend().WriteAt(f, [][]byte{[]byte("abcd"), []byte("efgh")}, 5)
	if !errors.Is(err, syscall.ENOSPC) || n != 4 {
		t.Fatalf("second write: %d, %v; want 4, ENOSPC", n, err)
	}
	if _, err := fs.Backend().WriteAt(f, [][]byte{[]byte("ok")}, 5); err != nil {
		t.Fatalf("third write (rule retired): %v", err)
	}
	remove()
	fs.Inject(Rule{Ops: OpSync, Err: syscall.EIO})
	if err := fs.Backend().Sync(f); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync: %v", err)
	}
	g := write(t, fs, filepath.Join(root, "y.index"), "index ok")
	g.Close()
	f.Close()
	if got, _ := content(t, filepath.Join(root, "x.log")); got != "firstokcd" {
		t.Fatalf("x.log = %q", got)
	}
	if s := fs.Stats(); s.Count(OpWrite) != 4 || s.Count(OpSync) != 1 {
		t.Fatalf("stats: %d writes, %d syncs", s.Count(OpWrite), s.Count(OpSync))
	}
}

// TestCrashAfterAndTorn: CrashAfter fails the n-th counted call; a torn
// restore keeps a prefix of unsynced bytes over the synced image.
func TestCrashAfterAndTorn(t *testing.T) {
	root := t.TempDir()
	fs := New(root, nil)
	f := write(t, fs, filepath.Join(root, "f"), "aaaa")
	_ = f.Sync()
	_ = fs.SyncDir(root)
	fs.CrashAfter(2)
	if _, err := fs.Backend().WriteAt(f, [][]byte{[]byte("bbbbbbbb")}, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, ErrCrashed) {
		t.Fatalf("second counted call: %v", err)
	}
	f.Close()
	if err := fs.Restore(rand.New(rand.NewPCG(1, 2))); err != nil {
		t.Fatal(err)
	}
	got, _ := content(t, filepath.Join(root, "f"))
	if len(got) < 4 {
		t.Fatalf("torn restore lost synced bytes: %q", got)
	}
	for i := range got {
		if got[i] != 'a' && got[i] != 'b' || i > 0 && got[i] == 'b' && got[i-1] == 'a' {
			t.Fatalf("torn restore %q is not a prefix of new bytes over old", got)
		}
	}
}

// TestSyncDirSeesPackageOS: a directory renamed away with package os and a
// file created with package os are taken as they are by the next SyncDir.
func TestSyncDirSeesPackageOS(t *testing.T) {
	root := t.TempDir()
	fs := New(root, nil)
	topic := filepath.Join(root, "t")
	_ = fs.MkdirAll(topic, 0o755)
	_ = fs.SyncDir(root)
	f := write(t, fs, filepath.Join(topic, "seg"), "data")
	_ = f.Sync()
	f.Close()
	_ = fs.SyncDir(topic)
	if err := os.Rename(topic, filepath.Join(root, "trash")); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(root, "made-with-os"), []byte("os"), 0o644)
	_ = fs.SyncDir(root)
	fs.Crash()
	if err := fs.Restore(nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := content(t, filepath.Join(topic, "seg")); ok {
		t.Error("a directory renamed away and synced came back")
	}
	for _, p := range []string{filepath.Join(root, "trash", "seg"), filepath.Join(root, "made-with-os")} {
		if _, ok := content(t, p); !ok {
			t.Errorf("%s lost", p)
		}
	}
}
