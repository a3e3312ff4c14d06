package tier_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/seedqueue/sq/tier"
)

// testManifest returns version of a manifest of p listing n segments of
// 100 offsets each from offset 0, whose objects are in s when s is not nil.
func testManifest(t *testing.T, s tier.ObjectStore, p tier.Partition, version uint64, n int) *tier.Manifest {
	t.Helper()
	m := &tier.Manifest{Topic: p.Topic, TopicID: p.TopicID, Partition: p.Partition, Version: version, LeaderEpoch: 2}
	for i := range n {
		base := uint64(i * 100)
		keys := p.SegmentKeys(base, 2)
		e := tier.SegmentEntry{
			BaseOffset: base, LastOffset: base + 99, MaxTimestampMs: 1_700_000_000_000 + int64(i), LeaderEpoch: 2,
			Epochs: []tier.EpochStart{{Epoch: 1, StartOffset: base}, {Epoch: 2, StartOffset: base + 50}},
		}
		for _, o := range []struct {
			ref  *tier.ObjectRef
			key  string
			size int
		}{{&e.Log, keys.Log, 1000 + i}, {&e.Index, keys.Index, 16}, {&e.TimeIndex, keys.TimeIndex, 24}} {
			data := bytes.Repeat([]byte{byte(i)}, o.size)
			*o.ref = tier.ObjectRef{Key: o.key, Size: int64(o.size), CRC32C: tier.Checksum(data)}
			if s != nil {
				if _, err := s.Put(t.Context(), o.key, bytes.NewReader(data), int64(len(data)), tier.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		m.Segments = append(m.Segments, e)
	}
	return m
}

func TestManifestRoundTrip(t *testing.T) {
	p := testPartition(t)
	for _, n := range []int{0, 1, 3} {
		m := testManifest(t, nil, p, 5, n)
		b, err := tier.EncodeManifest(m)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if !bytes.HasPrefix(b, []byte(`{"format":1,"crc32c":`)) || !bytes.HasSuffix(b, []byte("}\n")) || bytes.Count(b, []byte("\n")) != 1 {
			t.Fatalf("Encode: not one line of the documented form: %s", b)
		}
		got, err := tier.DecodeManifest(p, 5, b)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if n == 0 {
			m.Segments = []tier.SegmentEntry{}
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip of %d segments:\n got %+v\nwant %+v", n, got, m)
		}
	}
}

func TestManifestDecodeCorrupt(t *testing.T) {
	p := testPartition(t)
	good, err := tier.EncodeManifest(testManifest(t, nil, p, 5, 2))
	if err != nil {
		t.Fatal(err)
	}
	reencode := func(edit func(*tier.Manifest)) []byte {
		m := testManifest(t, nil, p, 5, 2)
		edit(m)
		body, err := json.Marshal(m) // by hand: EncodeManifest refuses what Check refuses
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Appendf(nil, `{"format":1,"crc32c":%d,"manifest":%s}`, tier.Checksum(body), body)
	}
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		return b
	}
	other := p
	other.Partition = 4
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)/2]},
		{"bit flip in a key", flip(bytes.Index(good, []byte(".log")) + 1)},
		{"bit flip in a size", flip(bytes.Index(good, []byte(`"size":1000`)) + 8)},
		{"another format", bytes.Replace(good, []byte(`"format":1`), []byte(`"format":2`), 1)},
		{"no checksum", bytes.Replace(good, []byte(`"crc32c":`), []byte(`"crc32x":`), 1)},
		{"wrong checksum", bytes.Replace(good, []byte(`"crc32c":`), []byte(`"crc32c":1`), 1)},
		{"another partition", reencode(func(m *tier.Manifest) { m.Partition = other.Partition })},
		{"another version", reencode(func(m *tier.Manifest) { m.Version = 6 })},
		{"overlapping segments", reencode(func(m *tier.Manifest) { m.Segments[1].BaseOffset = 99 })},
		{"last below base", reencode(func(m *tier.Manifest) { m.Segments[0].LastOffset = 0; m.Segments[0].BaseOffset = 5 })},
		{"key outside the partition", reencode(func(m *tier.Manifest) { m.Segments[0].Index.Key = "elsewhere/x.index" })},
		{"empty log", reencode(func(m *tier.Manifest) { m.Segments[0].Log.Size = 0 })},
		{"epochs out of order", reencode(func(m *tier.Manifest) { m.Segments[0].Epochs[1].Epoch = 0 })},
	} {
		_, err := tier.DecodeManifest(p, 5, tc.b)
		if !errors.Is(err, tier.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", tc.name, err)
		} else if !strings.Contains(err.Error(), p.ManifestKey(5)) {
			t.Errorf("%s: error %q does not name the key", tc.name, err)
		}
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	p := testPartition(t)
	m := testManifest(t, nil, p, 0, 1)
	if _, err := tier.EncodeManifest(m); !errors.Is(err, tier.ErrCorrupt) {
		t.Fatalf("Encode of version 0: %v, want ErrCorrupt", err)
	}
}

