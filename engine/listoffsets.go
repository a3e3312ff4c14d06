package engine

import (
	"github.com/seedqueue/sq/api"
)

// Special timestamps of ListOffsets (Kafka's ListOffsets, KIP-79).
const (
	// OffsetLatest asks ListOffsets for the high watermark.
	OffsetLatest int64 = -1
	// OffsetEarliest asks ListOffsets for the log start offset.
	OffsetEarliest int64 = -2
)

// ListOffsets looks up an offset of a partition by broker append time
// (Unix ms): the first offset of the first batch appended at or after
// timestamp, and that batch's append time; the high watermark and -1 when
// no readable batch was appended that late. OffsetLatest (-1) returns the
// high watermark and OffsetEarliest (-2) the log start offset, both with
// timestamp -1. Offsets at or above the high watermark are never returned
// as found. Errors: UNKNOWN_TOPIC, UNKNOWN_PARTITION, INVALID_REQUEST (a
// negative timestamp other than -1 and -2), PARTITION_FAILED.
func (e *Engine) ListOffsets(topicName string, partition int, timestamp int64) (offset uint64, ts int64, err error) {
	t, p, err := e.partition(topicName, partition)
	if err != nil {
		return 0, -1, err
	}
	if p.log == nil {
		return 0, -1, p.failed.Load()
	}
	hw := p.hw.Load()
	switch {
	case timestamp == OffsetLatest:
		offset, ts = hw, -1
	case timestamp == OffsetEarliest:
		offset, ts = p.log.LogStartOffset(), -1
		if r := e.remote(); r != nil && !IsInternalTopic(topicName) {
			// With tiered storage the log starts in the remote log.
			if start, _, ok := r.Bounds(topicName, t.meta().ID, partition); ok && start < offset {
				offset = start
			}
		}
	case timestamp < 0:
		return 0, -1, api.NewError(api.CodeInvalidRequest, "timestamp %d: want Unix ms, -1 (latest) or -2 (earliest)", timestamp)
	default:
		offset, ts = p.log.OffsetForTime(timestamp)
		if offset >= hw {
			offset, ts = hw, -1
		}
	}
	if p.deleted.Load() {
		return 0, -1, unknownTopic(topicName)
	}
	return offset, ts, nil
}

// unknownTopic is the error of a request for a topic that does not exist
// (or was deleted while the request ran).
func unknownTopic(name string) *api.Error {
	return api.NewError(api.CodeUnknownTopic, "topic %q does not exist", name)
}
