//go:build linux

package ring

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// uringVariants are the ways NewUringWith drives a ring, by name.
var uringVariants = []struct {
	name string
	o    UringOptions
}{
	{"shared", UringOptions{}},
	{"defer", UringOptions{DeferTaskrun: true}},
	{"sqpoll", UringOptions{SQPoll: true, SQPollIdleMs: 1}},
}

// forEachUring runs fn as a subtest on each io_uring variant.
func forEachUring(t *testing.T, fn func(t *testing.T, b *uringBackend)) {
	for _, v := range uringVariants {
		t.Run(v.name, func(t *testing.T) { fn(t, newUringOrSkip(t, v.o)) })
	}
}

// newUringOrSkip returns an io_uring backend driven as o says, or skips the
// test with the probe's reason where the kernel refuses io_uring (or, for
// a variant other than the shared ring, its setup flags).
func newUringOrSkip(t testing.TB, o UringOptions) *uringBackend {
	t.Helper()
	if ok, why := Probe(); !ok {
		t.Skip("io_uring unavailable: " + why)
	}
	be, err := NewUringWith(o)
	if err != nil && o != (UringOptions{}) && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM)) {
		t.Skipf("io_uring with %+v refused: %v", o, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Error(err)
		}
	})
	return be.(*uringBackend)
}

func createFile(t testing.TB, name string) File {
	t.Helper()
	f, err := OS.Create(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestUringWriteReadBack(t *testing.T) { forEachUring(t, testUringWriteReadBack) }

func testUringWriteReadBack(t *testing.T, b *uringBackend) {
	if b.Name() != "uring" {
		t.Fatalf("Name() = %q", b.Name())
	}
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
	for _, tc := range tests {
		for _, call := range []string{"separate", "linked", "dsync"} {
			t.Run(fmt.Sprintf("%s/%s", tc.name, call), func(t *testing.T) {
				f := createFile(t, "f")
				var n int64
				var err error
				switch call {
				case "linked":
					n, err = b.WriteAndSync(f, tc.bufs, tc.off)
				case "dsync":
					n, err = b.WriteAtDsync(f, tc.bufs, tc.off)
				default:
					if n, err = b.WriteAt(f, tc.bufs, tc.off); err == nil {
						err = b.Sync(f)
					}
				}
				want := bytes.Join(tc.bufs, nil)
				if err != nil || n != int64(len(want)) {
					t.Fatalf("write = %d, %v; want %d, nil", n, err, len(want))
				}
				got := make([]byte, len(want))
				if _, err := f.ReadAt(got, tc.off); len(want) > 0 && err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("read back %q, want %q", got, want)
				}
			})
		}
	}
}

func TestUringConcurrentWriters(t *testing.T) { forEachUring(t, testUringConcurrentWriters) }

func testUringConcurrentWriters(t *testing.T, b *uringBackend) {
	const writers, writes, size = 16, 40, 300
	shared := createFile(t, "shared")
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own, err := OS.Create(filepath.Join(t.TempDir(), "own"))
			if err != nil {
				errs <- err
				return
			}
			defer own.Close()
			for i := range writes {
				rec := bytes.Repeat([]byte{byte(w), byte(i)}, size/2)
				off := int64(i) * size
				if _, err := b.WriteAndSync(own, [][]byte{rec[:10], rec[10:]}, off); err != nil {
					errs <- err
					return
				}
				if _, err := b.WriteAt(shared, [][]byte{rec}, int64(w*writes+i)*size); err != nil {
					errs <- err
					return
				}
				if err := b.Sync(shared, own); err != nil {
					errs <- err
					return
				}
			}
			for i := range writes {
				got := make([]byte, size)
				if _, err := own.ReadAt(got, int64(i)*size); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(w), byte(i)}, size/2)) {
					errs <- fmt.Errorf("writer %d record %d: read back wrong data (%v)", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range writers {
		for i := range writes {
			got := make([]byte, size)
			if _, err := shared.ReadAt(got, int64(w*writes+i)*size); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(w), byte(i)}, size/2)) {
				t.Fatalf("shared file, writer %d record %d: wrong data (%v)", w, i, err)
			}
		}
	}
	if b.r != nil {
		if n := b.r.pend.size(); n != 0 {
			t.Fatalf("%d operations still pending", n)
		}
	}
}

func TestUringSyncManyFilesAndErrors(t *testing.T) { forEachUring(t, testUringSyncManyFilesAndErrors) }

