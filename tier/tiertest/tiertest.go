// Package tiertest holds the conformance test of tier.ObjectStore: every
// implementation (tier.MemStore, tier/s3.Store) runs the same checks of
// the interface's contract, so code written against one behaves the same
// on the others.
package tiertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/seedqueue/sq/tier"
)

// testTimeout bounds each check.
const testTimeout = 30 * time.Second

// Run checks s against the tier.ObjectStore contract: Put and Head report
// size and CRC-32C, Get serves ranges (cut at the end, ErrInvalidRange
// past it, ErrNotFound for a missing key), an empty object, List returns
// a prefix's keys in order, Delete is idempotent, IfAbsent refuses a
// taken key, and Check succeeds. s must be empty, or at least hold
// nothing under the prefix "tiertest/".
func Run(t *testing.T, s tier.ObjectStore) {
	t.Run("PutHead", func(t *testing.T) { testPutHead(t, s) })
	t.Run("GetRanges", func(t *testing.T) { testGetRanges(t, s) })
	t.Run("Empty", func(t *testing.T) { testEmpty(t, s) })
	t.Run("Missing", func(t *testing.T) { testMissing(t, s) })
	t.Run("ListDelete", func(t *testing.T) { testListDelete(t, s) })
	t.Run("IfAbsent", func(t *testing.T) { testIfAbsent(t, s) })
	t.Run("Check", func(t *testing.T) {
		if err := s.Check(ctx(t)); err != nil {
			t.Fatalf("Check: %v", err)
		}
	})
}

// ctx returns a context cancelled after testTimeout or at the test's end.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return c
}

