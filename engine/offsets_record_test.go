package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestOffsetsRecordLimit: no record longer than replay accepts is ever
// written to groups/offsets.log. A group whose offsets (with their
// metadata) outgrow one record is snapshot in several records at a
// compaction, and every offset comes back after a restart; a single commit
// over the limit is refused with INVALID_REQUEST and stores nothing. For
// groups of several sizes around the limit.
func TestOffsetsRecordLimit(t *testing.T) {
	const limit = 2048
	for _, parts := range []int{1, 2, 3, 7, 40} {
		t.Run(fmt.Sprint(parts, " partitions"), func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions(dir)
			opts.Defaults()
			s, err := openOffsetStoreSize(dir, opts.FS, opts.Logger, limit)
			if err != nil {
				t.Fatal(err)
			}
			meta := func(p int) string { return fmt.Sprintf("%d:%s", p, strings.Repeat("m", 900)) }
			for p := range parts {
				rec := offsetRecord{Group: "big", Generation: -1, Offsets: []offsetEntry{{Topic: "t", Partition: p, Offset: uint64(10 + p), Metadata: meta(p)}}}
				if err := s.commit(rec); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.commit(offsetRecord{Group: "small", Generation: -1, Offsets: []offsetEntry{{Topic: "t", Partition: 0, Offset: 5}}}); err != nil {
				t.Fatal(err)
			}
			over := offsetRecord{Group: "big", Generation: -1, Offsets: []offsetEntry{{Topic: "t", Partition: 0, Offset: 99, Metadata: strings.Repeat("x", limit)}}}
			if err := s.commit(over); codeOf(err) != api.CodeInvalidRequest {
				t.Fatalf("commit over the record limit: %v, want INVALID_REQUEST", err)
			}
			s.mu.Lock()
			err = s.compactLocked()
			s.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			s.close()
			s, err = openOffsetStoreSize(dir, opts.FS, opts.Logger, limit)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			big := s.groups["big"]
			if len(big) != parts {
				t.Fatalf("after compaction and restart: %d offsets of group big, want %d", len(big), parts)
			}
			for p := range parts {
				if c := big[tp{"t", p}]; c.Offset != uint64(10+p) || c.Metadata != meta(p) {
					t.Fatalf("partition %d after restart: offset %d, metadata of %d bytes; want %d and %d bytes", p, c.Offset, len(c.Metadata), 10+p, len(meta(p)))
				}
			}
			if c := s.groups["small"][tp{"t", 0}]; c.Offset != 5 {
				t.Fatalf("group small after restart: %+v", s.groups["small"])
			}
		})
	}
}