func testUringSyncManyFilesAndErrors(t *testing.T, b *uringBackend) {
	var files []File
	for i := range 300 { // more than one submission queue's worth
		f := createFile(t, fmt.Sprintf("f%d", i))
		if _, err := b.WriteAt(f, [][]byte{[]byte("x")}, 0); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if err := b.Sync(files...); err != nil {
		t.Fatal(err)
	}
	bad := badFile{name: "closed"}
	err := b.Sync(files[0], bad, files[1])
	if !errors.Is(err, unix.EBADF) {
		t.Fatalf("Sync with a bad descriptor = %v, want EBADF", err)
	}
	if _, err := b.WriteAndSync(bad, [][]byte{[]byte("x")}, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("WriteAndSync to a bad descriptor = %v, want EBADF", err)
	}
}

// badFile is a File whose descriptor is invalid.
type badFile struct {
	File
	name string
}

func (f badFile) Fd() uintptr  { return ^uintptr(0) }
func (f badFile) Name() string { return f.name }

// fakeSubmit records the submissions and answers them from results.
type fakeSubmit struct {
	got     [][]op
	results [][]int32
}

func (s *fakeSubmit) submit(ops []op) ([]int32, error) {
	s.got = append(s.got, append([]op(nil), ops...))
	r := s.results[0]
	s.results = s.results[1:]
	return r, nil
}

func TestWriteSyncShortWrite(t *testing.T) {
	f := createFile(t, "f")
	ecanceled := -int32(unix.ECANCELED)
	tests := []struct {
		name    string
		sync    bool
		results [][]int32
		wantOff []uint64 // write offset of each submission
		wantErr bool
	}{
		{"write and sync in one go", true, [][]int32{{10, 0}}, []uint64{100}, false},
		{"short write resubmitted with its cancelled sync", true, [][]int32{{3, ecanceled}, {4, ecanceled}, {3, 0}}, []uint64{100, 103, 107}, false},
		{"short plain write", false, [][]int32{{6}, {4}}, []uint64{100, 106}, false},
		{"EINTR retried", false, [][]int32{{-int32(unix.EINTR)}, {10}}, []uint64{100, 100}, false},
		{"write error cancels the sync", true, [][]int32{{-int32(unix.ENOSPC), ecanceled}}, []uint64{100}, true},
		{"sync error reported", true, [][]int32{{10, -int32(unix.EIO)}}, []uint64{100}, true},
		{"zero-byte write fails", false, [][]int32{{0}}, []uint64{100}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &fakeSubmit{results: tc.results}
			bufs := [][]byte{[]byte("abcde"), []byte("fghij")}
			n, err := writeSync(s.submit, f, bufs, 100, tc.sync, 0)
			if (err != nil) != tc.wantErr {
				t.Fatalf("writeSync = %d, %v; want error %v", n, err, tc.wantErr)
			}
			if len(s.got) != len(tc.wantOff) {
				t.Fatalf("%d submissions, want %d", len(s.got), len(tc.wantOff))
			}
			var written int64
			for i, ops := range s.got {
				w := ops[0]
				if w.opcode != ioringOpWritev || w.off != tc.wantOff[i] {
					t.Fatalf("submission %d: opcode %d at %d, want WRITEV at %d", i, w.opcode, w.off, tc.wantOff[i])
				}
				var iovLen uint64
				for _, v := range w.iov {
					iovLen += v.Len
				}
				if want := uint64(10) - (w.off - 100); iovLen != want {
					t.Fatalf("submission %d writes %d bytes, want the remaining %d", i, iovLen, want)
				}
				if tc.sync {
					if len(ops) != 2 || ops[1].opcode != ioringOpFsync || ops[1].opFlags != ioringFsyncDatasync || w.flags&iosqeIOLink == 0 {
						t.Fatalf("submission %d: %+v, want WRITEV linked to FSYNC(DATASYNC)", i, ops)
					}
				} else if len(ops) != 1 {
					t.Fatalf("submission %d: %d operations, want 1", i, len(ops))
				}
				if r := tc.results[i][0]; r > 0 {
					written += int64(r)
				}
			}
			if n != written {
				t.Fatalf("n = %d, want %d", n, written)
			}
		})
	}
}

func TestPendingTableOutOfOrder(t *testing.T) {
	var pt pendingTable
	a, b := &call{}, &call{}
	fa := pt.add(a, 3)
	fb := pt.add(b, 2)
	if fb != fa+3 {
		t.Fatalf("ids overlap: a from %d, b from %d", fa, fb)
	}
	// Completions arrive in an order unrelated to submission.
	order := []struct {
		id  uint64
		res int32
	}{{fb + 1, 21}, {fa + 2, 12}, {fa, 10}, {fb, 20}, {fa + 1, 11}}
	for i, c := range order {
		if !pt.complete(c.id, c.res) {
			t.Fatalf("completion %d (id %d) unknown", i, c.id)
		}
		if i == 3 {
			select {
			case <-b.done:
			default:
				t.Fatal("call b not done after its last completion")
			}
			select {
			case <-a.done:
				t.Fatal("call a done before its last completion")
			default:
			}
		}
	}
	<-a.done
	if fmt.Sprint(a.res) != "[10 11 12]" || fmt.Sprint(b.res) != "[20 21]" {
		t.Fatalf("results a %v b %v, want [10 11 12] [20 21]", a.res, b.res)
	}
	if pt.complete(fa, 0) || pt.complete(closeUserData, 0) {
		t.Fatal("a completed or unknown id was accepted")
	}
	if pt.size() != 0 {
		t.Fatalf("size = %d, want 0", pt.size())
	}
}

