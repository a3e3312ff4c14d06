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
