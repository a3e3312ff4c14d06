package main

import (
	"strings"
	"testing"
)

// TestLocalRetentionFlags checks the defaults (-2), the SQ_* variables,
// that a flag wins over its variable, and the errors of
// --local-retention-ms and --local-retention-bytes, within --retention-ms
// and --retention-bytes.
func TestLocalRetentionFlags(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		env       map[string]string
		ms, bytes int64
		wantErr   string
	}{
		{name: "defaults", ms: -2, bytes: -2},
		{name: "env", env: map[string]string{"SQ_LOCAL_RETENTION_MS": "3600000", "SQ_LOCAL_RETENTION_BYTES": "1048576"}, ms: 3600000, bytes: 1 << 20},
		{name: "flag wins", args: []string{"--local-retention-ms", "60000", "--local-retention-bytes", "-1"},
			env: map[string]string{"SQ_LOCAL_RETENTION_MS": "3600000", "SQ_LOCAL_RETENTION_BYTES": "1048576"}, ms: 60000, bytes: -1},
		{name: "at the default retention.ms", args: []string{"--local-retention-ms", "604800000"}, ms: 604800000, bytes: -2},
		{name: "above the default retention.ms", args: []string{"--local-retention-ms", "604800001"}, ms: 604800001, bytes: -2,
			wantErr: "--local-retention-ms 604800001: the default retention.ms of topics is 604800000"},
		{name: "ms unlimited", args: []string{"--local-retention-ms", "-1"}, ms: -1, bytes: -2, wantErr: "--local-retention-ms -1: the default retention.ms"},
		{name: "ms zero", args: []string{"--local-retention-ms", "0"}, ms: 0, bytes: -2, wantErr: "--local-retention-ms 0: want -2"},
		{name: "under --retention-ms", args: []string{"--retention-ms", "3600000", "--local-retention-ms", "3600001"}, ms: 3600001, bytes: -2,
			wantErr: "--local-retention-ms 3600001: the default retention.ms of topics is 3600000 (--retention-ms)"},
		{name: "under --retention-bytes", env: map[string]string{"SQ_RETENTION_BYTES": "1048576", "SQ_LOCAL_RETENTION_BYTES": "-1"}, ms: -2, bytes: -1,
			wantErr: "--local-retention-bytes -1: the default retention.bytes of topics is 1048576"},
		{name: "within --retention-bytes", env: map[string]string{"SQ_RETENTION_BYTES": "1048576", "SQ_LOCAL_RETENTION_BYTES": "1000"}, ms: -2, bytes: 1000},
		{name: "unlimited retention", args: []string{"--retention-ms", "-1", "--local-retention-ms", "-1"}, ms: -1, bytes: -2},
		{name: "retention-ms zero", args: []string{"--retention-ms", "0"}, ms: -2, bytes: -2, wantErr: "--retention-ms 0: want -1 (unlimited) or a positive value"},
		{name: "retention-bytes below -1", args: []string{"--retention-bytes", "-2"}, ms: -2, bytes: -2, wantErr: "--retention-bytes -2: want -1"},
		{name: "bytes below -2", env: map[string]string{"SQ_LOCAL_RETENTION_BYTES": "-3"}, ms: -2, bytes: -3, wantErr: "--local-retention-bytes -3: want -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, tc.env, tc.args...)
			if c.LocalRetentionMs != tc.ms || c.LocalRetentionBytes != tc.bytes {
				t.Errorf("parsed %d ms, %d bytes; want %d, %d", c.LocalRetentionMs, c.LocalRetentionBytes, tc.ms, tc.bytes)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
