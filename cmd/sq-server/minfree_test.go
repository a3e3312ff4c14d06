package main

import (
	"strings"
	"testing"

	"github.com/seedqueue/sq/engine"
)

// TestMinFreeBytesFlag: --min-free-bytes defaults to auto, takes auto (any
// case) or a byte count by flag or SQ_MIN_FREE_BYTES (the flag wins), and
// refuses anything else with a message that says what is accepted.
func TestMinFreeBytesFlag(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want int64
		err  string
	}{
		{want: engine.MinFreeAuto},
		{args: []string{"--min-free-bytes", "auto"}, want: engine.MinFreeAuto},
		{args: []string{"--min-free-bytes", "AUTO"}, want: engine.MinFreeAuto},
		{args: []string{"--min-free-bytes", "268435456"}, want: 256 << 20},
		{args: []string{"--min-free-bytes", "0x1000"}, want: 4096},
		{args: []string{"--min-free-bytes", "0"}, want: 0},
		{env: map[string]string{"SQ_MIN_FREE_BYTES": "1048576"}, want: 1 << 20},
		{env: map[string]string{"SQ_MIN_FREE_BYTES": "auto"}, want: engine.MinFreeAuto},
		{env: map[string]string{"SQ_MIN_FREE_BYTES": "5"}, args: []string{"--min-free-bytes", "auto"}, want: engine.MinFreeAuto},
		{args: []string{"--min-free-bytes", "-1"}, err: "want auto"},
		{args: []string{"--min-free-bytes", "5%"}, err: "want auto"},
		{args: []string{"--min-free-bytes", "256MiB"}, err: "want auto"},
		{env: map[string]string{"SQ_MIN_FREE_BYTES": "lots"}, err: "SQ_MIN_FREE_BYTES"},
	} {
		c, err := parseConfig(t, tc.env, tc.args...)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v %v: err %v, want one containing %q", tc.env, tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v %v: %v", tc.env, tc.args, err)
			continue
		}
		if c.MinFreeBytes != tc.want {
			t.Errorf("%v %v: MinFreeBytes %d, want %d", tc.env, tc.args, c.MinFreeBytes, tc.want)
		}
	}
}
