package sdk

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// Commit stores, for each partition, the offset after the last record
// Poll returned (with AutoCommitMarked, after the last record passed to
// MarkProcessed). It fails with ErrNoGroup without a ConsumerGroup, or with
// the first per-partition error. As Consumer.Commit, it never reports
// success for positions that were not stored: after the member was
// removed from the group (api.ErrFencedGeneration), left it past
// MaxPollInterval (ErrMaxPollIntervalExceeded), or the automatic commit
// of a revoked partition failed, the next Commit fails wrapping that
// cause and names the positions (partition@offset) not stored, once.
func (c *GrpcConsumer) Commit(ctx context.Context) error {
	if c.cfg.ConsumerGroup == "" {
		return ErrNoGroup
	}
	c.sync(ctx)
	err := c.commitPositions(ctx, nil)
	return joinLost(c.takeLost(), err)
}

// commitPositions commits the positions of parts (nil: every partition
// with one). A member commits with its member id and generation
// (Groups.CommitGroupOffsets), which the coordinator fences; a standalone
// consumer with generation -1 (Messaging.CommitOffsets).
func (c *GrpcConsumer) commitPositions(ctx context.Context, parts []uint32) error {
	c.mu.Lock()
	id := c.run.id
	g := c.group
	var entries []*sqv1.OffsetEntry
	add := func(p uint32) {
		if off, ok := c.commitPosLocked(p); ok && c.committed[p] != off {
			entries = append(entries, &sqv1.OffsetEntry{Topic: c.cfg.Topic, TopicId: id.Bytes(), Partition: int32(p), Offset: off})
		}
	}
	if parts == nil {
		for _, p := range partitionsOf(c.pos) {
			add(p)
		}
		c.lastCommit = time.Now()
	}
	for _, p := range parts {
		add(p)
	}
	c.mu.Unlock()
	if g.left {
		// Left the group past MaxPollInterval: nothing is held.
		entries = nil
	}
	if len(entries) == 0 {
		return nil
	}
	var offsets []*sqv1.OffsetEntry
	if g.memberID != "" {
		r, err := retryUnary(ctx, c.cfg.RequestTimeout, c.groups.CommitGroupOffsets, &sqv1.CommitGroupOffsetsRequest{
			Group: c.cfg.ConsumerGroup, MemberId: g.memberID, Generation: g.generation, Offsets: entries})
		if err != nil {
			return fmt.Errorf("sdk: commit as member %s of generation %d: %w", g.memberID, g.generation, err)
		}
		offsets = r.Offsets
	} else {
		r, err := retryUnary(ctx, c.cfg.RequestTimeout, c.msg.CommitOffsets, &sqv1.CommitOffsetsRequest{Group: c.cfg.ConsumerGroup, Offsets: entries})
		if err != nil {
			return err
		}
		offsets = r.Offsets
	}
	var first error
	for _, o := range offsets {
		if o.Error != "" {
			if name := api.CodeUnknownTopicID.String() + ": "; strings.HasPrefix(o.Error, name) {
				c.restart = true // the topic was deleted: start over at the next Poll
				if first == nil {
					first = fmt.Errorf("sdk: commit %s/%d: %w", o.Topic, o.Partition, api.NewError(api.CodeUnknownTopicID, "%s", o.Error[len(name):]))
				}
				continue
			}
			if first == nil {
				first = fmt.Errorf("sdk: commit %s/%d: %w", o.Topic, o.Partition, textError(o.Error, api.CodeUnknown))
			}
			continue
		}
		p := uint32(o.Partition)
		c.committed[p] = o.Offset
		c.mu.Lock()
		if lost, ok := c.lost[p]; ok && o.Offset >= lost {
			// Stored since (the member joined again and read the records
			// again): nothing of it is lost any more, as for Consumer.
			delete(c.lost, p)
			if len(c.lost) == 0 {
				c.lostErr = nil
			}
		}
		c.mu.Unlock()
	}
	return first
}

// Close is CloseContext without a deadline of its own: it returns within
// CloseTimeout (default 10s).
func (c *GrpcConsumer) Close() error {
	return c.CloseContext(context.Background())
}

// CloseContext commits (with AutoCommit), leaves the group (a member:
// its partitions move at once; skipped once the budget is spent, the
// session timeout then removes it), stops the subscriptions and closes
// the connection. The commit is bounded by CloseTimeout and ctx,
// whichever ends first; when it does not store every position,
// CloseContext returns a *CloseCommitError naming the partitions whose
// positions were not committed and wrapping the cause: it never returns
// nil while a position was not stored. It is idempotent: a later call
// returns the first one's error.
func (c *GrpcConsumer) CloseContext(ctx context.Context) error {
	c.closeOnce.Do(func() {
		parent := ctx
		ctx, cancel := closeBudget(parent, c.cfg.CloseTimeout)
		defer cancel()
		c.stopHeartbeat()
		if c.cfg.AutoCommit && c.cfg.ConsumerGroup != "" {
			c.mu.Lock()
			lost := maps.Clone(c.lost) // Commit reports and forgets them
			c.mu.Unlock()
			if err := c.Commit(ctx); err != nil {
				positions := c.uncommitted()
				for p, off := range lost {
					if _, ok := positions[p]; !ok {
						positions[p] = off
					}
				}
				c.closeErr = &CloseCommitError{Group: c.cfg.ConsumerGroup, Topic: c.cfg.Topic, Positions: positions,
					Err: budgetErr(parent, ctx, c.cfg.CloseTimeout, err)}
			}
		}
		c.leave(ctx)
		c.mu.Lock()
		c.cancel() // under mu: no run starts after it
		c.mu.Unlock()
		c.wg.Wait()
		c.core.close()
		c.route.close()
		c.closeErr = errors.Join(c.closeErr, c.admin.Close())
	})
	return c.closeErr
}

// uncommitted returns the positions after the records returned that the
// group does not have.
func (c *GrpcConsumer) uncommitted() map[uint32]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[uint32]uint64{}
	for p := range c.pos {
		if off, ok := c.commitPosLocked(p); ok && c.committed[p] != off {
			out[p] = off
		}
	}
	return out
}
