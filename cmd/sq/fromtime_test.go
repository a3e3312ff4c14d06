package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseFromTime(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	nowMs := now.UnixMilli()
	tests := []struct {
		in      string
		want    int64
		errHas  string // "" when the input is accepted
		errHas2 string
	}{
		{in: "0", want: 0},
		{in: "1767366245000", want: 1767366245000},
		{in: "100000000000", want: 100000000000},
		{in: "2026-01-02T15:04:05Z", want: 1767366245000},
		{in: "2026-01-02T15:04:05.250Z", want: 1767366245250},
		{in: "2026-01-02T16:04:05+01:00", want: 1767366245000},
		{in: "1960-01-01T00:00:00Z", want: 0}, // before the epoch: from the start
		{in: "-1h", want: nowMs - 3600_000},
		{in: "-30m", want: nowMs - 1800_000},
		{in: "-1h30m", want: nowMs - 5400_000},
		{in: "-90s", want: nowMs - 90_000},
		{in: "-1500ms", want: nowMs - 1500},
		{in: "-1000000h", want: 0}, // before the epoch
		{in: "1796079000s", want: 1796079000000},
		{in: "1796079000000ms", want: 1796079000000},
		{in: "0s", want: 0},
		{in: "1796079000", errHas: "looks like seconds", errHas2: "1796079000s or 1796079000000ms"},
		{in: "9999999999", errHas: "looks like seconds", errHas2: "9999999999s or 9999999999000ms"},
		{in: "10000000000", errHas: "ambiguous; write its unit", errHas2: "10000000000s (seconds) or 10000000000ms"}, // 2286 as s, 1970 as ms
		{in: "99999999999", errHas: "ambiguous; write its unit", errHas2: "99999999999s (seconds) or 99999999999ms"},
		{in: "+1h", errHas: "takes a minus sign: -1h"},
		{in: "1796079000000000us", errHas: "a Unix time takes the unit s or ms (1796079000000ms)", errHas2: "minus sign (-1796079000000000us)"},
		{in: "1796079000000000µs", errHas: "(1796079000000ms)"},
		{in: "1796079000000000000ns", errHas: "(1796079000000ms)"},
		{in: "2026-01-02T15:04:05", errHas: "needs its zone", errHas2: "2026-01-02T15:04:05Z (UTC) or 2026-01-02T15:04:05+01:00"},
		{in: "2026-01-02T15:04:05.5", errHas: "2026-01-02T15:04:05Z (UTC)"},
		{in: "2026-01-02 15:04:05", errHas: "needs its zone", errHas2: "2026-01-02T15:04:05Z"},
		{in: "2026-01-02T15:04", errHas: "2026-01-02T15:04:00Z"},
		{in: "100000000", errHas: "looks like seconds"},
		{in: "12345", errHas: "ambiguous", errHas2: "12345s (seconds) or 12345ms"},
		{in: "-1", errHas: "cannot be negative"},
		{in: "1h", errHas: "takes a minus sign", errHas2: "-1h"},
		{in: "yesterday", errHas: "RFC 3339"},
		{in: "2026-01-02", errHas: "needs its zone", errHas2: "2026-01-02T00:00:00Z (UTC) or 2026-01-02T00:00:00+01:00"},
		{in: "2026-13-02", errHas: "RFC 3339"},
		{in: "", errHas: "empty"},
		{in: "99999999999999999999s", errHas: "out of range"},
		{in: "9223372036854775807s", errHas: "out of range"},
		{in: "99999999999999999999ms", errHas: "out of range"},
		{in: "1.5s", errHas: "takes a minus sign"},
		{in: "s", errHas: "RFC 3339"},
		{in: "ms", errHas: "RFC 3339"},
	}
	for _, tt := range tests {
		got, err := parseFromTime(tt.in, now)
		if tt.errHas == "" {
			if err != nil || got != tt.want {
				t.Errorf("parseFromTime(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("parseFromTime(%q) = %d, nil; want an error containing %q", tt.in, got, tt.errHas)
			continue
		}
		for _, want := range []string{tt.errHas, tt.errHas2, "--from-time"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("parseFromTime(%q) error %q does not contain %q", tt.in, err, want)
			}
		}
	}
}
