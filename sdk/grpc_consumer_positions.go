package sdk

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/seedqueue/sq/api/sqv1"
)

// MarkProcessed records that msg, a record Poll returned, is processed:
// with AutoCommitMarked, commits store at most the position after the last
// record marked in each partition, as Consumer.MarkProcessed. It may be
// called from any goroutine. Marks of a partition are dropped when the
// partition is revoked or lost. Errors: ErrInvalidConfig without
// AutoCommitMarked, ErrNoGroup without a ConsumerGroup, ErrClosed after
// Close, ErrNotAssigned (another topic, a partition not held, a record of
// an earlier assignment of the partition) and ErrInvalidPosition (a record
// Poll has not returned).
func (c *GrpcConsumer) MarkProcessed(msg Message) error {
	if !c.cfg.AutoCommitMarked {
		return fmt.Errorf("%w: MarkProcessed needs GrpcConsumerConfig.AutoCommitMarked", ErrInvalidConfig)
	}
	if c.cfg.ConsumerGroup == "" {
		return ErrNoGroup
	}
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	held := (c.run.parts[msg.Partition] != nil || c.group.revoking[msg.Partition]) && !c.group.left
	// pos is 0 while Poll has returned nothing of the partition: no record
	// can be marked then.
	return mark(c.marked, msg, c.cfg.Topic, held, c.from[msg.Partition], c.pos[msg.Partition])
}

// commitPosLocked returns the position a commit stores for partition p:
// after the records returned by Poll, or with AutoCommitMarked after the
// last marked record (never beyond what Poll returned). It returns false
// when there is nothing to commit. c.mu held.
func (c *GrpcConsumer) commitPosLocked(p uint32) (uint64, bool) {
	pos, ok := c.pos[p]
	return commitPosition(pos, ok, c.cfg.AutoCommitMarked, c.marked, p)
}

// forget drops the positions and marks of partitions released or lost.
func (c *GrpcConsumer) forget(ps []uint32) {
	c.mu.Lock()
	for _, p := range ps {
		delete(c.pos, p)
		delete(c.marked, p)
	}
	c.mu.Unlock()
	for _, p := range ps {
		delete(c.committed, p)
	}
}

// recordsLost reports that the offsets [from, logStart) of partition p
// were removed by retention before they were read: to OnRecordsLost when
// set, else as a warning.
func (c *GrpcConsumer) recordsLost(p uint32, from, logStart uint64) {
	if c.cfg.OnRecordsLost != nil {
		c.cfg.OnRecordsLost(p, from, logStart)
		return
	}
	logLost(c.cfg.lossLog, c.cfg.Topic, p, from, logStart)
}

// pollStarts and pollEnds bracket a Poll for MaxPollInterval: a Poll in
// progress counts as polling. A member that left the group is woken to
// join again.
func (c *GrpcConsumer) pollStarts() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.polling = true
	c.lastPoll = c.cfg.now()
	if c.group.left {
		select {
		case c.group.hbNow <- struct{}{}:
		default:
		}
	}
}

func (c *GrpcConsumer) pollEnds() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.polling = false
	c.lastPoll = c.cfg.now()
}

// stalledLocked reports whether the application has not called Poll for
// longer than MaxPollInterval; c.mu held.
func (c *GrpcConsumer) stalledLocked() bool {
	return c.cfg.MaxPollInterval > 0 && !c.polling && c.cfg.now().Sub(c.lastPoll) > c.cfg.MaxPollInterval
}

// leaveIfStalled leaves the group when the member has not polled within
// MaxPollInterval (KIP-62): its partitions stop at once and are dropped
// without committing (the next Commit reports the positions not stored,
// wrapping ErrMaxPollIntervalExceeded), and the coordinator moves them at
// once. It reports whether it left.
func (c *GrpcConsumer) leaveIfStalled(ctx context.Context) bool {
	c.mu.Lock()
	g := c.group
	if g.memberID == "" || g.left || !c.stalledLocked() {
		c.mu.Unlock()
		return false
	}
	idle := c.cfg.now().Sub(c.lastPoll).Round(time.Millisecond)
	cause := fmt.Errorf("%w: no Poll for %v (MaxPollInterval %v)", ErrMaxPollIntervalExceeded, idle, c.cfg.MaxPollInterval)
	owned := partitionsOf(c.run.parts)
	c.dropAllLocked(cause)
	c.group.memberID, c.group.left = "", true
	c.mu.Unlock()
	c.cfg.Logger.Warn("Poll not called within MaxPollInterval; leaving the group so its partitions move, "+
		"without committing records returned since the last commit (the next Poll joins again)",
		"group", c.cfg.ConsumerGroup, "member", g.memberID, "since_last_poll", idle,
		"max_poll_interval", c.cfg.MaxPollInterval, "partitions", owned)
	if _, err := unary(ctx, c.cfg.RequestTimeout, c.groups.LeaveGroup, &sqv1.LeaveGroupRequest{Group: c.cfg.ConsumerGroup, MemberId: g.memberID}); err != nil && ctx.Err() == nil {
		c.cfg.Logger.Warn("leave group failed; the session timeout will remove the member", "group", c.cfg.ConsumerGroup, "err", err)
	}
	return true
}

