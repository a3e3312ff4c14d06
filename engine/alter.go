package engine

import (
	"github.com/seedqueue/sq/api"
)

// TopicConfigChange lists the settings AlterTopicConfig changes; nil
// fields keep their value. A field set to 0 returns to the server default,
// as at create.
type TopicConfigChange struct {
	SyncPolicy     *string
	SegmentBytes   *int64
	RetentionBytes *int64
	RetentionMs    *int64
	MaxRecordBytes *int32
	SegmentMs      *int64
	// MinInsyncReplicas is min.insync.replicas: 1 to the topic's
	// replication factor (0: the cluster layer's default).
	MinInsyncReplicas *int32
	// UncleanLeaderElection is unclean.leader.election.enable.
	UncleanLeaderElection *bool
	// LocalRetentionMs and LocalRetentionBytes are local.retention.ms and
	// local.retention.bytes (TopicConfig): -2 the same as retention.ms /
	// retention.bytes, -1 unlimited, or a positive value (0: the server's
	// default).
	LocalRetentionMs    *int64
	LocalRetentionBytes *int64
}

// AlterTopicConfig changes settings of an existing topic, persists them
// (the metadata file is replaced atomically) and applies them at once:
// a new sync policy from the next commit (what was written under the old
// one is synced then), retention and segment.ms from the next retention
// pass, max.record.bytes from the next publish. segment.bytes is fixed at
// create: changing it is INVALID_CONFIG. Errors: UNKNOWN_TOPIC,
// INVALID_TOPIC_NAME, INVALID_CONFIG (nothing changes), STORAGE_ERROR.
func (e *Engine) AlterTopicConfig(name string, change TopicConfigChange) (TopicInfo, error) {
	e.createMu.Lock()
	defer e.createMu.Unlock()
	if e.isClosing() {
		return TopicInfo{}, api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	t, err := e.topic(name)
	if err != nil {
		return TopicInfo{}, err
	}
	m := t.meta()
	cfg, err := e.ResolveConfigChange(name, m.Config, change)
	if err != nil {
		return TopicInfo{}, err
	}
	policy, err := ParseSyncPolicy(cfg.SyncPolicy)
	if err != nil {
		return TopicInfo{}, api.WrapError(api.CodeInvalidConfig, err, "")
	}
	old := m
	m.Config = cfg
	if err := e.writeTopicMeta(m); err != nil {
		// A failed directory fsync may follow the rename that put the new
		// file in place: put the old content back (best effort).
		_ = e.writeTopicMeta(old)
		return TopicInfo{}, storageError("alter topic config", err)
	}
	t.state.Store(e.newTopicState(m, t.parts()))
	for _, p := range t.parts() {
		if *p.policy.Load() != policy {
			p.setPolicy(policy)
		}
	}
	e.log.Info("topic config changed", "topic", name, "sync_policy", cfg.SyncPolicy,
		"retention_ms", cfg.RetentionMs, "retention_bytes", cfg.RetentionBytes, "segment_ms", cfg.SegmentMs, "max_record_bytes", cfg.MaxRecordBytes,
		"local_retention_ms", cfg.LocalRetentionMs, "local_retention_bytes", cfg.LocalRetentionBytes)
	return t.info(true), nil
}

// ResolveConfigChange returns the config that AlterTopicConfig would give
// topic name, whose stored config is cur, for change, without changing
// anything: the set fields replaced, zero fields resolved to the server
// defaults and every field checked as at an alter (a field that keeps
// its stored value is not checked again against the server's limits).
// The cluster layer uses it to propose a topic's new config. Errors:
// INVALID_CONFIG (segment.bytes changed, or a bad value).
func (e *Engine) ResolveConfigChange(name string, cur TopicConfig, change TopicConfigChange) (TopicConfig, error) {
	cfg := cur
	if change.SegmentBytes != nil && *change.SegmentBytes != cfg.SegmentBytes {
		return TopicConfig{}, api.NewError(api.CodeInvalidConfig, "segment.bytes is fixed when a topic is created (topic %q has %d)", name, cfg.SegmentBytes)
	}
	set(&cfg.SyncPolicy, change.SyncPolicy)
	set(&cfg.RetentionBytes, change.RetentionBytes)
	set(&cfg.RetentionMs, change.RetentionMs)
	set(&cfg.MaxRecordBytes, change.MaxRecordBytes)
	set(&cfg.SegmentMs, change.SegmentMs)
	set(&cfg.MinInsyncReplicas, change.MinInsyncReplicas)
	set(&cfg.UncleanLeaderElection, change.UncleanLeaderElection)
	set(&cfg.LocalRetentionMs, change.LocalRetentionMs)
	set(&cfg.LocalRetentionBytes, change.LocalRetentionBytes)
	return e.resolveConfig(cfg, &cur)
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}
