package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

const hourMs = int64(3600 * 1000)

func TestLocalRetentionResolve(t *testing.T) {
	tests := []struct {
		name       string
		cfg        TopicConfig
		ms, bytes  int64  // wanted, when accepted
		wantErrSub string // non-empty: INVALID_CONFIG containing it
	}{
		{name: "defaults", cfg: TopicConfig{}, ms: -2, bytes: -2},
		{name: "same as the whole log", cfg: TopicConfig{LocalRetentionMs: -2, LocalRetentionBytes: -2}, ms: -2, bytes: -2},
		{name: "below the whole log", cfg: TopicConfig{RetentionMs: 2 * hourMs, LocalRetentionMs: hourMs, RetentionBytes: 1 << 30, LocalRetentionBytes: 1 << 20},
			ms: hourMs, bytes: 1 << 20},
		{name: "equal to the whole log", cfg: TopicConfig{RetentionMs: hourMs, LocalRetentionMs: hourMs, RetentionBytes: 1 << 20, LocalRetentionBytes: 1 << 20},
			ms: hourMs, bytes: 1 << 20},
		{name: "limited under an unlimited log", cfg: TopicConfig{RetentionMs: -1, LocalRetentionMs: hourMs, LocalRetentionBytes: 1 << 20}, ms: hourMs, bytes: 1 << 20},
		{name: "unlimited under an unlimited log", cfg: TopicConfig{RetentionMs: -1, LocalRetentionMs: -1, LocalRetentionBytes: -1}, ms: -1, bytes: -1},
		{name: "ms above retention.ms", cfg: TopicConfig{RetentionMs: hourMs, LocalRetentionMs: hourMs + 1},
			wantErrSub: "local.retention.ms 3600001: exceeds retention.ms 3600000"},
		{name: "ms above the default retention.ms", cfg: TopicConfig{LocalRetentionMs: DefaultRetentionMs + 1},
			wantErrSub: "exceeds retention.ms"},
		{name: "ms unlimited under a limited log", cfg: TopicConfig{RetentionMs: hourMs, LocalRetentionMs: -1},
			wantErrSub: "local.retention.ms -1: unlimited local retention with retention.ms 3600000"},
		{name: "ms below -2", cfg: TopicConfig{LocalRetentionMs: -3}, wantErrSub: "local.retention.ms -3: want -2 (the same as retention.ms), -1 (unlimited)"},
		{name: "bytes above retention.bytes", cfg: TopicConfig{RetentionBytes: 1 << 20, LocalRetentionBytes: 1<<20 + 1},
			wantErrSub: "local.retention.bytes 1048577: exceeds retention.bytes 1048576"},
		{name: "bytes unlimited under a limited log", cfg: TopicConfig{RetentionBytes: 1 << 20, LocalRetentionBytes: -1},
			wantErrSub: "unlimited local retention with retention.bytes 1048576"},
		{name: "bytes below -2", cfg: TopicConfig{LocalRetentionBytes: -7}, wantErrSub: "local.retention.bytes -7: want -2"},
	}
	e := openTest(t, testOptions(t.TempDir()))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.ResolveConfig(tc.cfg)
			if tc.wantErrSub != "" {
				if codeOf(err) != api.CodeInvalidConfig || !strings.Contains(err.Error(), tc.wantErrSub) {
					t.Fatalf("err = %v, want INVALID_CONFIG containing %q", err, tc.wantErrSub)
				}
				return
			}
			if err != nil || got.LocalRetentionMs != tc.ms || got.LocalRetentionBytes != tc.bytes {
				t.Fatalf("resolved %d ms, %d bytes (%v), want %d, %d", got.LocalRetentionMs, got.LocalRetentionBytes, err, tc.ms, tc.bytes)
			}
		})
	}
}

// TestLocalRetentionServerDefault: 0 takes Options.LocalRetentionMs and
// LocalRetentionBytes; a default that does not fit the topic's own
// retention is refused, naming the server flag.
func TestLocalRetentionServerDefault(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.LocalRetentionMs, opts.LocalRetentionBytes = hourMs, 1<<20
	e := openTest(t, opts)
	info, err := e.CreateTopic("t", 1, TopicConfig{})
	if err != nil || info.Config.LocalRetentionMs != hourMs || info.Config.LocalRetentionBytes != 1<<20 {
		t.Fatalf("create: %+v %v", info.Config, err)
	}
	_, err = e.CreateTopic("u", 1, TopicConfig{RetentionMs: 1000})
	if codeOf(err) != api.CodeInvalidConfig || !strings.Contains(err.Error(), "the server's default, sq-server --local-retention-ms") {
		t.Fatalf("create under a shorter retention.ms: %v", err)
	}
	if _, err := e.CreateTopic("u", 1, TopicConfig{RetentionMs: 1000, LocalRetentionMs: -2}); err != nil {
		t.Fatalf("create with -2 under a shorter retention.ms: %v", err)
	}
}

