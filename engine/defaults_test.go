package engine

import (
	"strings"
	"testing"
)

// TestSetTopicDefaults: Options.RetentionMs and RetentionBytes are the
// retention of topics created without one; SetTopicDefaults changes them
// for topics created afterwards only, and refuses an invalid set whole,
// keeping the current defaults.
func TestSetTopicDefaults(t *testing.T) {
	o := testOptions(t.TempDir())
	o.RetentionMs, o.RetentionBytes = hourMs, 1<<30
	e := openTest(t, o)
	if _, err := e.CreateTopic("before", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if got := e.TopicDefaults(); got.RetentionMs != hourMs || got.RetentionBytes != 1<<30 || got.LocalRetentionMs != -2 {
		t.Fatalf("TopicDefaults() = %+v, want the options'", got)
	}
	for _, tc := range []struct {
		name string
		d    TopicDefaults
		err  string // non-empty: refused with an error containing it
	}{
		{name: "zero ms", d: TopicDefaults{RetentionMs: 0, RetentionBytes: -1, LocalRetentionMs: -2, LocalRetentionBytes: -2}, err: "default retention.ms 0"},
		{name: "bytes below -1", d: TopicDefaults{RetentionMs: -1, RetentionBytes: -5, LocalRetentionMs: -2, LocalRetentionBytes: -2}, err: "default retention.bytes -5"},
		{name: "local beyond the whole log", d: TopicDefaults{RetentionMs: hourMs, RetentionBytes: -1, LocalRetentionMs: 2 * hourMs, LocalRetentionBytes: -2}, err: "default local.retention.ms 7200000"},
		{name: "valid", d: TopicDefaults{RetentionMs: 2 * hourMs, RetentionBytes: -1, LocalRetentionMs: -2, LocalRetentionBytes: -2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := e.TopicDefaults()
			err := e.SetTopicDefaults(tc.d)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("SetTopicDefaults(%+v) = %v, want an error containing %q", tc.d, err, tc.err)
				}
				if got := e.TopicDefaults(); got != prev {
					t.Fatalf("after a refused set, TopicDefaults() = %+v, want %+v", got, prev)
				}
				return
			}
			if err != nil || e.TopicDefaults() != tc.d {
				t.Fatalf("SetTopicDefaults(%+v) = %v, defaults now %+v", tc.d, err, e.TopicDefaults())
			}
		})
	}
	if _, err := e.CreateTopic("after", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		topic     string
		ms, bytes int64
	}{{"before", hourMs, 1 << 30}, {"after", 2 * hourMs, -1}} {
		info, err := e.DescribeTopic(tc.topic)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.RetentionMs != tc.ms || info.Config.RetentionBytes != tc.bytes {
			t.Errorf("%s: retention.ms %d, retention.bytes %d; want %d, %d", tc.topic, info.Config.RetentionMs, info.Config.RetentionBytes, tc.ms, tc.bytes)
		}
	}
}