// Data returns n bytes of a pattern that differs at every position of a
// 251-byte cycle, so a misplaced range shows.
func Data(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// MustPut puts data under key and fails the test on an error or when the
// returned size or CRC-32C is wrong.
func MustPut(t *testing.T, s tier.ObjectStore, key string, data []byte) tier.ObjectInfo {
	t.Helper()
	info, err := s.Put(ctx(t), key, bytes.NewReader(data), int64(len(data)), tier.PutOptions{})
	if err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	if info.Key != key || info.Size != int64(len(data)) || !info.HasCRC32C || info.CRC32C != tier.Checksum(data) {
		t.Fatalf("Put %s returned %+v, want %d bytes with CRC-32C %08x", key, info, len(data), tier.Checksum(data))
	}
	return info
}

// ReadRange reads [off, off+n) of key through Get.
func ReadRange(t *testing.T, s tier.ObjectStore, key string, off, n int64) ([]byte, error) {
	t.Helper()
	rc, err := s.Get(ctx(t), key, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func testPutHead(t *testing.T, s tier.ObjectStore) {
	data := Data(10_000)
	MustPut(t, s, "tiertest/puthead/a", data)
	info, err := s.Head(ctx(t), "tiertest/puthead/a")
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	if info.Size != int64(len(data)) || !info.HasCRC32C || info.CRC32C != tier.Checksum(data) || info.LastModified.IsZero() {
		t.Fatalf("Head = %+v, want %d bytes, CRC-32C %08x and a time", info, len(data), tier.Checksum(data))
	}
	if err := tier.Verify(ctx(t), s, "tiertest/puthead/a", int64(len(data)), tier.Checksum(data)); err != nil {
		t.Fatalf("Verify of an intact object: %v", err)
	}
	// A replaced object reads back as the new bytes.
	MustPut(t, s, "tiertest/puthead/a", data[:77])
	got, err := ReadRange(t, s, "tiertest/puthead/a", 0, -1)
	if err != nil || !bytes.Equal(got, data[:77]) {
		t.Fatalf("after a second Put: %d bytes, %v; want the 77 new bytes", len(got), err)
	}
}

func testGetRanges(t *testing.T, s tier.ObjectStore) {
	const size = 4096
	data := Data(size)
	MustPut(t, s, "tiertest/ranges/obj", data)
	for _, tc := range []struct {
		off, n int64
		want   []byte
		err    error
	}{
		{0, -1, data, nil},
		{0, size, data, nil},
		{0, 1, data[:1], nil},
		{100, 200, data[100:300], nil},
		{100, -1, data[100:], nil},
		{size - 1, 1, data[size-1:], nil},
		{size - 10, 100, data[size-10:], nil}, // cut at the end
		{5, 0, []byte{}, nil},
		{size, 1, nil, tier.ErrInvalidRange},
		{size + 100, -1, nil, tier.ErrInvalidRange},
		{-1, 10, nil, tier.ErrInvalidRange},
	} {
		got, err := ReadRange(t, s, "tiertest/ranges/obj", tc.off, tc.n)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("Get(%d, %d): error %v, want %v", tc.off, tc.n, err, tc.err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Errorf("Get(%d, %d): %d bytes, %v; want %d bytes from %d", tc.off, tc.n, len(got), err, len(tc.want), tc.off)
		}
	}
}

func testEmpty(t *testing.T, s tier.ObjectStore) {
	MustPut(t, s, "tiertest/empty", nil)
	for _, n := range []int64{-1, 0, 10} {
		got, err := ReadRange(t, s, "tiertest/empty", 0, n)
		if err != nil || len(got) != 0 {
			t.Errorf("Get(0, %d) of an empty object: %d bytes, %v", n, len(got), err)
		}
	}
	if err := tier.Verify(ctx(t), s, "tiertest/empty", 0, tier.Checksum(nil)); err != nil {
		t.Errorf("Verify of an empty object: %v", err)
	}
}

func testMissing(t *testing.T, s tier.ObjectStore) {
	if _, err := ReadRange(t, s, "tiertest/missing", 0, -1); !errors.Is(err, tier.ErrNotFound) {
		t.Errorf("Get of a missing key: %v, want ErrNotFound", err)
	}
	if _, err := ReadRange(t, s, "tiertest/missing", 10, 5); !errors.Is(err, tier.ErrNotFound) {
		t.Errorf("ranged Get of a missing key: %v, want ErrNotFound", err)
	}
	if _, err := s.Head(ctx(t), "tiertest/missing"); !errors.Is(err, tier.ErrNotFound) {
		t.Errorf("Head of a missing key: %v, want ErrNotFound", err)
	}
	if err := tier.Verify(ctx(t), s, "tiertest/missing", 1, 0); !errors.Is(err, tier.ErrNotFound) {
		t.Errorf("Verify of a missing key: %v, want ErrNotFound", err)
	}
}

func testListDelete(t *testing.T, s tier.ObjectStore) {
	keys := []string{"tiertest/list/a/2", "tiertest/list/a/10", "tiertest/list/a/1", "tiertest/list/b/1", "tiertest/list/a"}
	for i, k := range keys {
		MustPut(t, s, k, Data(i+1))
	}
	list := func(prefix string) []string {
		infos, err := s.List(ctx(t), prefix)
		if err != nil {
			t.Fatalf("List %s: %v", prefix, err)
		}
		var out []string
		for _, o := range infos {
			out = append(out, fmt.Sprintf("%s:%d", o.Key, o.Size))
		}
		return out
	}
	want := "[tiertest/list/a/1:3 tiertest/list/a/10:2 tiertest/list/a/2:1]"
	if got := fmt.Sprint(list("tiertest/list/a/")); got != want {
		t.Fatalf("List = %s, want %s", got, want)
	}
	if got := list("tiertest/list/none/"); len(got) != 0 {
		t.Fatalf("List of an empty prefix = %v", got)
	}
	if err := s.Delete(ctx(t), "tiertest/list/a/10"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := s.Delete(ctx(t), "tiertest/list/a/10"); err != nil {
		t.Fatalf("Delete of a deleted key: %v, want nil", err)
	}
	if _, err := s.Head(ctx(t), "tiertest/list/a/10"); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("Head after Delete: %v, want ErrNotFound", err)
	}
	want = "[tiertest/list/a/1:3 tiertest/list/a/2:1]"
	if got := fmt.Sprint(list("tiertest/list/a/")); got != want {
		t.Fatalf("List after Delete = %s, want %s", got, want)
	}
}

func testIfAbsent(t *testing.T, s tier.ObjectStore) {
	first := Data(100)
	if _, err := s.Put(ctx(t), "tiertest/ifabsent", bytes.NewReader(first), 100, tier.PutOptions{IfAbsent: true}); err != nil {
		t.Fatalf("first Put IfAbsent: %v", err)
	}
	second := bytes.Repeat([]byte{7}, 50)
	_, err := s.Put(ctx(t), "tiertest/ifabsent", bytes.NewReader(second), 50, tier.PutOptions{IfAbsent: true})
	if !errors.Is(err, tier.ErrExists) {
		t.Fatalf("second Put IfAbsent: %v, want ErrExists", err)
	}
	got, err := ReadRange(t, s, "tiertest/ifabsent", 0, -1)
	if err != nil || !bytes.Equal(got, first) {
		t.Fatalf("after a refused Put: %d bytes, %v; want the first 100", len(got), err)
	}
}
