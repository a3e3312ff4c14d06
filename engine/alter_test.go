package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

func ptr[T any](v T) *T { return &v }

func TestAlterTopicConfig(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 2, TopicConfig{SyncPolicy: "none"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := e.Append(ctx, "t", 0, mkBatch(t, "before"))
	if err != nil || res.Durability != DurabilityWritten {
		t.Fatalf("append under none: %+v %v", res, err)
	}
	info, err := e.AlterTopicConfig("t", TopicConfigChange{SyncPolicy: ptr("every-batch"), RetentionMs: ptr(int64(60000)), MaxRecordBytes: ptr(int32(100))})
	if err != nil {
		t.Fatal(err)
	}
	if c := info.Config; c.SyncPolicy != "every-batch" || c.RetentionMs != 60000 || c.MaxRecordBytes != 100 || c.RetentionBytes != -1 {
		t.Fatalf("config after alter: %+v", c)
	}
	res, err = e.Append(ctx, "t", 1, mkBatch(t, "after"))
	if err != nil || res.Durability != DurabilitySynced {
		t.Fatalf("append after switching to every-batch: %+v %v", res, err)
	}
	if _, err := e.Append(ctx, "t", 1, mkBatch(t, strings.Repeat("x", 101))); codeOf(err) != api.CodeMessageTooLarge {
		t.Fatalf("record over the new limit: %v", err)
	}
	bad := []TopicConfigChange{
		{SyncPolicy: ptr("sometimes")},
		{RetentionMs: ptr(int64(-5))},
		{SegmentBytes: ptr(int64(1 << 20))},
		{MaxRecordBytes: ptr(int32(1 << 30))},
	}
	for _, c := range bad {
		if _, err := e.AlterTopicConfig("t", c); codeOf(err) != api.CodeInvalidConfig {
			t.Errorf("alter %+v: %v, want INVALID_CONFIG", c, err)
		}
	}
	if _, err := e.AlterTopicConfig("nope", TopicConfigChange{}); codeOf(err) != api.CodeUnknownTopic {
		t.Fatalf("alter of an unknown topic: %v", err)
	}
	// Persisted.
	e.Close()
	e2 := openTest(t, opts)
	info, err = e2.DescribeTopic("t")
	if err != nil || info.Config.SyncPolicy != "every-batch" || info.Config.RetentionMs != 60000 {
		t.Fatalf("config after restart: %+v %v", info.Config, err)
	}
	// Back to an interval policy: acknowledged after the write.
	if _, err := e2.AlterTopicConfig("t", TopicConfigChange{SyncPolicy: ptr("10ms")}); err != nil {
		t.Fatal(err)
	}
	if res, err := e2.Append(ctx, "t", 0, mkBatch(t, "interval")); err != nil || res.Durability != DurabilityWritten {
		t.Fatalf("append under 10ms: %+v %v", res, err)
	}
}

// TestAlterAfterServerLimitsChanged restarts the engine with limits that the
// topic's stored settings no longer meet (a larger batch limit than its
// segment.bytes allows at create, a smaller record limit than its
// max.record.bytes): settings the alter does not change are kept as they
// were accepted, so retention and the sync policy can still be changed, and
// records are bounded by the smaller of the topic's and the server's limit.
func TestAlterAfterServerLimitsChanged(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.MaxBatchBytes = 64 << 10
	opts.MaxRecordBytes = 32 << 10
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{SegmentBytes: 80 << 10}); err != nil {
		t.Fatal(err)
	}
	e.Close()

	cases := []struct {
		name          string
		batch, record int
	}{
		{"larger batch limit", 16 << 20, 32 << 10},
		{"smaller record limit", 64 << 10, 1 << 10},
		{"both", 16 << 20, 1 << 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testOptions(dir)
			o.MaxBatchBytes, o.MaxRecordBytes = c.batch, c.record
			o.SegmentBytes = 32 << 20 // the server default for new topics
			e := openTest(t, o)
			defer e.Close()
			info, err := e.AlterTopicConfig("t", TopicConfigChange{RetentionMs: ptr(int64(3_600_000)), SyncPolicy: ptr("none")})
			if err != nil {
				t.Fatalf("alter of retention and sync policy: %v", err)
			}
			if info.Config.RetentionMs != 3_600_000 || info.Config.SegmentBytes != 80<<10 {
				t.Fatalf("config after alter: %+v", info.Config)
			}
			// An explicit max.record.bytes is still checked against the
			// server's limit.
			if _, err := e.AlterTopicConfig("t", TopicConfigChange{MaxRecordBytes: ptr(int32(c.record + 1))}); codeOf(err) != api.CodeInvalidConfig {
				t.Fatalf("alter of max.record.bytes above the server limit: %v", err)
			}
			// A record over the server's limit is refused even though the
			// topic's stored limit is larger.
			if c.record < 32<<10 {
				if _, err := e.Append(context.Background(), "t", 0, mkBatch(t, strings.Repeat("x", c.record+1))); codeOf(err) != api.CodeMessageTooLarge {
					t.Fatalf("record over the server limit: %v", err)
				}
			}
			if _, err := e.Append(context.Background(), "t", 0, mkBatch(t, "ok")); err != nil {
				t.Fatal(err)
			}
		})
	}
}
