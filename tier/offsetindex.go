package tier

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// offsetIndexEntryBytes is the size of one entry of a segment's offset
// index (package segment, "Files"): u32 relative offset, u32 byte
// position, little-endian.
const offsetIndexEntryBytes = 8

// OffsetIndex is a parsed .index object: the sparse offset index of one
// segment in the on-disk format of package segment (go doc ./segment):
// 8-byte entries, each a little-endian u32 offset relative to the
// segment's base offset and a u32 byte position in the .log, strictly
// increasing in both from (0, 0). Its zero value is an empty index, whose
// lookups answer the start of the segment.
type OffsetIndex struct {
	rel []uint32 // relative offsets, ascending
	pos []uint32 // byte positions, ascending
}

// ParseOffsetIndex parses b, the bytes of a segment's .index file, for a
// .log of logSize bytes. It checks what package segment checks at Open:
// whole entries, the first (0, 0), both fields strictly increasing, and
// positions inside the log. An empty b is a valid empty index. Errors
// wrap ErrCorrupt and say which entry is wrong.
func ParseOffsetIndex(b []byte, logSize int64) (OffsetIndex, error) {
	if len(b)%offsetIndexEntryBytes != 0 {
		return OffsetIndex{}, fmt.Errorf("tier: offset index: %w: %d bytes, not a multiple of %d", ErrCorrupt, len(b), offsetIndexEntryBytes)
	}
	n := len(b) / offsetIndexEntryBytes
	x := OffsetIndex{rel: make([]uint32, n), pos: make([]uint32, n)}
	for i := range n {
		rel := binary.LittleEndian.Uint32(b[i*offsetIndexEntryBytes:])
		pos := binary.LittleEndian.Uint32(b[i*offsetIndexEntryBytes+4:])
		switch {
		case i == 0 && (rel != 0 || pos != 0):
			return OffsetIndex{}, fmt.Errorf("tier: offset index: %w: first entry (%d, %d) is not (0, 0)", ErrCorrupt, rel, pos)
		case i > 0 && (rel <= x.rel[i-1] || pos <= x.pos[i-1]):
			return OffsetIndex{}, fmt.Errorf("tier: offset index: %w: entry %d (%d, %d) does not follow (%d, %d)", ErrCorrupt, i, rel, pos, x.rel[i-1], x.pos[i-1])
		case int64(pos) >= logSize:
			return OffsetIndex{}, fmt.Errorf("tier: offset index: %w: entry %d points at byte %d of a %d-byte log", ErrCorrupt, i, pos, logSize)
		}
		x.rel[i], x.pos[i] = rel, pos
	}
	return x, nil
}

// Len returns the number of entries.
func (x OffsetIndex) Len() int { return len(x.rel) }

// Lookup returns the last entry whose relative offset is at or below rel:
// the relative offset of a batch's first record and the batch's byte
// position in the .log. With no such entry it returns (0, 0), the start
// of the segment. A read scans batch headers forward from there.
func (x OffsetIndex) Lookup(rel uint64) (entryRel uint32, pos int64) {
	i := sort.Search(len(x.rel), func(i int) bool { return uint64(x.rel[i]) > rel })
	if i == 0 {
		return 0, 0
	}
	return x.rel[i-1], int64(x.pos[i-1])
}

// sizeBytes is the memory the index holds, for the reader's index cache.
func (x OffsetIndex) sizeBytes() int64 { return int64(len(x.rel)) * offsetIndexEntryBytes }
