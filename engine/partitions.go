package engine

import (
	"path/filepath"

	"github.com/seedqueue/sq/api"
)

// CreatePartitions grows topic name to total partitions (the new total,
// as Kafka's CreatePartitions, KIP-195), keeping its id, config and
// existing partitions with their data; the new partitions start empty at
// offset 0 with the topic's config.
//
// The steps, each durable before the next:
//
//   - the new partitions' directories and logs are created (each
//     directory's entry fsynced in the topic directory by segment.Open);
//   - the topic's metadata file is replaced with the new count (written to
//     a temporary file, fsynced, renamed, the directory fsynced): the
//     commit point;
//   - the new partitions are published in memory: publishes and fetches
//     reach them from then on, and each consumer group's assignment grows
//     at its members' next heartbeat.
//
// A crash before the commit point leaves the old count and empty
// partition directories above it, which the next CreatePartitions opens
// again as they are (they never held an acknowledged record); a crash
// after it leaves the new count, and the next start opens every
// partition. A directory above the count that holds records (left by hand
// or by a restored metadata file) is never reused nor removed: the call
// fails and names it.
//
// It serialises with CreateTopic, DeleteTopic and AlterTopicConfig.
// Errors: INVALID_TOPIC_NAME, UNKNOWN_TOPIC, INVALID_CONFIG (total not
// above the current count, or above MaxPartitions; nothing changes),
// SHUTTING_DOWN, STORAGE_ERROR, PARTITION_FAILED (a leftover partition
// directory is corrupt) or DISK_FULL (the topic keeps its old count).
func (e *Engine) CreatePartitions(name string, total int) (TopicInfo, error) {
	if err := ValidateTopicName(name); err != nil {
		return TopicInfo{}, err
	}
	e.createMu.Lock()
	defer e.createMu.Unlock()
	if e.isClosing() {
		return TopicInfo{}, api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	t, err := e.topic(name)
	if err != nil {
		return TopicInfo{}, err
	}
	st := t.state.Load()
	m := st.meta
	cur := m.Partitions
	if err := checkPartitionTotal(name, cur, total); err != nil {
		return TopicInfo{}, err
	}
	policy, err := ParseSyncPolicy(m.Config.SyncPolicy)
	if err != nil {
		return TopicInfo{}, api.WrapError(api.CodeInvalidConfig, err, "")
	}
	added := e.openParts(m, policy, cur, total)
	if err := usableNewParts(added); err != nil {
		_ = closeParts(added)
		return TopicInfo{}, err
	}
	grown := m
	grown.Partitions = total
	if err := e.writeTopicMeta(grown); err != nil {
		_ = closeParts(added)
		// A failed directory fsync may follow the rename that put the
		// new file in place: put the old content back (best effort; if
		// the new count survives, the next start opens the new, empty
		// partitions).
		_ = e.writeTopicMeta(m)
		return TopicInfo{}, storageError("create partitions", err)
	}
	parts := make([]*partition, 0, total)
	parts = append(append(parts, st.parts...), added...)
	t.state.Store(e.newTopicState(grown, parts))
	e.log.Info("partitions added", "topic", name, "topic_id", m.ID, "partitions_before", cur, "partitions", total)
	return t.info(true), nil
}

// checkPartitionTotal checks the new total of CreatePartitions against the
// topic's current count cur: partitions can be added, never removed.
func checkPartitionTotal(name string, cur, total int) error {
	switch {
	case total <= cur:
		return api.NewError(api.CodeInvalidConfig, "topic %q has %d partitions; the new total %d must be larger (partitions can be added, not removed)", name, cur, total)
	case total > MaxPartitions:
		return api.NewError(api.CodeInvalidConfig, "topic %q has %d partitions; the new total %d is above the maximum %d partitions of a topic", name, cur, total, MaxPartitions)
	}
	return nil
}

// usableNewParts returns the error that makes partitions just opened for
// CreatePartitions unusable: a failed open, or records in a directory
// that was left above the topic's count (only an empty one, the remains
// of an interrupted CreatePartitions, may be taken over).
func usableNewParts(parts []*partition) error {
	for _, p := range parts {
		if fe := p.failed.Load(); fe != nil {
			// DISK_FULL when the disk is, else the open's own code.
			return storageError("create partitions", fe)
		}
		if p.log.NextOffset() > 0 || p.log.LogStartOffset() > 0 {
			return api.NewError(api.CodeStorageError,
				"partition directory %s already holds records (offsets %d to %d) although the topic's metadata does not count it; move it away (it is not part of the topic) and try again",
				filepath.Clean(p.dir), p.log.LogStartOffset(), p.log.NextOffset())
		}
	}
	return nil
}
