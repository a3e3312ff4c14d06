package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

func build(t testing.TB, n int, size int) []byte {
	t.Helper()
	var b Builder
	for i := 0; i < n; i++ {
		b.Add([]byte(fmt.Sprintf("k%d", i)), bytes.Repeat([]byte{byte(i)}, size), nil, 1000+int64(i))
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	var b Builder
	b.Add(nil, []byte("no key"), nil, 5000)
	b.Add([]byte{}, []byte{}, nil, 4000) // empty key and value are values
	b.Add([]byte("k"), []byte("v"), []RecordHeader{{Key: "h", Value: []byte("x")}, {Key: "e"}}, 6000)
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	SetBaseOffset(out, 42)
	SetLeaderEpoch(out, 7)
	h, err := Validate(out, Limits{MaxRecordBytes: 100, MaxBatchBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if h.BaseOffset != 42 || h.LeaderEpoch != 7 || h.RecordCount != 3 || h.FirstTimestamp != 4000 || h.MaxTimestamp != 6000 {
		t.Fatalf("header %+v", h)
	}
	it, err := NewIter(out)
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		off   uint64
		ts    int64
		key   []byte
		value string
		hdrs  int
	}
	want := []rec{{42, 5000, nil, "no key", 0}, {43, 4000, []byte{}, "", 0}, {44, 6000, []byte("k"), "v", 2}}
	i := 0
	for it.Next() {
		r := it.Record()
		w := want[i]
		if r.Offset != w.off || r.Timestamp != w.ts || string(r.Value) != w.value || len(r.Headers) != w.hdrs ||
			(r.Key == nil) != (w.key == nil) || !bytes.Equal(r.Key, w.key) || r.Value == nil {
			t.Fatalf("record %d = %+v, want %+v", i, r, w)
		}
		i++
	}
	if err := it.Err(); err != nil || i != 3 {
		t.Fatalf("iterated %d, err %v", i, err)
	}
}

func TestValidateRejects(t *testing.T) {
	good := build(t, 4, 50)
	cases := []struct {
		name   string
		mutate func([]byte) []byte
		lim    Limits
		want   error
	}{
		{"bit flip in records", func(b []byte) []byte { b[len(b)-3] ^= 0x10; return b }, Limits{}, ErrCorrupt},
		{"bit flip in timestamps", func(b []byte) []byte { b[offFirstTimestamp] ^= 1; return b }, Limits{}, ErrCorrupt},
		{"bad magic", func(b []byte) []byte { b[offMagic] = 0; return b }, Limits{}, ErrCorrupt},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, Limits{}, ErrCorrupt},
		{"short header", func(b []byte) []byte { return b[:30] }, Limits{}, ErrShort},
		{"record over limit", func(b []byte) []byte { return b }, Limits{MaxRecordBytes: 40}, ErrTooLarge},
		{"batch over limit", func(b []byte) []byte { return b }, Limits{MaxBatchBytes: 100}, ErrTooLarge},
		{"compression set", func(b []byte) []byte {
			b[offAttributes] |= 1
			putCRC(b)
			return b
		}, Limits{}, ErrCorrupt},
		{"negative first timestamp", func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[offFirstTimestamp:], uint64(1<<64-5)) // -5
			putCRC(b)
			return b
		}, Limits{}, ErrCorrupt},
		{"negative max timestamp", func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[offMaxTimestamp:], uint64(1<<64-1)) // -1
			putCRC(b)
			return b
		}, Limits{}, ErrCorrupt},
		{"negative record timestamp", func([]byte) []byte { return negativeDeltaBatch(t) }, Limits{}, ErrCorrupt},
		{"count mismatch", func(b []byte) []byte {
			b[offRecordCount] = 5
			b[offLastOffsetDelta] = 4
			putCRC(b)
			return b
		}, Limits{}, ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mutate(bytes.Clone(good))
			if _, err := Validate(b, tc.lim); !errors.Is(err, tc.want) {
				t.Fatalf("Validate = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := Validate(good, Limits{MaxRecordBytes: 1 << 20}); err != nil {
		t.Fatalf("good batch: %v", err)
	}
}

// negativeDeltaBatch returns a batch with firstTimestamp 1000 whose second
// record's timestampDelta is rewritten from +delta to -delta (so its
// timestamp is negative), CRC fixed: a batch the Builder never makes.
func negativeDeltaBatch(t *testing.T) []byte {
	const delta = 0x1122334455
	var bb Builder
	bb.Add(nil, []byte("a"), nil, 1000)
	bb.Add(nil, []byte("b"), nil, 1000+delta)
	b, err := bb.Build()
	if err != nil {
		t.Fatal(err)
	}
	var pos, neg [8]byte
	binary.LittleEndian.PutUint64(pos[:], delta)
	d := int64(delta)
	binary.LittleEndian.PutUint64(neg[:], uint64(-d))
	i := bytes.Index(b[offFirstTimestamp+16:], pos[:])
	if i < 0 || bytes.Count(b, pos[:]) != 1 {
		t.Fatal("timestampDelta not found once in the batch")
	}
	copy(b[offFirstTimestamp+16+i:], neg[:])
	putCRC(b)
	if _, err := CheckHeader(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func putCRC(b []byte) {
	c := Checksum(b)
	b[offCRC], b[offCRC+1], b[offCRC+2], b[offCRC+3] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
}

func TestSplit(t *testing.T) {
	a, b := build(t, 2, 10), build(t, 3, 10)
	buf := append(bytes.Clone(a), b...)
	first, rest, h, err := Split(buf, 0)
	if err != nil || !bytes.Equal(first, a) || h.RecordCount != 2 {
		t.Fatalf("split 1: %v", err)
	}
	second, rest, _, err := Split(rest, 0)
	if err != nil || !bytes.Equal(second, b) || len(rest) != 0 {
		t.Fatalf("split 2: %v", err)
	}
	if _, _, _, err := Split(buf[:len(a)-1], 0); !errors.Is(err, ErrShort) {
		t.Fatalf("short split: %v", err)
	}
	garbage := bytes.Clone(a)
	garbage[offBatchLength], garbage[offBatchLength+1], garbage[offBatchLength+2], garbage[offBatchLength+3] = 0xff, 0xff, 0xff, 0xff
	if _, _, _, err := Split(garbage, 16<<20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("garbage length: %v", err)
	}
}

func TestBuildHeadersAndBound(t *testing.T) {
	var b Builder
	for i := 0; i < 50; i++ {
		hs := make([]RecordHeader, i%4)
		for j := range hs {
			hs[j] = RecordHeader{Key: fmt.Sprintf("header-%d", j), Value: bytes.Repeat([]byte("v"), i+j)}
		}
		b.Add([]byte(fmt.Sprint(i)), bytes.Repeat([]byte("x"), i*3), hs, 1)
	}
	est := b.EstimatedSize()
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if len(out) > est {
		t.Fatalf("built %d bytes, EstimatedSize said at most %d", len(out), est)
	}
	if _, err := Validate(out, Limits{}); err != nil {
		t.Fatal(err)
	}
	it, _ := NewIter(out)
	n := 0
	for it.Next() {
		if len(it.Record().Headers) != n%4 {
			t.Fatalf("record %d has %d headers", n, len(it.Record().Headers))
		}
		n++
	}
	if n != 50 {
		t.Fatalf("%d records", n)
	}
}
