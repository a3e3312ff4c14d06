package sdk

import (
	"context"
	"errors"
	"fmt"
	"sort"
)

// MarkProcessed records that the application has finished with msg, a
// record Poll returned: with AutoCommitMarked, commits store, per
// partition, the offset after the last marked record (as Sarama's
// MarkMessage). Marking covers the records of the partition before msg
// too; marking a record before one already marked changes nothing. It
// may be called from any goroutine (a worker pool, say), while Poll runs.
//
// A revoked partition can be marked until the next Poll releases it (the
// records of the Polls before were handed out, so the commit of the
// revocation covers what was marked of them); afterwards the partition is
// another member's and marking fails with ErrNotAssigned, as it does for
// a record returned before the partition was revoked and assigned to this
// member again (it starts then at the group's committed offset). Errors:
// ErrInvalidConfig without AutoCommitMarked, ErrNoGroup without a
// ConsumerGroup, ErrClosed after Close, ErrNotAssigned (another topic, a
// partition not held) and ErrInvalidPosition (a record Poll has not
// returned).
func (c *Consumer) MarkProcessed(msg Message) error {
	if !c.cfg.AutoCommitMarked {
		return fmt.Errorf("%w: MarkProcessed needs ConsumerConfig.AutoCommitMarked", ErrInvalidConfig)
	}
	if c.cfg.ConsumerGroup == "" {
		return ErrNoGroup
	}
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pos, held := c.consumed[msg.Partition]
	return mark(c.marked, msg, c.cfg.Topic, held && !c.group.left, c.from[msg.Partition], pos)
}

// mark records msg in marked (partition -> offset after the last record
// marked) for a consumer of topic that holds msg's partition (held) from
// offset from, with pos the offset after the records Poll returned. The
// errors are MarkProcessed's: ErrNotAssigned for another topic, a
// partition not held or a record of an earlier assignment,
// ErrInvalidPosition for a record Poll has not returned.
func mark(marked map[uint32]uint64, msg Message, topic string, held bool, from, pos uint64) error {
	if msg.Topic != topic {
		return fmt.Errorf("%w: record %s/%d@%d, the consumer reads topic %q", ErrNotAssigned, msg.Topic, msg.Partition, msg.Offset, topic)
	}
	if !held {
		return fmt.Errorf("%w: record %s/%d@%d: partition %d is not held (revoked, or the member left its group)",
			ErrNotAssigned, msg.Topic, msg.Partition, msg.Offset, msg.Partition)
	}
	if msg.Offset < from {
		return fmt.Errorf("%w: record %s/%d@%d was returned under an earlier assignment of the partition, which now starts at %d",
			ErrNotAssigned, msg.Topic, msg.Partition, msg.Offset, from)
	}
	if msg.Offset >= pos {
		return fmt.Errorf("%w: record %s/%d@%d was not returned by Poll (position %d)", ErrInvalidPosition, msg.Topic, msg.Partition, msg.Offset, pos)
	}
	if next := msg.Offset + 1; next > marked[msg.Partition] {
		marked[msg.Partition] = next
	}
	return nil
}

// commitPosition is the position a commit stores for a partition: pos,
// the offset after the records Poll returned (ok: there is one), or with
// marks (AutoCommitMarked) the offset after the last record marked, never
// beyond pos. It returns false when there is nothing to commit.
func commitPosition(pos uint64, ok bool, marks bool, marked map[uint32]uint64, p uint32) (uint64, bool) {
	if !ok {
		return 0, false
	}
	if !marks {
		return pos, true
	}
	m, ok := marked[p]
	if !ok {
		return 0, false
	}
	return min(m, pos), true
}

// CommitOffsets commits explicit positions: each entry's Offset is the
// next offset the group will read in that partition (the offset after the
// last record processed), as Kafka's commitSync(offsets). Topic may be
// empty for the consumer's topic; Metadata is stored with the offset.
// Every entry must name a partition the consumer holds, once; otherwise
// nothing is committed and the error wraps ErrNotAssigned or
// ErrInvalidPosition. Like Commit it is fenced in a group: a stale
// generation fails with api.ErrFencedGeneration and stores nothing.
// Positions are not limited to what Poll returned (skipping records is
// allowed), but the server refuses one beyond the partition's high
// watermark (api.ErrOffsetOutOfRange) and stores the others; per-partition
// errors are joined. The consumer's read positions do not move, and a
// later automatic commit stores its own positions (AutoCommit: after
// what Poll returned; AutoCommitMarked: after what was marked) when they
// differ. Errors also: ErrNoGroup without a ConsumerGroup, ErrClosed after
// Close.
func (c *Consumer) CommitOffsets(ctx context.Context, positions []OffsetCommit) error {
	if c.cfg.ConsumerGroup == "" {
		return ErrNoGroup
	}
	if c.ctx.Err() != nil || c.client.isClosed() {
		return ErrClosed
	}
	if len(positions) == 0 {
		return nil
	}
	offs := make([]OffsetCommit, 0, len(positions))
	seen := map[uint32]bool{}
	var errs []error
	c.mu.Lock()
	g := c.group
	for _, o := range positions {
		if o.Topic == "" {
			o.Topic = c.cfg.Topic
		}
		_, held := c.consumed[o.Partition]
		switch {
		case o.Topic != c.cfg.Topic:
			errs = append(errs, fmt.Errorf("%w: %s/%d: the consumer reads topic %q", ErrNotAssigned, o.Topic, o.Partition, c.cfg.Topic))
		case !held || g.left:
			errs = append(errs, fmt.Errorf("%w: %s/%d", ErrNotAssigned, o.Topic, o.Partition))
		case seen[o.Partition]:
			errs = append(errs, fmt.Errorf("%w: %s/%d named twice", ErrInvalidPosition, o.Topic, o.Partition))
		}
		seen[o.Partition] = true
		o.Err = nil
		offs = append(offs, o)
	}
	c.mu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("sdk: commit group %q: nothing committed: %w", c.cfg.ConsumerGroup, errors.Join(errs...))
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i].Partition < offs[j].Partition })
	return c.sendCommits(ctx, g, offs)
}

// Position returns the offset after the last record Poll returned from
// partition (where the consumer reads next: at first, the group's
// committed offset or the StartFrom position) and true, or 0 and false
// when the consumer does not hold the partition. A StartLatest position
// not yet resolved (the topic's describe had no state for the partition)
// is math.MaxUint64 until the first fetch answers.
func (c *Consumer) Position(partition uint32) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, held := c.parts[partition]; !held {
		return 0, false
	}
	pos, ok := c.consumed[partition]
	return pos, ok
}
