package engine

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFiveGroups commits one record for each of the groups g0..g4 (offset
// 100+i of t/i) and returns the file's bytes and each record's start.
func writeFiveGroups(t *testing.T, dir string) ([]byte, []int) {
	t.Helper()
	opts := testOptions(dir)
	opts.Defaults()
	s, err := openOffsetStore(dir, opts.FS, opts.Logger)
	if err != nil {
		t.Fatal(err)
	}
	var starts []int
	for i := range 5 {
		starts = append(starts, int(s.size))
		rec := offsetRecord{Group: fmt.Sprintf("g%d", i), Member: "m", Generation: 1,
			Offsets: []offsetEntry{{Topic: "t", Partition: i, Offset: uint64(100 + i)}}}
		if err := s.commit(rec); err != nil {
			t.Fatal(err)
		}
	}
	s.close()
	data, err := os.ReadFile(filepath.Join(dir, offsetsFile))
	if err != nil {
		t.Fatal(err)
	}
	return data, starts
}

// One bad record before the end of groups/offsets.log is corruption, not a
// torn tail: every other group's offsets survive, the damaged file is
// copied aside and an error names the file and the byte position. A bad
// last record is a torn write: cut off with a warning, nothing copied.
func TestOffsetsLogCorruption(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(data []byte, starts []int) []byte
		lost    []int // groups whose offsets are gone
		corrupt bool  // ERROR and a damaged copy, else a WARN only
		pos     func(starts []int) int
	}{
		{"payload byte 12 of the first record", func(d []byte, _ []int) []byte { d[12] ^= 0xff; return d },
			[]int{0}, true, func([]int) int { return 0 }},
		{"CRC of the third record", func(d []byte, s []int) []byte { d[s[2]+5] ^= 0x01; return d },
			[]int{2}, true, func(s []int) int { return s[2] }},
		{"length of the second record", func(d []byte, s []int) []byte { d[s[1]+3] = 0x7f; return d },
			[]int{1, 2, 3, 4}, true, func(s []int) int { return s[1] }},
		{"length 0 of the second record", func(d []byte, s []int) []byte { copy(d[s[1]:], []byte{0, 0, 0, 0}); return d },
			[]int{1, 2, 3, 4}, true, func(s []int) int { return s[1] }},
		{"CRC of the second record and a torn last record", func(d []byte, s []int) []byte { d[s[1]+6] ^= 0x01; return d[:len(d)-3] },
			[]int{1, 4}, true, func(s []int) int { return s[1] }},
		{"torn last record", func(d []byte, _ []int) []byte { return d[:len(d)-3] },
			[]int{4}, false, nil},
		{"bad payload byte in the last record", func(d []byte, s []int) []byte { d[s[4]+10] ^= 0xff; return d },
			[]int{4}, false, nil},
		{"torn header after the last record", func(d []byte, _ []int) []byte { return append(d, 9, 0, 0) },
			nil, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data, starts := writeFiveGroups(t, dir)
			if len(data) < 250 || len(data) > 320 {
				t.Fatalf("file of %d bytes, want about 280", len(data))
			}
			path := filepath.Join(dir, offsetsFile)
			damaged := tc.damage(bytes.Clone(data), starts)
			if err := os.WriteFile(path, damaged, 0o644); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			opts := testOptions(dir)
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			opts.Defaults()
			s, err := openOffsetStore(dir, opts.FS, opts.Logger)
			if err != nil {
				t.Fatal(err)
			}
			checkGroups(t, s, tc.lost)
			s.close()

			copies, _ := filepath.Glob(path + ".damaged-*")
			if !tc.corrupt {
				if len(copies) != 0 || strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "level=WARN") {
					t.Fatalf("torn tail: copies %v, logs:\n%s", copies, logs.String())
				}
				return
			}
			if len(copies) != 1 {
				t.Fatalf("damaged copies %v, want one", copies)
			}
			if got, _ := os.ReadFile(copies[0]); !bytes.Equal(got, damaged) {
				t.Fatal("the damaged copy differs from the damaged file")
			}
			want := fmt.Sprintf("byte_position=%d", tc.pos(starts))
			if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, path) || !strings.Contains(l, want) {
				t.Fatalf("want an ERROR naming %s and %s, logs:\n%s", path, want, l)
			}
			// The file was rewritten clean: a second open finds nothing wrong.
			logs.Reset()
			s2, err := openOffsetStore(dir, opts.FS, opts.Logger)
			if err != nil {
				t.Fatal(err)
			}
			defer s2.close()
			checkGroups(t, s2, tc.lost)
			if logs.Len() != 0 {
				t.Fatalf("second open logged:\n%s", logs.String())
			}
			if again, _ := filepath.Glob(path + ".damaged-*"); len(again) != 1 {
				t.Fatalf("damaged copies after the second open: %v", again)
			}
		})
	}
}

// checkGroups checks that g0..g4 hold offset 100+i of t/i, except the
// groups in lost, which hold nothing.
func checkGroups(t *testing.T, s *offsetStore, lost []int) {
	t.Helper()
	for i := range 5 {
		got := s.get(fmt.Sprintf("g%d", i), "")
		isLost := false
		for _, l := range lost {
			isLost = isLost || l == i
		}
		switch {
		case isLost && len(got) != 0:
			t.Errorf("g%d: %+v, want nothing", i, got)
		case !isLost && (len(got) != 1 || got[0].Partition != i || got[0].Offset != uint64(100+i)):
			t.Errorf("g%d: %+v, want t/%d at %d", i, got, i, 100+i)
		}
	}
}

// forgetTopic drops every group's offsets of one topic, durably: they
// stay gone after a reopen, and the other topics' offsets stay.
func TestOffsetsForgetTopic(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.Defaults()
	s, err := openOffsetStore(dir, opts.FS, opts.Logger)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"a", "b"} {
		rec := offsetRecord{Group: g, Offsets: []offsetEntry{{Topic: "t", Partition: 0, Offset: 7}, {Topic: "t", Partition: 1, Offset: 8}, {Topic: "u", Offset: 9}}}
		if err := s.commit(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.forgetTopic("t"); err != nil {
		t.Fatal(err)
	}
	if err := s.forgetTopic("absent"); err != nil {
		t.Fatal(err)
	}
	check := func(s *offsetStore, when string) {
		t.Helper()
		for _, g := range []string{"a", "b"} {
			if got := s.get(g, ""); len(got) != 1 || got[0].Topic != "u" || got[0].Offset != 9 {
				t.Fatalf("%s: group %s holds %+v, want u/0 at 9 only", when, g, got)
			}
		}
	}
	check(s, "after forgetTopic")
	s.close()
	if err := s.forgetTopic("u"); err == nil {
		t.Fatal("forgetTopic after close succeeded")
	}
	s2, err := openOffsetStore(dir, opts.FS, opts.Logger)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.close()
	check(s2, "after reopen")
}