func TestUringClose(t *testing.T) {
	for _, v := range uringVariants {
		t.Run(v.name, func(t *testing.T) { testUringClose(t, v.o) })
	}
}

func testUringClose(t *testing.T, o UringOptions) {
	if ok, why := Probe(); !ok {
		t.Skip("io_uring unavailable: " + why)
	}
	be, err := NewUringWith(o)
	if err != nil && o != (UringOptions{}) && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM)) {
		t.Skipf("io_uring with %+v refused: %v", o, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatalf("Close with nothing in flight: %v", err)
	}
	if err := be.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	f := createFile(t, "f")
	if _, err := be.WriteAt(f, [][]byte{[]byte("x")}, 0); !errors.Is(err, errUringClosed) {
		t.Fatalf("WriteAt after Close = %v, want errUringClosed", err)
	}
	if err := be.Sync(f); !errors.Is(err, errUringClosed) {
		t.Fatalf("Sync after Close = %v, want errUringClosed", err)
	}
}

func TestSelect(t *testing.T) {
	ok, why := Probe()
	t.Logf("probe: %v, %s", ok, why)
	uringName, autoName := "", "portable"
	if ok {
		uringName = "uring"
		if AutoPrefersUring {
			autoName = "uring"
		}
	}
	tests := []struct {
		mode     string
		wantName string // "" means Select fails
	}{
		{ModePortable, "portable"},
		{ModeUring, uringName},
		{ModeAuto, autoName},
		{"bogus", ""},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			be, reason, err := Select(tc.mode, nil)
			if (err != nil) != (tc.wantName == "") {
				t.Fatalf("Select(%q) error %v, want name %q", tc.mode, err, tc.wantName)
			}
			if err != nil {
				return
			}
			defer be.Close()
			if be.Name() != tc.wantName || reason == "" {
				t.Fatalf("Select(%q) = %s (%q), want %s with a reason", tc.mode, be.Name(), reason, tc.wantName)
			}
		})
	}
}

func TestUringABIOffsets(t *testing.T) {
	// The compile-time checks in uring_linux.go pin the sizes; this pins
	// the offsets of the fields the kernel reads (<linux/io_uring.h>).
	var s uringSQE
	var p uringParams
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"sqe.addr", unsafe.Offsetof(s.addr), 16},
		{"sqe.fsync_flags", unsafe.Offsetof(s.opFlags), 28},
		{"sqe.user_data", unsafe.Offsetof(s.userData), 32},
		{"params.sq_off", unsafe.Offsetof(p.sqOff), 40},
		{"params.cq_off", unsafe.Offsetof(p.cqOff), 80},
	} {
		if c.got != c.want {
			t.Errorf("%s at %d, want %d", c.name, c.got, c.want)
		}
	}
}

// TestUringSmallRingManyWaiters runs more callers than a 4-entry ring (8
// CQEs) holds at once: submissions wait for free completion slots and the
// waiters hand the reaping over among themselves.
func TestUringSmallRingManyWaiters(t *testing.T) {
	if ok, why := Probe(); !ok {
		t.Skip("io_uring unavailable: " + why)
	}
	r, err := newRing(4)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			for range 200 {
				res, err := r.submit([]op{{opcode: ioringOpNop}, {opcode: ioringOpNop}, {opcode: ioringOpNop}})
				if err != nil || len(res) != 3 || res[0] != 0 || res[1] != 0 || res[2] != 0 {
					errs <- fmt.Errorf("submit = %v, %v", res, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.submit([]op{{opcode: ioringOpNop}, {opcode: ioringOpNop}, {opcode: ioringOpNop}, {opcode: ioringOpNop}, {opcode: ioringOpNop}}); err == nil {
		t.Fatal("submit after close succeeded")
	}
}

// TestUringManyConcurrentCallers has more callers in flight at once than
// the ring has SQEs, so the single-issuer and SQPOLL drivers hold requests
// back until completions make room, and the shared ring waits for
// completion slots; every write must land and every call return.
func TestUringManyConcurrentCallers(t *testing.T) {
	forEachUring(t, func(t *testing.T, b *uringBackend) {
		const callers = 400 // > uringEntries, and each call is 2 operations
		f := createFile(t, "f")
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec := bytes.Repeat([]byte{byte(c)}, 16)
				if _, err := b.WriteAndSync(f, [][]byte{rec}, int64(c)*16); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got := make([]byte, callers*16)
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		for c := range callers {
			if !bytes.Equal(got[c*16:c*16+16], bytes.Repeat([]byte{byte(c)}, 16)) {
				t.Fatalf("caller %d: wrong data", c)
			}
		}
	})
}
