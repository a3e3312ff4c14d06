package sdk

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/seedqueue/sq/api"
)

// validRange returns the partition's valid offset range when err is
// OFFSET_OUT_OF_RANGE: from the error, or from a describe when the error
// carries none.
func (c *Consumer) validRange(err error, partition uint32) (start, end uint64, ok bool) {
	if !errors.Is(err, api.ErrOffsetOutOfRange) {
		return 0, 0, false
	}
	if e := api.AsError(err); e.HasRange {
		return e.RangeStart, e.RangeEnd, true
	}
	ti, derr := c.client.DescribeTopic(c.ctx, c.cfg.Topic)
	if derr != nil {
		return 0, 0, false
	}
	for _, pi := range ti.PartitionInfos {
		if pi.Partition == partition {
			return pi.LogStartOffset, pi.HighWatermark, true
		}
	}
	return 0, 0, false
}

// maybeAutoCommit commits the consumed positions when AutoCommit is on and
// AutoCommitInterval has passed since the last commit. Failures are logged
// and retried at a later Poll.
func (c *Consumer) maybeAutoCommit(ctx context.Context) {
	if !c.cfg.AutoCommit || c.cfg.ConsumerGroup == "" {
		return
	}
	c.mu.Lock()
	due := c.cfg.AutoCommitInterval <= 0 || time.Since(c.lastCommit) >= c.cfg.AutoCommitInterval
	c.mu.Unlock()
	if !due {
		return
	}
	if err := c.Commit(ctx); err != nil {
		c.log.Warn("sdk: auto-commit failed", "group", c.cfg.ConsumerGroup, "topic", c.cfg.Topic, "err", err)
	}
}

// Commit commits, for every partition this consumer holds, the position
// after the records returned by Polls so far (at-least-once: commit after
// processing them). Partitions whose position has not changed since the
// last successful commit are skipped. It fails with ErrNoGroup without a
// ConsumerGroup, ErrClosed after Close, api.ErrFencedGeneration when the
// member's generation is stale (a rebalance is under way: the next
// heartbeat brings the new one), or with the server's errors
// (per-partition ones joined).
func (c *Consumer) Commit(ctx context.Context) error {
	if c.cfg.ConsumerGroup == "" {
		return ErrNoGroup
	}
	if c.client.isClosed() {
		return ErrClosed
	}
	return c.commitPartitions(ctx, nil)
}

// commitPartitions commits the consumed positions of ps (nil: every
// partition held).
func (c *Consumer) commitPartitions(ctx context.Context, ps []uint32) error {
	c.mu.Lock()
	if ps == nil {
		for p := range c.consumed {
			ps = append(ps, p)
		}
	}
	var offs []OffsetCommit
	for _, p := range ps {
		pos, ok := c.consumed[p]
		if !ok || pos == math.MaxUint64 {
			// Not held, or "latest" not resolved yet (no fetch answered).
			continue
		}
		if prev, done := c.committed[p]; done && prev == pos {
			continue
		}
		offs = append(offs, OffsetCommit{Topic: c.cfg.Topic, Partition: p, Offset: pos})
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i].Partition < offs[j].Partition })
	g := c.group
	c.lastCommit = time.Now()
	c.mu.Unlock()
	if len(offs) == 0 {
		return nil
	}
	var res []OffsetCommit
	var err error
	if g.memberID == "" {
		res, err = c.client.CommitOffsets(ctx, c.cfg.ConsumerGroup, offs)
	} else {
		res, err = c.client.CommitGroupOffsets(ctx, c.cfg.ConsumerGroup, g.memberID, g.generation, offs)
	}
	if err != nil {
		return fmt.Errorf("sdk: commit group %q: %w", c.cfg.ConsumerGroup, err)
	}
	var errs []error
	c.mu.Lock()
	for i, r := range res {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("partition %d offset %d: %w", r.Partition, r.Offset, r.Err))
			continue
		}
		if i < len(offs) {
			if _, held := c.consumed[offs[i].Partition]; held {
				c.committed[offs[i].Partition] = offs[i].Offset
			}
		}
	}
	c.mu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("sdk: commit group %q: %w", c.cfg.ConsumerGroup, errors.Join(errs...))
	}
	return nil
}

// Close stops reading, commits the consumed positions when AutoCommit is
// on (bounded by RequestTimeout; skipped after Poll returned an error),
// leaves the group so its partitions move at once, and closes the
// connection. It returns the commit's error, if any. Close is idempotent.
func (c *Consumer) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), c.client.cfg.RequestTimeout)
		defer cancel()
		c.mu.Lock()
		failed := c.failed
		c.mu.Unlock()
		if c.cfg.AutoCommit && c.cfg.ConsumerGroup != "" && !failed {
			c.closeErr = c.commitPartitions(ctx, nil)
		}
		c.leave(ctx)
		c.client.Close()
	})
	return c.closeErr
}