func TestLatestManifest(t *testing.T) {
	p := testPartition(t)
	s := &tier.MemStore{}
	scan, err := tier.LatestManifest(t.Context(), s, p)
	if err != nil || scan.Manifest != nil || scan.NextVersion != 1 || len(scan.Skipped) != 0 {
		t.Fatalf("no manifests: %+v, %v; want nothing and next version 1", scan, err)
	}
	for v := uint64(1); v <= 3; v++ {
		if _, err := tier.PutManifest(t.Context(), s, testManifest(t, s, p, v, int(v))); err != nil {
			t.Fatalf("PutManifest %d: %v", v, err)
		}
	}
	// A stray object under the manifest prefix is ignored.
	_, _ = s.Put(t.Context(), p.ManifestListPrefix()+"notes.txt", bytes.NewReader([]byte("x")), 1, tier.PutOptions{})
	scan, err = tier.LatestManifest(t.Context(), s, p)
	if err != nil || scan.Manifest == nil || scan.Manifest.Version != 3 || len(scan.Manifest.Segments) != 3 || scan.NextVersion != 4 {
		t.Fatalf("three manifests: %+v, %v; want version 3, next 4", scan, err)
	}
	for _, seg := range scan.Manifest.Segments {
		for _, ref := range []tier.ObjectRef{seg.Log, seg.Index, seg.TimeIndex} {
			if err := tier.Verify(t.Context(), s, ref.Key, ref.Size, ref.CRC32C); err != nil {
				t.Fatalf("Verify of a listed object: %v", err)
			}
		}
	}
	// A version is never overwritten.
	if _, err := tier.PutManifest(t.Context(), s, testManifest(t, nil, p, 3, 1)); !errors.Is(err, tier.ErrExists) {
		t.Fatalf("PutManifest of a taken version: %v, want ErrExists", err)
	}

	// Versions 4 (bit flip) and 5 (truncated) are corrupt: reported, and 3 is used.
	for v, damage := range map[uint64]func([]byte) []byte{
		4: func(b []byte) []byte { b[len(b)/2] ^= 0x20; return b },
		5: func(b []byte) []byte { return b[:len(b)-10] },
	} {
		if _, err := tier.PutManifest(t.Context(), s, testManifest(t, nil, p, v, 1)); err != nil {
			t.Fatal(err)
		}
		rc, _ := s.Get(t.Context(), p.ManifestKey(v), 0, -1)
		b, _ := io.ReadAll(rc)
		s.Damage(p.ManifestKey(v), damage(b))
	}
	scan, err = tier.LatestManifest(t.Context(), s, p)
	if err != nil || scan.Manifest == nil || scan.Manifest.Version != 3 || scan.NextVersion != 6 {
		t.Fatalf("with 4 and 5 corrupt: %+v, %v; want version 3, next 6", scan, err)
	}
	if len(scan.Skipped) != 2 || !errors.Is(scan.Skipped[0], tier.ErrCorrupt) || !strings.Contains(scan.Skipped[0].Error(), p.ManifestKey(5)) ||
		!errors.Is(scan.Skipped[1], tier.ErrCorrupt) || !strings.Contains(scan.Skipped[1].Error(), p.ManifestKey(4)) {
		t.Fatalf("Skipped = %v, want versions 5 and 4 as corrupt", scan.Skipped)
	}

	// An outage while reading the newest is returned, never a fallback to an older version.
	down := &failingStore{ObjectStore: s, failGet: p.ManifestKey(5)}
	if scan, err := tier.LatestManifest(t.Context(), down, p); err == nil || !errors.Is(err, errOutage) || scan.Manifest != nil {
		t.Fatalf("with the store failing: %+v, %v; want the outage", scan, err)
	}
	down = &failingStore{ObjectStore: s, failList: true}
	if _, err := tier.LatestManifest(t.Context(), down, p); !errors.Is(err, errOutage) {
		t.Fatalf("with List failing: %v; want the outage", err)
	}
}

func TestLatestManifestAllCorrupt(t *testing.T) {
	p := testPartition(t)
	s := &tier.MemStore{}
	if _, err := tier.PutManifest(t.Context(), s, testManifest(t, nil, p, 1, 1)); err != nil {
		t.Fatal(err)
	}
	s.Damage(p.ManifestKey(1), []byte("{}"))
	scan, err := tier.LatestManifest(t.Context(), s, p)
	if !errors.Is(err, tier.ErrCorrupt) || scan.Manifest != nil || scan.NextVersion != 2 || len(scan.Skipped) != 1 {
		t.Fatalf("only manifest corrupt: %+v, %v; want ErrCorrupt, next version 2", scan, err)
	}
}

// errOutage is the failure of a failingStore.
var errOutage = errors.New("test: store unreachable")

// failingStore fails List, or Get of one key, with errOutage.
type failingStore struct {
	tier.ObjectStore
	failGet  string
	failList bool
}

func (f *failingStore) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if key == f.failGet {
		return nil, errOutage
	}
	return f.ObjectStore.Get(ctx, key, off, n)
}

func (f *failingStore) List(ctx context.Context, prefix string) ([]tier.ObjectInfo, error) {
	if f.failList {
		return nil, errOutage
	}
	return f.ObjectStore.List(ctx, prefix)
}

func TestPutManifestSameBytesTwice(t *testing.T) {
	p := testPartition(t)
	s := &tier.MemStore{}
	m := testManifest(t, s, p, 1, 2)
	if _, err := tier.PutManifest(t.Context(), s, m); err != nil {
		t.Fatal(err)
	}
	// The same manifest again (a retry whose first answer was lost) succeeds;
	// a different one for the same version does not.
	if info, err := tier.PutManifest(t.Context(), s, m); err != nil || info.Key != p.ManifestKey(1) {
		t.Fatalf("PutManifest of the same bytes again: %+v, %v; want success", info, err)
	}
	m.LeaderEpoch++
	if _, err := tier.PutManifest(t.Context(), s, m); !errors.Is(err, tier.ErrExists) {
		t.Fatalf("PutManifest of another manifest of version 1: %v, want ErrExists", err)
	}
}
