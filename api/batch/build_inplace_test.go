package batch

import (
	"bytes"
	"testing"
)

// TestBuildEncodesInPlace checks that Build encodes into one buffer of at
// least EstimatedSize (no growth, no copy) for records with and without
// keys and headers, that its record list is byte for byte the one of the
// generated Cap'n Proto code, and that the result validates and reads
// back.
func TestBuildEncodesInPlace(t *testing.T) {
	tests := []struct {
		name    string
		records int
		key     []byte
		value   []byte
		headers []RecordHeader
	}{
		{"one empty record", 1, nil, nil, nil},
		{"keys and odd sizes", 37, []byte("k-123"), bytes.Repeat([]byte("v"), 101), nil},
		{"headers", 20, []byte("key"), []byte("value"), []RecordHeader{{Key: "h", Value: []byte("1")}, {Key: "trace-id", Value: nil}}},
		{"empty header key and value", 3, []byte{}, []byte{}, []RecordHeader{{Key: "", Value: []byte{}}, {Key: "1234567", Value: []byte("12345678")}}},
		{"word-sized fields", 9, []byte("12345678"), bytes.Repeat([]byte("w"), 64), []RecordHeader{{Key: "1234567", Value: []byte("x")}}},
		{"many small", 5000, nil, []byte("x"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b Builder
			for i := range tc.records {
				b.Add(tc.key, tc.value, tc.headers, int64(1000+i))
			}
			est := b.EstimatedSize()
			out, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			if cap(out) < est || len(out) > est {
				t.Errorf("cap(out) = %d, len %d, want at least EstimatedSize %d (built in place)", cap(out), len(out), est)
			}
			ref, err := buildReference(&b)
			if err != nil {
				t.Fatal(err)
			}
			if got := out[HeaderSize+8:]; !bytes.Equal(got, ref) {
				t.Fatalf("record list differs from the generated code's:\n got %x\nwant %x", got, ref)
			}
			if _, err := Validate(out, Limits{}); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			it, err := NewIter(out)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for it.Next() {
				r := it.Record()
				if !bytes.Equal(r.Key, tc.key) || !bytes.Equal(r.Value, tc.value) || len(r.Headers) != len(tc.headers) {
					t.Fatalf("record %d = %+v", n, r)
				}
				n++
			}
			if err := it.Err(); err != nil || n != tc.records {
				t.Fatalf("read %d records, err %v", n, err)
			}
		})
	}
}

// TestBuildReusesBuffers checks that a released buffer is reused by the
// next Build and that every byte of the new batch is written: a batch
// built into a buffer full of another batch's bytes is still the one of
// the generated code.
func TestBuildReusesBuffers(t *testing.T) {
	var b Builder
	for range 2000 {
		b.Add([]byte("0123456789abc"), bytes.Repeat([]byte{0xff}, 117), []RecordHeader{{Key: "k", Value: []byte{0xee, 0xee, 0xee}}}, 5)
	}
	first, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	ReleaseBuffer(first)
	b.Reset()
	for i := range 3000 {
		var key []byte
		if i%2 == 0 {
			key = []byte{1}
		}
		b.Add(key, []byte{byte(i)}, nil, int64(7+i%3))
	}
	// sync.Pool may drop the buffer (a GC in between); reuse is likely,
	// not certain, so only the contents are checked.
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := buildReference(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out[HeaderSize+8:], ref) {
		t.Fatal("a batch built in a reused buffer differs from the generated code's")
	}
	if _, err := Validate(out, Limits{}); err != nil {
		t.Fatal(err)
	}
	ReleaseBuffer(out)
	ReleaseBuffer(make([]byte, 10, 100<<10)) // not a power of two: ignored
}