func TestLocalRetentionAlter(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{RetentionMs: 2 * hourMs}); err != nil {
		t.Fatal(err)
	}
	info, err := e.AlterTopicConfig("t", TopicConfigChange{LocalRetentionMs: ptr(hourMs), LocalRetentionBytes: ptr(int64(4096))})
	if err != nil || info.Config.LocalRetentionMs != hourMs || info.Config.LocalRetentionBytes != 4096 {
		t.Fatalf("alter: %+v %v", info.Config, err)
	}
	bad := []TopicConfigChange{
		{RetentionMs: ptr(hourMs - 1)},     // below the local part now
		{LocalRetentionMs: ptr(int64(-1))}, // unlimited under 2h
		{LocalRetentionBytes: ptr(int64(-3))},
		{RetentionBytes: ptr(int64(4095))},
	}
	for _, c := range bad {
		if _, err := e.AlterTopicConfig("t", c); codeOf(err) != api.CodeInvalidConfig {
			t.Errorf("alter %+v: %v, want INVALID_CONFIG", c, err)
		}
	}
	e.Close()
	e2 := openTest(t, opts)
	info, err = e2.DescribeTopic("t")
	if err != nil || info.Config.LocalRetentionMs != hourMs || info.Config.LocalRetentionBytes != 4096 {
		t.Fatalf("after restart: %+v %v", info.Config, err)
	}
	// Back to the default: 0 is the server's, -2.
	info, err = e2.AlterTopicConfig("t", TopicConfigChange{LocalRetentionMs: ptr(int64(0)), LocalRetentionBytes: ptr(int64(-2))})
	if err != nil || info.Config.LocalRetentionMs != -2 || info.Config.LocalRetentionBytes != -2 {
		t.Fatalf("alter back: %+v %v", info.Config, err)
	}
}

// TestLocalRetentionJSON: -2 is left out of the JSON and a missing key
// reads as -2, so the metadata of topics that never set them is as
// before; other values, 0 included, survive a round trip.
func TestLocalRetentionJSON(t *testing.T) {
	old := `{"sync_policy":"none","segment_bytes":65536,"retention_bytes":-1,"retention_ms":604800000,"max_record_bytes":1048576,"segment_ms":604800000}`
	var c TopicConfig
	if err := json.Unmarshal([]byte(old), &c); err != nil {
		t.Fatal(err)
	}
	if c.LocalRetentionMs != -2 || c.LocalRetentionBytes != -2 || c.RetentionMs != 604800000 {
		t.Fatalf("old config read as %+v", c)
	}
	b, err := json.Marshal(c)
	if err != nil || string(b) != old {
		t.Fatalf("old config encodes as %s (%v), want %s", b, err, old)
	}
	for _, v := range []int64{-1, 0, 1, hourMs} {
		in := c
		in.LocalRetentionMs, in.LocalRetentionBytes = v, v+5
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out TopicConfig
		if err := json.Unmarshal(b, &out); err != nil || out != in {
			t.Fatalf("%s read as %+v (%v), want %+v", b, out, err, in)
		}
	}
	if err := json.Unmarshal([]byte(`{"sync_policy":"none","cleanup_policy":"compact"}`), &c); err == nil {
		t.Fatal("TopicConfig took an unknown key")
	}
}

// TestLocalRetentionMetaFile: a metadata file written before the local
// settings existed loads with -2 and is rewritten unchanged by an
// unrelated alter; unknown config keys in a file are ignored.
func TestLocalRetentionMetaFile(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{SyncPolicy: "none"}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	path := filepath.Join(opts.DataDir, "meta", "topics", "t.json")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(before), "local_retention") {
		t.Fatalf("default local retention written:\n%s", before)
	}
	withUnknown := strings.Replace(string(before), `"sync_policy"`, `"future_setting": 3, "sync_policy"`, 1)
	if err := os.WriteFile(path, []byte(withUnknown), 0o644); err != nil {
		t.Fatal(err)
	}
	e2 := openTest(t, opts)
	info, err := e2.DescribeTopic("t")
	if err != nil || info.Config.LocalRetentionMs != -2 || info.Config.LocalRetentionBytes != -2 || info.Config.SyncPolicy != "none" {
		t.Fatalf("loaded %+v %v", info.Config, err)
	}
	if _, err := e2.AlterTopicConfig("t", TopicConfigChange{SyncPolicy: ptr("none")}); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil || string(after) != string(before) {
		t.Fatalf("rewritten as\n%s\nwant\n%s (%v)", after, before, err)
	}
}

func TestLocalRetentionOptions(t *testing.T) {
	tests := []struct {
		ms, bytes int64
		retention int64
		wantSub   string
	}{
		{0, 0, 0, ""},
		{-2, -1, 0, ""},
		{hourMs, 1 << 30, 0, ""},
		{-1, -2, -1, ""},
		{-1, -2, 0, "default local.retention.ms -1: unlimited local retention with retention.ms 604800000"},
		{DefaultRetentionMs + 1, -2, 0, "exceeds retention.ms"},
		{-3, -2, 0, "default local.retention.ms -3: want -2"},
		{-2, -4, 0, "default local.retention.bytes -4: want -2"},
	}
	for _, tc := range tests {
		o := Options{DataDir: "d", LocalRetentionMs: tc.ms, LocalRetentionBytes: tc.bytes, RetentionMs: tc.retention}
		o.Defaults()
		err := o.Validate()
		if tc.wantSub == "" && err != nil || tc.wantSub != "" && (err == nil || !strings.Contains(err.Error(), tc.wantSub)) {
			t.Errorf("%+v: Validate() = %v, want %q", tc, err, tc.wantSub)
		}
	}
}
