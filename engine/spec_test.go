package engine

import (
	"context"
	"testing"

	"github.com/seedqueue/sq/api"
)

// CreateTopicSpec keeps the given id, creation time and config, also
// across a restart; bad specs are refused and create nothing.
func TestCreateTopicSpec(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	cfg, err := e.ResolveConfig(TopicConfig{RetentionMs: 5000, ReplicationFactor: 3})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SyncPolicy == "" || cfg.SegmentBytes != opts.SegmentBytes || cfg.RetentionBytes != -1 || cfg.RetentionMs != 5000 || cfg.ReplicationFactor != 3 {
		t.Fatalf("ResolveConfig: %+v", cfg)
	}
	id := api.NewTopicID()
	spec := TopicSpec{Name: "s", ID: id, Partitions: 3, Config: cfg, CreatedMs: 1234}
	ti, err := e.CreateTopicSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, ti TopicInfo) {
		t.Helper()
		if ti.ID != id || ti.CreatedMs != 1234 || ti.PartitionCount != 3 || ti.Config != cfg {
			t.Fatalf("%s: %+v, want id %v created 1234, 3 partitions, config %+v", what, ti, id, cfg)
		}
	}
	check("CreateTopicSpec", ti)
	if _, err := e.Append(context.Background(), "s", 2, mkBatch(t, "a")); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name string
		spec TopicSpec
		code api.Code
	}{
		{"exists", spec, api.CodeTopicExists},
		{"zero id", TopicSpec{Name: "z", Partitions: 1, Config: cfg}, api.CodeInvalidRequest},
		{"no partitions", TopicSpec{Name: "z", ID: api.NewTopicID(), Config: cfg}, api.CodeInvalidConfig},
		{"bad name", TopicSpec{Name: "a/b", ID: api.NewTopicID(), Partitions: 1, Config: cfg}, api.CodeInvalidTopicName},
		{"bad config", TopicSpec{Name: "z", ID: api.NewTopicID(), Partitions: 1, Config: TopicConfig{RetentionMs: -5}}, api.CodeInvalidConfig},
	}
	for _, b := range bad {
		if _, err := e.CreateTopicSpec(b.spec); codeOf(err) != b.code {
			t.Errorf("%s: %v, want %v", b.name, err, b.code)
		}
	}
	if _, err := e.DescribeTopic("z"); codeOf(err) != api.CodeUnknownTopic {
		t.Fatalf("a refused spec created topic z: %v", err)
	}
	e.Close()
	e2 := openTest(t, opts)
	d, err := e2.DescribeTopic("s")
	if err != nil {
		t.Fatal(err)
	}
	check("after restart", d)
	if d.Partitions[2].LogEndOffset != 1 {
		t.Fatalf("partition 2 after restart: %+v", d.Partitions[2])
	}
	// A zero creation time means now.
	ti, err = e2.CreateTopicSpec(TopicSpec{Name: "now", ID: api.NewTopicID(), Partitions: 1, Config: cfg})
	if err != nil || ti.CreatedMs <= 0 {
		t.Fatalf("spec without a creation time: %+v %v", ti, err)
	}
}

// A spec's config resolved on a node with larger limits is accepted as
// it is: the fields are not checked again against this server's batch
// and record limits.
func TestCreateTopicSpecKeepsForeignLimits(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	cfg, err := e.ResolveConfig(TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxRecordBytes = int32(e.opts.MaxRecordBytes) + 1
	cfg.SegmentBytes = int64(opts.MaxBatchBytes) // below the batch limit plus the minimum
	if _, err := e.CreateTopic("plain", 1, cfg); codeOf(err) != api.CodeInvalidConfig {
		t.Fatalf("CreateTopic with values over this server's limits: %v", err)
	}
	ti, err := e.CreateTopicSpec(TopicSpec{Name: "foreign", ID: api.NewTopicID(), Partitions: 1, Config: cfg})
	if err != nil || ti.Config != cfg {
		t.Fatalf("CreateTopicSpec: %+v %v", ti.Config, err)
	}
}

// ResolveConfigChange computes what AlterTopicConfig stores, without
// storing it.
func TestResolveConfigChange(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	ti, err := e.CreateTopic("t", 1, TopicConfig{ReplicationFactor: 2})
	if err != nil {
		t.Fatal(err)
	}
	ms, zero, seg := int64(42), int64(0), ti.Config.SegmentBytes+1
	got, err := e.ResolveConfigChange("t", ti.Config, TopicConfigChange{RetentionMs: &ms, SegmentMs: &zero})
	if err != nil {
		t.Fatal(err)
	}
	want := ti.Config
	want.RetentionMs = 42
	if got != want {
		t.Fatalf("ResolveConfigChange: %+v, want %+v", got, want)
	}
	if d, _ := e.DescribeTopic("t"); d.Config != ti.Config {
		t.Fatalf("ResolveConfigChange changed the topic: %+v", d.Config)
	}
	if _, err := e.ResolveConfigChange("t", ti.Config, TopicConfigChange{SegmentBytes: &seg}); codeOf(err) != api.CodeInvalidConfig {
		t.Fatalf("segment.bytes change: %v", err)
	}
	neg := int64(-7)
	if _, err := e.ResolveConfigChange("t", ti.Config, TopicConfigChange{RetentionBytes: &neg}); codeOf(err) != api.CodeInvalidConfig {
		t.Fatalf("bad retention.bytes: %v", err)
	}
	after, err := e.AlterTopicConfig("t", TopicConfigChange{RetentionMs: &ms, SegmentMs: &zero})
	if err != nil || after.Config != got {
		t.Fatalf("AlterTopicConfig stored %+v (%v), ResolveConfigChange said %+v", after.Config, err, got)
	}
}

// SetCommitCheck limits the high-watermark check of commits to the
// partitions it selects; nil restores the check everywhere.
func TestSetCommitCheck(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	commit := func() []api.Code {
		t.Helper()
		res, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 9}, {Topic: "t", Partition: 1, Offset: 9}, {Topic: "t", Partition: 5, Offset: 0}})
		if err != nil {
			t.Fatal(err)
		}
		return []api.Code{codeOf(res[0].Err), codeOf(res[1].Err), codeOf(res[2].Err)}
	}
	e.SetCommitCheck(func(topic string, p int) bool { return p == 0 })
	if got := commit(); got[0] != api.CodeOffsetOutOfRange || got[1] != api.CodeNone || got[2] != api.CodeUnknownPartition {
		t.Fatalf("with partition 0 checked: %v", got)
	}
	if got, _ := e.FetchOffsets("g", "t"); len(got) != 1 || got[0].Partition != 1 || got[0].Offset != 9 {
		t.Fatalf("stored offsets: %+v", got)
	}
	e.SetCommitCheck(nil)
	if got := commit(); got[0] != api.CodeOffsetOutOfRange || got[1] != api.CodeOffsetOutOfRange {
		t.Fatalf("with every partition checked: %v", got)
	}
}
