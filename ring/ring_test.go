package ring

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestPortableWriteAt(t *testing.T) {
	tests := []struct {
		name string
		bufs [][]byte
		off  int64
	}{
		{"one buffer", [][]byte{[]byte("hello")}, 0},
		{"several buffers at an offset", [][]byte{[]byte("ab"), []byte("cde"), []byte("f")}, 100},
		{"empty buffers skipped", [][]byte{nil, []byte("x"), {}, []byte("yz")}, 7},
		{"more buffers than IOV_MAX", manyBufs(3000), 3},
		{"nothing", nil, 0},
	}
	b := NewPortable()
	if b.Name() != "portable" {
		t.Fatalf("Name() = %q", b.Name())
	}
	for _, tc := range tests {
		for _, dsync := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/dsync=%v", tc.name, dsync), func(t *testing.T) {
				testPortableWrite(t, b, tc.bufs, tc.off, dsync)
			})
		}
	}
}

// testPortableWrite writes bufs at off of a new file with b, with WriteAt
// and Sync or with WriteAtDsync, and reads them back.
func testPortableWrite(t *testing.T, b *Portable, bufs [][]byte, off int64, dsync bool) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := OS.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	if dsync {
		n, err = b.WriteAtDsync(f, bufs, off)
	} else if n, err = b.WriteAt(f, bufs, off); err == nil {
		err = b.Sync(f)
	}
	want := bytes.Join(bufs, nil)
	if err != nil || n != int64(len(want)) {
		t.Fatalf("write = %d, %v; want %d, nil", n, err, len(want))
	}
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, off); len(want) > 0 && err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read back %q, want %q", got, want)
	}
}

func manyBufs(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte{byte(i), byte(i >> 8)}
	}
	return out
}

func TestAdvance(t *testing.T) {
	bufs := [][]byte{[]byte("abc"), []byte("de"), []byte("f")}
	for n := 0; n <= 6; n++ {
		got := bytes.Join(advance(bufs, n), nil)
		if want := []byte("abcdef")[n:]; !bytes.Equal(got, want) {
			t.Errorf("advance(%d) = %q, want %q", n, got, want)
		}
	}
	if string(bytes.Join(bufs, nil)) != "abcdef" {
		t.Fatal("advance modified its input")
	}
}

func TestAllocateTruncate(t *testing.T) {
	b := NewPortable()
	path := filepath.Join(t.TempDir(), "f")
	f, err := OS.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := b.Allocate(f, 0, 8192); err != nil {
		t.Fatal(err)
	}
	if err := b.Allocate(f, 8192, 4096); err != nil {
		t.Fatal(err)
	}
	if fi, _ := f.Stat(); fi.Size() != 12288 {
		t.Fatalf("size after Allocate = %d, want 12288", fi.Size())
	}
	if err := b.Truncate(f, 100); err != nil {
		t.Fatal(err)
	}
	if fi, _ := OS.Stat(path); fi.Size() != 100 {
		t.Fatalf("size after Truncate = %d, want 100", fi.Size())
	}
}

func TestOSFS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := OS.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := OS.Create(filepath.Join(dir, "x.sqtmp"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := OS.Rename(filepath.Join(dir, "x.sqtmp"), filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	if err := OS.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	names, err := OS.ReadDir(dir)
	if err != nil || len(names) != 1 || names[0] != "x" {
		t.Fatalf("ReadDir = %v, %v", names, err)
	}
	rf, err := OS.Open(filepath.Join(dir, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rf.WriteAt([]byte("z"), 0); err == nil {
		t.Error("write to a file opened read-only succeeded")
	}
	rf.Close()
	rw, err := OS.OpenReadWrite(filepath.Join(dir, "x"))
	if err != nil {
		t.Fatal(err)
	}
	rw.Close()
	if err := OS.Remove(filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := OS.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatalf("Stat after Remove: %v", err)
	}
}
