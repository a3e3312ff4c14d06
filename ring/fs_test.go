package ring

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestOSFSEngineCalls covers the calls of OS that the engine uses beside segment's:
// ReadFile, RemoveAll, Lock and Statfs.
func TestOSFSEngineCalls(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(OS, path); err != nil || string(b) != "content" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if _, err := ReadFile(OS, filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadFile of a missing file: %v", err)
	}

	lockPath := filepath.Join(dir, "LOCK")
	l, err := OS.Lock(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OS.Lock(lockPath); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = OS.Lock(lockPath)
	if err != nil {
		t.Fatalf("Lock after Close: %v", err)
	}
	l.Close()
	if _, err := OS.Lock(filepath.Join(dir, "no", "such", "dir")); err == nil || errors.Is(err, ErrLocked) {
		t.Fatalf("Lock in a missing directory: %v", err)
	}

	sp, err := OS.Statfs(dir)
	if err != nil || sp.Avail <= 0 || sp.Total < sp.Avail {
		t.Fatalf("Statfs = %+v, %v", sp, err)
	}
	if _, err := OS.Statfs(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Statfs of a missing path: %v", err)
	}

	tree := filepath.Join(dir, "t", "0")
	if err := OS.MkdirAll(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(tree, "seg"), nil, 0o644)
	if err := OS.RemoveAll(filepath.Join(dir, "t")); err != nil {
		t.Fatal(err)
	}
	if _, err := OS.Stat(filepath.Join(dir, "t")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after RemoveAll: %v", err)
	}
	if err := OS.RemoveAll(filepath.Join(dir, "t")); err != nil {
		t.Fatalf("RemoveAll of a missing tree: %v", err)
	}
}
