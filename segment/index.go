package segment

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"

	"github.com/seedqueue/sq/ring"
)

// indexEntrySize is the size of one sparse index entry on disk: u32
// relative offset, u32 file position, little-endian.
const indexEntrySize = 8

// indexEntry maps the first offset of a batch, relative to the segment's
// base offset, to the batch's byte position in the .log file.
type indexEntry struct {
	rel uint32
	pos uint32
}

// encodeIndex returns the on-disk form of entries.
func encodeIndex(entries []indexEntry) []byte {
	b := make([]byte, len(entries)*indexEntrySize)
	for i, e := range entries {
		binary.LittleEndian.PutUint32(b[i*indexEntrySize:], e.rel)
		binary.LittleEndian.PutUint32(b[i*indexEntrySize+4:], e.pos)
	}
	return b
}

// readIndex reads the index file at path. ok is false when the file is
// missing, its size is not a multiple of the entry size, or its entries are
// not strictly increasing from (0, 0) and below logSize: such an index
// disagrees with its log and must be rebuilt.
func readIndex(fs ring.FS, path string, logSize int64) (entries []indexEntry, ok bool, why string) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, false, err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err.Error()
	}
	size := fi.Size()
	if size%indexEntrySize != 0 {
		return nil, false, fmt.Sprintf("size %d is not a multiple of %d", size, indexEntrySize)
	}
	if size/indexEntrySize > logSize {
		return nil, false, fmt.Sprintf("%d entries for a log of %d bytes", size/indexEntrySize, logSize)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, false, err.Error()
	}
	entries = make([]indexEntry, size/indexEntrySize)
	for i := range entries {
		e := indexEntry{
			rel: binary.LittleEndian.Uint32(b[i*indexEntrySize:]),
			pos: binary.LittleEndian.Uint32(b[i*indexEntrySize+4:]),
		}
		switch {
		case i == 0 && e != (indexEntry{}):
			return nil, false, fmt.Sprintf("first entry %+v is not (0, 0)", e)
		case i > 0 && (e.rel <= entries[i-1].rel || e.pos <= entries[i-1].pos):
			return nil, false, fmt.Sprintf("entry %d %+v does not follow %+v", i, e, entries[i-1])
		case int64(e.pos) >= logSize:
			return nil, false, fmt.Sprintf("entry %d points at byte %d past the log's %d bytes", i, e.pos, logSize)
		}
		entries[i] = e
	}
	return entries, true, ""
}

// lookup returns the last entry whose relative offset is <= rel, or the zero
// entry (start of the segment) if there is none.
func lookup(entries []indexEntry, rel uint32) indexEntry {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].rel > rel })
	if i == 0 {
		return indexEntry{}
	}
	return entries[i-1]
}

// lookupEncoded is lookup over index entries in their on-disk form.
func lookupEncoded(b []byte, rel uint32) indexEntry {
	n := len(b) / indexEntrySize
	i := sort.Search(n, func(i int) bool { return binary.LittleEndian.Uint32(b[i*indexEntrySize:]) > rel })
	if i == 0 {
		return indexEntry{}
	}
	b = b[(i-1)*indexEntrySize:]
	return indexEntry{rel: binary.LittleEndian.Uint32(b), pos: binary.LittleEndian.Uint32(b[4:])}
}

// lookupPos returns the last entry whose position is <= pos.
func lookupPos(entries []indexEntry, pos int64) indexEntry {
	i := sort.Search(len(entries), func(i int) bool { return int64(entries[i].pos) > pos })
	if i == 0 {
		return indexEntry{}
	}
	return entries[i-1]
}

// indexer decides where index entries go: the first batch of a segment, then
// the first batch at least interval bytes after the previous entry.
type indexer struct {
	interval int64
}

// wants reports whether a batch at pos needs an entry after entries.
func (x indexer) wants(entries []indexEntry, pos int64) bool {
	return len(entries) == 0 || pos-int64(entries[len(entries)-1].pos) >= x.interval
}
