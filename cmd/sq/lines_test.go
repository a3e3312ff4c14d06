package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

func readAllLines(t *testing.T, in string, limit int) ([]string, error) {
	t.Helper()
	lr := newLineReader(strings.NewReader(in), limit)
	var out []string
	for {
		b, n, err := lr.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if n != len(out)+1 {
			t.Fatalf("line number %d, want %d", n, len(out)+1)
		}
		out = append(out, string(b))
	}
}

func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 100_000) // over bufio's 64 KiB default
	tests := []struct {
		name  string
		in    string
		limit int
		want  []string
		// errLine is the line number of a too-long line, 0 for none.
		errLine int
	}{
		{name: "empty input", in: "", limit: 10, want: nil},
		{name: "one newline is one empty record", in: "\n", limit: 10, want: []string{""}},
		{name: "final newline adds nothing", in: "a\n", limit: 10, want: []string{"a"}},
		{name: "empty line in the middle", in: "a\n\nb", limit: 10, want: []string{"a", "", "b"}},
		{name: "two final newlines", in: "a\n\n", limit: 10, want: []string{"a", ""}},
		{name: "CRLF kept", in: "a\r\nb\r\n", limit: 10, want: []string{"a\r", "b\r"}},
		{name: "invalid UTF-8 kept", in: "\xff\xfe\n", limit: 10, want: []string{"\xff\xfe"}},
		{name: "line of exactly the limit", in: "12345\n123", limit: 5, want: []string{"12345", "123"}},
		{name: "last line of exactly the limit", in: "1\n12345", limit: 5, want: []string{"1", "12345"}},
		{name: "line over the limit", in: "1\n123456\n", limit: 5, want: []string{"1"}, errLine: 2},
		{name: "last line over the limit", in: "1\n2\n123456", limit: 5, want: []string{"1", "2"}, errLine: 3},
		{name: "long lines under a large limit", in: long + "\n" + long, limit: 1 << 20, want: []string{long, long}},
		{name: "long line over a limit beyond the buffer minimum", in: long + "x\n", limit: len(long), errLine: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAllLines(t, tt.in, tt.limit)
			var tl *lineTooLongError
			switch {
			case tt.errLine == 0 && err != nil:
				t.Fatalf("error %v", err)
			case tt.errLine != 0 && !errors.As(err, &tl):
				t.Fatalf("error %v, want a too-long line", err)
			case tt.errLine != 0 && tl.line != tt.errLine:
				t.Fatalf("too-long line %d, want %d", tl.line, tt.errLine)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSplitKey(t *testing.T) {
	tests := []struct {
		line, sep  string
		key, value string
		keyNil     bool
	}{
		{"k:v", ":", "k", "v", false},
		{"k:v:w", ":", "k", "v:w", false},
		{":v", ":", "", "v", false},
		{"novalue", ":", "", "novalue", true},
		{"k:v", "", "", "k:v", true},
		{"k::v", "::", "k", "v", false},
	}
	for _, tt := range tests {
		k, v := splitKey([]byte(tt.line), []byte(tt.sep))
		if (k == nil) != tt.keyNil || string(k) != tt.key || string(v) != tt.value {
			t.Errorf("splitKey(%q, %q) = %q (nil %v), %q", tt.line, tt.sep, k, k == nil, v)
		}
	}
}

func TestOffsetRanges(t *testing.T) {
	var r offsetRanges
	for _, o := range []uint64{0, 1, 2, 5, 7, 8} {
		r.add(o)
	}
	if got := r.String(); got != "0-2,5,7-8" {
		t.Errorf("ranges %q", got)
	}
}

// onceEOF is input that says io.EOF once and then has more to read, as
// a terminal does at Ctrl-D.
type onceEOF struct {
	parts []string // each read returns the next part; "" is io.EOF
}

func (o *onceEOF) Read(p []byte) (int, error) {
	if len(o.parts) == 0 {
		return 0, errors.New("read after the end of the test input")
	}
	part := o.parts[0]
	o.parts = o.parts[1:]
	if part == "" {
		return 0, io.EOF
	}
	return copy(p, part), nil
}

// TestDelimReaderStopsAtFirstEOF: the input's first io.EOF ends the
// records, also when the last record has no delimiter, for one-byte and
// several-byte delimiters: the reader never reads again (a terminal would
// wait for another Ctrl-D, and here would give more records).
func TestDelimReaderStopsAtFirstEOF(t *testing.T) {
	for _, tc := range []struct {
		delim string
		parts []string
		want  []string
	}{
		{",", []string{"a,b\n", "", "more,"}, []string{"a", "b\n"}},
		{"\n", []string{"x\ny", "", "more\n"}, []string{"x", "y"}},
		{"\n", []string{"x\n", "", "more\n"}, []string{"x"}},
		{"\r\n", []string{"p\r\nq\r", "", "more\r\n"}, []string{"p", "q\r"}},
		{"\r\n", []string{"p\r\n", "", "more\r\n"}, []string{"p"}},
		{"\x00", []string{"", "more\x00"}, nil},
	} {
		in := &onceEOF{parts: tc.parts}
		lr := newDelimReader(in, []byte(tc.delim), 1<<20)
		var got []string
		for {
			b, _, err := lr.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("delimiter %q: %v", tc.delim, err)
			}
			got = append(got, string(b))
		}
		if _, _, err := lr.next(); !errors.Is(err, io.EOF) {
			t.Errorf("delimiter %q: next after the end: %v, want io.EOF", tc.delim, err)
		}
		if !slices.Equal(got, tc.want) || len(in.parts) != 1 {
			t.Errorf("delimiter %q: records %q, want %q; unread parts %q, want only the one after EOF", tc.delim, got, tc.want, in.parts)
		}
	}
}

// TestProduceSummary: the summary names each partition's acknowledged
// offsets, "offset" when a partition got a single record, and the count
// not acknowledged.
func TestProduceSummary(t *testing.T) {
	for _, tc := range []struct {
		offsets map[uint32][]uint64
		failed  int
		want    string
	}{
		{map[uint32][]uint64{2: {8}}, 0, "produced 1 record to orders: partition 2 offset 8"},
		{map[uint32][]uint64{0: {0, 1}}, 0, "produced 2 records to orders: partition 0 offsets 0-1"},
		{map[uint32][]uint64{0: {4}, 1: {0, 1, 2}, 2: {3, 5}}, 0, "produced 6 records to orders: partition 0 offset 4, partition 1 offsets 0-2, partition 2 offsets 3,5"},
		{map[uint32][]uint64{1: {7}}, 3, "produced 1 record to orders: partition 1 offset 7 (3 not acknowledged)"},
		{nil, 2, "produced 0 records to orders (2 not acknowledged)"},
	} {
		s := &produceSession{topic: "orders", failed: tc.failed, ranges: map[uint32]*offsetRanges{}}
		for p, offs := range tc.offsets {
			r := &offsetRanges{}
			for _, o := range offs {
				r.add(o)
				s.acked++
			}
			s.ranges[p] = r
		}
		if got := s.summary(3); got != tc.want {
			t.Errorf("summary %q, want %q", got, tc.want)
		}
	}
}

func readAllDelim(t *testing.T, in string, delim []byte, limit int) ([]string, error) {
	t.Helper()
	lr := newDelimReader(strings.NewReader(in), delim, limit)
	var out []string
	for {
		b, n, err := lr.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if n != len(out)+1 {
			t.Fatalf("record number %d, want %d", n, len(out)+1)
		}
		out = append(out, string(b))
	}
}

// Records split at single- and multi-byte delimiters: a final delimiter
// adds no record (as kcat -D), two in a row make an empty record, and a
// record is limited without its delimiter.
func TestDelimReader(t *testing.T) {
	long := strings.Repeat("y", 70_000)
	tests := []struct {
		name, in, delim string
		limit           int
		want            []string
		errRecord       int // number of a too-long record, 0 for none
	}{
		{name: "NUL", in: "a\x00b\x00\x00c\x00", delim: "\x00", limit: 10, want: []string{"a", "b", "", "c"}},
		{name: "NUL keeps newlines", in: "a\nb\x00c", delim: "\x00", limit: 10, want: []string{"a\nb", "c"}},
		{name: "CRLF", in: "a\r\nb\nc\r\n\r\nd", delim: "\r\n", limit: 10, want: []string{"a", "b\nc", "", "d"}},
		{name: "CRLF final", in: "a\r\n", delim: "\r\n", limit: 10, want: []string{"a"}},
		{name: "lone CR stays", in: "a\rb\r\n", delim: "\r\n", limit: 10, want: []string{"a\rb"}},
		{name: "no overlap, left to right", in: "a---b--", delim: "--", limit: 10, want: []string{"a", "-b"}},
		{name: "delimiter only", in: "--", delim: "--", limit: 10, want: []string{""}},
		{name: "repeated first byte", in: "xxaby", delim: "ab", limit: 10, want: []string{"xx", "y"}},
		{name: "partial delimiter at the end", in: "a-", delim: "--", limit: 10, want: []string{"a-"}},
		{name: "empty", in: "", delim: "--", limit: 10, want: nil},
		{name: "record of exactly the limit", in: "12345--6", delim: "--", limit: 5, want: []string{"12345", "6"}},
		{name: "record over the limit", in: "1--123456--", delim: "--", limit: 5, want: []string{"1"}, errRecord: 2},
		{name: "last record over the limit", in: "1--123456", delim: "--", limit: 5, want: []string{"1"}, errRecord: 2},
		{name: "long records beyond the buffer", in: long + "<>" + long, delim: "<>", limit: 1 << 20, want: []string{long, long}},
		{name: "long record over the limit", in: long + "<>", delim: "<>", limit: len(long) - 1, errRecord: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAllDelim(t, tt.in, []byte(tt.delim), tt.limit)
			var tl *lineTooLongError
			switch {
			case tt.errRecord == 0 && err != nil:
				t.Fatalf("error %v", err)
			case tt.errRecord != 0 && !errors.As(err, &tl):
				t.Fatalf("error %v, want a too-long record", err)
			case tt.errRecord != 0 && tl.line != tt.errRecord:
				t.Fatalf("too-long record %d, want %d", tl.line, tt.errRecord)
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseDelimiter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		err  string
	}{
		{in: `\n`, want: "\n"},
		{in: `\0`, want: "\x00"},
		{in: `\r\n`, want: "\r\n"},
		{in: `\t`, want: "\t"},
		{in: `\\`, want: `\`},
		{in: `\x1e`, want: "\x1e"},
		{in: `\xFF`, want: "\xff"},
		{in: `--`, want: "--"},
		{in: `a\0b`, want: "a\x00b"},
		{in: "|", want: "|"},
		{in: "", err: "must not be empty"},
		{in: `\`, err: "lone backslash"},
		{in: `ab\`, err: "lone backslash"},
		{in: `\q`, err: `unknown escape \q`},
		{in: `\x1`, err: "two hex digits"},
		{in: `\xzz`, err: "two hex digits"},
	} {
		got, err := parseDelimiter(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseDelimiter(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("parseDelimiter(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestOffsetRangesFirst(t *testing.T) {
	var r offsetRanges
	for _, o := range []uint64{1, 3, 5, 7, 8, 9} {
		r.add(o)
	}
	if got := r.first(2); got != "1,3,..." {
		t.Errorf("first(2) = %q", got)
	}
	if got := r.first(10); got != "1,3,5,7-9" {
		t.Errorf("first(10) = %q", got)
	}
}

// --key-separator takes the escapes of --delimiter: '\t' used to be the
// two bytes backslash and t, so tab-separated input was sent without keys
// and no error said so.
func TestParseKeySeparator(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: `\t`, want: "\t"},
		{in: ":", want: ":"},
		{in: `::`, want: "::"},
		{in: `\\`, want: `\`},
		{in: `\x1f`, want: "\x1f"},
		{in: `\0`, want: "\x00"},
		{in: "", err: "--key-separator must not be empty"},
		{in: `\`, err: `--key-separator "\\" ends in a lone backslash`},
		{in: `\q`, err: `--key-separator "\\q": unknown escape \q`},
		{in: `\xZ`, err: `--key-separator "\\xZ": \x needs two hex digits`},
	} {
		got, err := parseKeySeparator(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseKeySeparator(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("parseKeySeparator(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	k, v := splitKey([]byte("user-1\t{\"a\":1}"), mustKeySeparator(t, `\t`))
	if string(k) != "user-1" || string(v) != `{"a":1}` {
		t.Fatalf(`split at '\t': key %q value %q`, k, v)
	}
}

func mustKeySeparator(t *testing.T, s string) []byte {
	t.Helper()
	sep, err := parseKeySeparator(s)
	if err != nil {
		t.Fatal(err)
	}
	return sep
}
