package main

import "testing"

func TestParseFromTime(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1767366245000", 1767366245000, true},
		{"2026-01-02T15:04:05Z", 1767366245000, true},
		{"2026-01-02T15:04:05.250Z", 1767366245250, true},
		{"2026-01-02T16:04:05+01:00", 1767366245000, true},
		{"1960-01-01T00:00:00Z", 0, true}, // before the epoch: from the start
		{"-1", 0, false},
		{"yesterday", 0, false},
		{"2026-01-02", 0, false},
	}
	for _, tt := range tests {
		got, err := parseFromTime(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseFromTime(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
