package main

import (
	"strings"
	"testing"

	"github.com/seedqueue/sq/sdk"
)

func TestParseFromOffsets(t *testing.T) {
	// Each input resolved in a partition whose log spans [100, 150).
	tests := []struct {
		in   string
		want uint64
	}{
		{"earliest", 100}, {"beginning", 100}, {"BEGINNING", 100}, {"start", 100}, {"oldest", 100},
		{"latest", 150}, {"end", 150}, {"End", 150}, {"newest", 150},
		{"120", 120}, {"0", 0}, {"500", 500},
		{"-10", 140}, {"-50", 100}, {"-51", 100}, {"-1000", 100}, {"-0", 150},
		{"+0", 100}, {"+5", 105}, {"+18446744073709551615", ^uint64(0)},
	}
	for _, tt := range tests {
		sp, err := parseFrom(tt.in)
		if err != nil {
			t.Errorf("parseFrom(%q): %v", tt.in, err)
			continue
		}
		if got := sp.offset(100, 150); got != tt.want {
			t.Errorf("parseFrom(%q).offset(100, 150) = %d, want %d", tt.in, got, tt.want)
		}
	}
	for _, bad := range []string{"", "-", "+", "--5", "-x", "1.5", "first", "18446744073709551616", "- 5", "stored"} {
		_, err := parseFrom(bad)
		if err == nil || !strings.Contains(err.Error(), "--from/-o") {
			t.Errorf("parseFrom(%q) = %v, want an error naming --from/-o", bad, err)
		}
	}
}

func TestGroupStart(t *testing.T) {
	tests := []struct {
		in   string
		want sdk.StartPosition
		ok   bool
	}{
		{"earliest", sdk.StartEarliest, true},
		{"end", sdk.StartLatest, true},
		{"42", sdk.StartAt(42), true},
		{"-10", 0, false},
		{"+10", 0, false},
	}
	for _, tt := range tests {
		sp, err := parseFrom(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sp.groupStart()
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("groupStart(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestPartitionFlag(t *testing.T) {
	for _, tt := range []struct {
		in  string
		all bool
		p   uint32
	}{{"all", true, 0}, {"ALL", true, 0}, {"-1", true, 0}, {"0", false, 0}, {"7", false, 7}, {"4294967295", false, 4294967295}} {
		f := partitionFlag{all: true}
		if err := f.Set(tt.in); err != nil || f.all != tt.all || f.p != tt.p {
			t.Errorf("Set(%q) = %v: %+v; want all=%v p=%d", tt.in, err, f, tt.all, tt.p)
		}
	}
	for _, bad := range []string{"-2", "-100", "x", "", "1.0", "4294967296"} {
		f := partitionFlag{all: true}
		if err := f.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted: %+v", bad, f)
		}
	}
	if s := (&partitionFlag{all: true}).String(); s != "all" {
		t.Errorf("String() = %q, want all", s)
	}
}
