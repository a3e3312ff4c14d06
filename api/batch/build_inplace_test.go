package batch

import (
	"bytes"
	"testing"
)

// TestBuildEncodesInPlace checks that Build encodes into one buffer of
// EstimatedSize (no growth, no copy out of an arena) for records with and
// without keys and headers, and that the result validates and reads back.
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
			if cap(out) != est {
				t.Errorf("cap(out) = %d, want EstimatedSize %d (built in place)", cap(out), est)
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