// FuzzBuildMatchesReference builds batches of records drawn from the
// input (keys absent, empty or set, values, headers with empty keys and
// values) and checks that Build writes the same record list as the
// generated Cap'n Proto code, and that the batch validates and reads back.
func FuzzBuildMatchesReference(f *testing.F) {
	f.Add([]byte("\x03abc\x05hello\x00\x01\x02hk\x01v"))
	f.Add([]byte{0, 0, 0, 0xff, 0xfe})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func(max int) []byte {
			if len(data) == 0 {
				return nil
			}
			n := int(data[0]) % (max + 1)
			data = data[1:]
			n = min(n, len(data))
			v := data[:n]
			data = data[n:]
			return v
		}
		var b Builder
		for i := 0; len(data) > 0 && i < 200; i++ {
			flags := data[0]
			data = data[1:]
			var key []byte
			if flags&1 != 0 {
				key = append([]byte{}, next(40)...)
			}
			value := next(200)
			var hs []RecordHeader
			for range int(flags>>1) % 4 {
				hs = append(hs, RecordHeader{Key: string(next(20)), Value: next(20)})
			}
			b.Add(key, value, hs, int64(1+flags>>4))
		}
		if b.Len() == 0 {
			return
		}
		out, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		ref, err := buildReference(&b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out[HeaderSize+8:], ref) {
			t.Fatalf("record list differs from the generated code's:\n got %x\nwant %x", out[HeaderSize+8:], ref)
		}
		if _, err := Validate(out, Limits{}); err != nil {
			t.Fatal(err)
		}
		if _, err := iterAll(t, out, true); err != nil {
			t.Fatal(err)
		}
		ReleaseBuffer(out)
	})
}

// TestBufferClass checks the pool's classes: each holds what it is asked
// for, at most 1/8 more, and a class's own size maps back to it.
func TestBufferClass(t *testing.T) {
	last := -1
	for _, n := range []int{minPooledBuffer, minPooledBuffer + 1, 70000, 1 << 20, 1<<20 + 1, 1497952, 3 << 20, maxPooledBuffer - 1, maxPooledBuffer} {
		idx, size, ok := bufferClass(n)
		if !ok || size < n || size > n+n/8 || idx < last || idx >= len(bufferPools) {
			t.Fatalf("bufferClass(%d) = %d, %d, %v", n, idx, size, ok)
		}
		last = idx
		if idx2, size2, _ := bufferClass(size); idx2 != idx || size2 != size {
			t.Fatalf("class size %d maps to %d, %d, not %d, %d", size, idx2, size2, idx, size)
		}
	}
	for _, n := range []int{0, minPooledBuffer - 1, maxPooledBuffer + 1} {
		if _, _, ok := bufferClass(n); ok {
			t.Fatalf("bufferClass(%d) is pooled", n)
		}
	}
}

// TestBuildKeepsNilAndEmptyKeys checks that a nil key is encoded as no
// key and an empty one, however it was sliced, as an empty key.
func TestBuildKeepsNilAndEmptyKeys(t *testing.T) {
	buf := make([]byte, 5)
	keys := [][]byte{nil, {}, buf[5:], buf[2:2], make([]byte, 0, 8), []byte("k")}
	var b Builder
	for _, k := range keys {
		b.Add(k, nil, nil, 1)
	}
	out := mustBuild(t, &b)
	for _, direct := range []bool{true, false} {
		recs, err := iterAll(t, out, direct)
		if err != nil || len(recs) != len(keys) {
			t.Fatalf("read %d records, err %v", len(recs), err)
		}
		for i, r := range recs {
			if (r.Key == nil) != (keys[i] == nil) || !bytes.Equal(r.Key, keys[i]) || r.Value == nil || len(r.Value) != 0 {
				t.Fatalf("record %d (direct %v): key %q (nil %v), value %q; added key %q (nil %v)", i, direct, r.Key, r.Key == nil, r.Value, keys[i], keys[i] == nil)
			}
		}
	}
}

// TestBuildHeadersChangedAfterAdd checks that Build still encodes, in a
// buffer large enough, a record whose header strings were replaced by
// longer ones after Add (only the contents of the slices given to Add may
// not change; a []RecordHeader's strings can).
func TestBuildHeadersChangedAfterAdd(t *testing.T) {
	hs := []RecordHeader{{Key: "", Value: nil}}
	var b Builder
	b.Add(nil, []byte("v"), hs, 1)
	hs[0] = RecordHeader{Key: string(bytes.Repeat([]byte("k"), 300)), Value: bytes.Repeat([]byte("x"), 300)}
	out := mustBuild(t, &b)
	recs, err := iterAll(t, out, true)
	if err != nil || len(recs) != 1 || len(recs[0].Headers) != 1 || len(recs[0].Headers[0].Key) != 300 {
		t.Fatalf("records %+v, err %v", recs, err)
	}
}
