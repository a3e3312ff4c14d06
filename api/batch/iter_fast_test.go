package batch

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"
)

// iterAll decodes every record of b, copying them, with the direct path
// on or off; it returns the records and the iterator's error.
func iterAll(t *testing.T, b []byte, direct bool) ([]Record, error) {
	t.Helper()
	var it Iter
	if err := it.Reset(b); err != nil {
		return nil, err
	}
	if !direct {
		it.fast = false
	}
	var out []Record
	for it.Next() {
		r := it.Record()
		c := Record{Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
		c.Headers = append([]RecordHeader(nil), r.Headers...)
		out = append(out, c)
	}
	return out, it.Err()
}

// TestIterDirectMatchesAccessors checks that the direct decoding of the
// record list gives the same records as the generated accessors, for keys
// that are absent, empty or set, empty values and records with headers.
func TestIterDirectMatchesAccessors(t *testing.T) {
	tests := []struct {
		name string
		add  func(b *Builder)
	}{
		{"no keys", func(b *Builder) {
			for i := range 50 {
				b.Add(nil, bytes.Repeat([]byte{byte(i)}, i), nil, int64(1000+i))
			}
		}},
		{"keys empty and set", func(b *Builder) {
			b.Add([]byte{}, []byte("v"), nil, 5)
			b.Add([]byte("key"), nil, nil, 7)
			b.Add([]byte("k2"), []byte{}, nil, 3)
		}},
		{"headers mixed", func(b *Builder) {
			b.Add([]byte("a"), []byte("1"), nil, 10)
			b.Add(nil, []byte("2"), []RecordHeader{{Key: "h", Value: []byte("x")}, {Key: "e", Value: nil}}, 11)
			b.Add([]byte("c"), []byte("3"), nil, 12)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var bld Builder
			tc.add(&bld)
			b, err := bld.Build()
			if err != nil {
				t.Fatal(err)
			}
			var it Iter
			if err := it.Reset(b); err != nil {
				t.Fatal(err)
			}
			if !it.fast {
				t.Fatal("a batch of the Builder is not decoded directly")
			}
			fast, ferr := iterAll(t, b, true)
			slow, serr := iterAll(t, b, false)
			if ferr != nil || serr != nil {
				t.Fatalf("errors: direct %v, accessors %v", ferr, serr)
			}
			if len(fast) != bld.Len() || !reflect.DeepEqual(fast, slow) {
				t.Fatalf("direct %+v\naccessors %+v", fast, slow)
			}
			for i, r := range fast {
				direct := len(r.Headers) == 0 // records with headers use the accessors
				if direct && (cap(r.Key) != len(r.Key) || cap(r.Value) != len(r.Value)) {
					t.Fatalf("record %d: capacity not clipped", i)
				}
			}
		})
	}
}

// TestIterDirectCorruptNoPanic flips random bytes of the record list: the
// direct path must not panic, and where the accessors decode the batch
// without error it must give the same records.
func TestIterDirectCorruptNoPanic(t *testing.T) {
	var bld Builder
	for i := range 20 {
		var key []byte
		if i%3 == 0 {
			key = []byte{byte(i)}
		}
		bld.Add(key, bytes.Repeat([]byte("v"), i), nil, int64(i+1))
	}
	good, err := bld.Build()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		b := append([]byte(nil), good...)
		for range 1 + rng.IntN(3) {
			b[HeaderSize+8+rng.IntN(len(b)-HeaderSize-8)] ^= byte(1 + rng.IntN(255))
		}
		fast, ferr := iterAll(t, b, true)
		slow, serr := iterAll(t, b, false)
		if serr == nil && ferr == nil && !reflect.DeepEqual(fast, slow) {
			t.Fatalf("corrupt batch decoded differently:\ndirect %+v\naccessors %+v", fast, slow)
		}
	}
}