// dropAllLocked stops every partition of the member and marks it dropped
// with cause (fenced, or left past MaxPollInterval): Poll's next sync
// forgets their positions without committing and records them as lost.
// c.mu held.
func (c *GrpcConsumer) dropAllLocked(cause error) {
	for p, part := range c.run.parts {
		part.cancel()
		delete(c.run.parts, p)
		c.group.dropped[p] = true
	}
	for p := range c.group.revoking {
		c.group.dropped[p] = true
	}
	clear(c.group.revoking)
	c.group.dropCause = cause
	select {
	case c.group.revokeNow <- struct{}{}: // an idle Poll syncs at once
	default:
	}
}

// rejoin joins the group as a new member and starts reading its
// assignment.
func (c *GrpcConsumer) rejoin(ctx context.Context) error {
	parts, _, err := c.join(ctx)
	if err != nil {
		return err
	}
	return c.apply(ctx, parts)
}

// noteLostLocked records, with cause, the positions of ps returned by Poll
// and not stored. c.mu held.
func (c *GrpcConsumer) noteLostLocked(ps []uint32, cause error) {
	for _, p := range ps {
		pos, ok := c.commitPosLocked(p)
		if !ok {
			continue
		}
		if prev, done := c.committed[p]; done && prev == pos {
			continue
		}
		c.lost[p] = pos
		c.lostErr = cause
	}
}

// takeLost returns the error reporting the positions that were never
// stored, and forgets them; nil when there are none.
func (c *GrpcConsumer) takeLost() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lost) == 0 {
		return nil
	}
	ps := partitionsOf(c.lost)
	var desc strings.Builder
	for i, p := range ps {
		if i > 0 {
			desc.WriteString(", ")
		}
		fmt.Fprintf(&desc, "%d@%d", p, c.lost[p])
	}
	err := fmt.Errorf("sdk: commit group %q: positions (partition@offset) %s of topic %q were not stored: %w; "+
		"records after the group's committed offsets are read again", c.cfg.ConsumerGroup, desc.String(), c.cfg.Topic, c.lostErr)
	clear(c.lost)
	c.lostErr = nil
	return err
}

// growStandalone starts reading the partitions added to the topic since
// the consumer started, for a consumer that reads every partition (no
// group member id). It runs from Poll, at most once per MetadataMaxAge; a
// new topic id is left to the partition readers (UNKNOWN_TOPIC_ID makes
// Poll start over), and an error to the next look.
func (c *GrpcConsumer) growStandalone(ctx context.Context) {
	now := time.Now()
	if now.Sub(c.lastMeta) < c.cfg.MetadataMaxAge {
		return
	}
	c.lastMeta = now
	tm, err := c.core.topic(ctx, c.cfg.Topic)
	if err != nil {
		return
	}
	c.mu.Lock()
	r := c.run
	var added []uint32
	if c.group.memberID == "" && !c.group.left && tm.id == r.id {
		for p := range tm.partitions {
			if r.parts[p] == nil {
				added = append(added, p)
			}
		}
	}
	c.mu.Unlock()
	if len(added) == 0 {
		return
	}
	id, starts, committed, err := c.startOffsets(ctx, added)
	if err != nil {
		c.cfg.Logger.Warn("reading the partitions added to the topic failed; retrying later", "topic", c.cfg.Topic, "partitions", added, "err", err)
		return
	}
	c.mu.Lock()
	if c.run != r || id != r.id || r.ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	var started []uint32
	for _, p := range added {
		if off, ok := starts[p]; ok && r.parts[p] == nil {
			c.startPartitionLocked(r, p, off)
			started = append(started, p)
		}
	}
	c.mu.Unlock()
	maps.Copy(c.committed, committed)
	if len(started) > 0 {
		c.cfg.Logger.Info("reading the partitions added to the topic", "topic", c.cfg.Topic, "partitions", started)
	}
}
