package segment

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestReadMappingFault: bytes that vanish under a mapping (here the file is
// truncated behind the Log's back, as an I/O error would) make Read return
// a *CorruptError instead of crashing the process.
func TestReadMappingFault(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallOptions())
	defer l.Close()
	infos := appendBatches(t, l, 3, 1, 2, 50)
	truncate(t, logPath(dir, infos[0].Segment), 0)
	v, err := l.Read(0, 1<<20, l.NextOffset())
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || v != nil {
		t.Fatalf("Read = %v, %v; want a *CorruptError", v, err)
	}
	if ce.File != logPath(dir, infos[0].Segment) || !strings.Contains(err.Error(), "fault") {
		t.Fatalf("error %v does not name the file and the fault", err)
	}
}

// TestReadBadIndexEntry: an index entry in the middle of a sealed segment
// that points inside a batch (not caught at Open, which checks only the
// last entry) does not break reads.
func TestReadBadIndexEntry(t *testing.T) {
	f := build(t, 30, 0, true)
	path := indexPath(f.dir, f.infos[0].Segment)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 24 {
		t.Fatalf("index of %d bytes; want three entries", len(b))
	}
	pos := binary.LittleEndian.Uint32(b[12:])
	patch(t, path, 12, binary.LittleEndian.AppendUint32(nil, pos+3))
	l := openLog(t, f.dir, smallOptions())
	defer l.Close()
	for off := uint64(0); off < l.NextOffset(); off++ {
		v, err := l.Read(off, 1, l.NextOffset())
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if hs := checkBufs(t, v.Bufs); len(hs) != 1 || hs[0].BaseOffset > off || hs[0].NextOffset() <= off {
			t.Fatalf("Read(%d) = %+v", off, hs)
		}
		v.Release()
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr []string
	}{
		{"zero value after Defaults", Options{}, nil},
		{"small values", smallOptions(), nil},
		{"segment over 4 GiB", Options{SegmentBytes: 1 << 32}, []string{"SegmentBytes"}},
		{"everything wrong", Options{SegmentBytes: -1, IndexIntervalBytes: -1, PreallocBytes: -1, MaxBatchBytes: 10},
			[]string{"SegmentBytes", "IndexIntervalBytes", "PreallocBytes", "MaxBatchBytes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Defaults()
			err := tc.opts.Validate()
			if (err != nil) != (len(tc.wantErr) > 0) {
				t.Fatalf("Validate = %v", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v, want it to mention %s", err, w)
				}
			}
		})
	}
	if _, err := Open(t.TempDir(), nil, nil, Options{SegmentBytes: -1}); err == nil {
		t.Fatal("Open accepted invalid options")
	}
}
