package sdk

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
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
	due := c.cfg.AutoCommitInterval <= 0 || c.cfg.now().Sub(c.lastCommit) >= c.cfg.AutoCommitInterval
	c.mu.Unlock()
	if !due {
		return
	}
	// Positions lost to a fence stay pending for the application's
	// Commit or Close: the auto-commit only logs its own failures.
	if err := c.commitPartitions(ctx, nil); err != nil {
		c.log.Warn("sdk: auto-commit failed", "group", c.cfg.ConsumerGroup, "topic", c.cfg.Topic, "err", err)
	}
}

// Commit commits, for every partition this consumer holds, the position
// after the records returned by Polls so far (at-least-once: commit after
// processing them), or with AutoCommitMarked the position after the last
// record passed to MarkProcessed. Partitions whose position has not
// changed since the last successful commit are skipped. It fails with ErrNoGroup without a
// ConsumerGroup, ErrClosed after Close, api.ErrFencedGeneration when the
// member's generation is stale (a rebalance is under way: the next
// heartbeat brings the new one) or the member is unknown (for example
// after a broker restart: the consumer joins again at once), or with the
// server's errors (per-partition ones joined).
//
// Commit never reports success for positions that were not stored: when
// the member was removed from the group (session expired, broker
// restarted) after Poll had returned records it had not committed, its
// partitions are dropped and read again from the group's committed
// offsets after it rejoins, and the next Commit fails, wrapping the cause
// (api.ErrFencedGeneration), and names the partitions and positions that
// were not stored. The same holds when the automatic commit of a revoked
// partition failed, and when the member left the group because Poll was
// not called within MaxPollInterval (the cause is then
// ErrMaxPollIntervalExceeded). Such a loss is reported once; a later
// commit that stores the partition at or past the lost position clears it.
func (c *Consumer) Commit(ctx context.Context) error {
	if c.cfg.ConsumerGroup == "" {
		return ErrNoGroup
	}
	if c.client.isClosed() {
		return ErrClosed
	}
	err := c.commitPartitions(ctx, nil)
	return joinLost(c.takeLost(), err)
}

// joinLost joins the report of lost positions with a commit's error.
func joinLost(lost, err error) error {
	if lost == nil {
		return err
	}
	if err == nil {
		return lost
	}
	return errors.Join(lost, err)
}

// noteLost records, with cause, the positions of ps that have records
// returned by Poll and not stored (ps nil: every partition held); c.mu
// held.
func (c *Consumer) noteLost(ps []uint32, cause error) {
	if ps == nil {
		for p := range c.consumed {
			ps = append(ps, p)
		}
	}
	for _, p := range ps {
		pos, ok := c.commitPos(p)
		if !ok || !c.returned[p] {
			continue
		}
		if prev, done := c.committed[p]; done && prev == pos {
			continue
		}
		c.lost[p] = pos
		c.lostID[p] = c.posID[p]
		c.lostErr = cause
	}
}

// takeLost returns the error reporting the positions that were never
// stored, and forgets them; nil when there are none.
func (c *Consumer) takeLost() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lost) == 0 {
		return nil
	}
	ps := make([]uint32, 0, len(c.lost))
	for p := range c.lost {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	desc := ""
	for i, p := range ps {
		if i > 0 {
			desc += ", "
		}
		desc += fmt.Sprintf("%d@%d", p, c.lost[p])
	}
	err := fmt.Errorf("sdk: commit group %q: positions (partition@offset) %s of topic %q were not stored: %w; "+
		"records after the group's committed offsets are read again", c.cfg.ConsumerGroup, desc, c.cfg.Topic, c.lostErr)
	clear(c.lost)
	clear(c.lostID)
	c.lostErr = nil
	return err
}

// forgetLostOfOtherTopicsLocked drops the lost positions of topic ids
// other than id: they belong to a topic deleted since (the member was
// fenced, by a broker restart say, before the consumer saw the delete).
// Nothing can store them, nor read those records again, so they are not
// reported, as for a revoked partition of a deleted topic. c.mu held.
func (c *Consumer) forgetLostOfOtherTopicsLocked(id api.TopicID) {
	for p, lid := range c.lostID {
		if !lid.IsZero() && lid != id {
			delete(c.lost, p)
			delete(c.lostID, p)
		}
	}
	if len(c.lost) == 0 {
		c.lostErr = nil
	}
}

// commitPos returns the position a commit stores for partition p: after
// the records returned by Poll, or with AutoCommitMarked after the last
// marked record (never beyond what Poll returned). It returns false when
// there is nothing to commit: p not held, nothing marked, or "latest" not
// resolved yet (no read answered). c.mu held.
func (c *Consumer) commitPos(p uint32) (uint64, bool) {
	pos, ok := c.consumed[p]
	return commitPosition(pos, ok && pos != math.MaxUint64, c.cfg.AutoCommitMarked, c.marked, p)
}

// commitPartitions commits the positions (commitPos) of ps (nil: every
// partition held). Only a successful commit of every partition restarts
// the auto-commit interval: committing the partitions of a revocation, or
// a failed commit, leaves the next auto-commit due.
func (c *Consumer) commitPartitions(ctx context.Context, ps []uint32) error {
	all := ps == nil
	started := c.cfg.now()
	c.mu.Lock()
	if ps == nil {
		for p := range c.consumed {
			ps = append(ps, p)
		}
	}
	var offs []OffsetCommit
	for _, p := range ps {
		pos, ok := c.commitPos(p)
		if !ok {
			continue
		}
		if prev, done := c.committed[p]; done && prev == pos {
			continue
		}
		offs = append(offs, OffsetCommit{Topic: c.cfg.Topic, TopicID: c.posID[p], Partition: p, Offset: pos})
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i].Partition < offs[j].Partition })
	g := c.group
	if g.left {
		// Left the group after MaxPollInterval: nothing is held.
		offs = nil
	}
	if all && len(offs) == 0 {
		c.lastCommit = started
	}
	c.mu.Unlock()
	if len(offs) == 0 {
		return nil
	}
	err := c.sendCommits(ctx, g, offs)
	if all && err == nil {
		c.mu.Lock()
		c.lastCommit = started
		c.mu.Unlock()
	}
	return err
}

// sendCommits stores offs as member g (standalone without a member id)
// and records what was stored. Per-partition failures are joined.
func (c *Consumer) sendCommits(ctx context.Context, g groupState, offs []OffsetCommit) error {
	var res []OffsetCommit
	err := retryCoordinator(ctx, c.client.cfg.RequestTimeout, func() error {
		var err error
		if g.memberID == "" {
			res, err = c.client.commitOffsets(ctx, c.cfg.ConsumerGroup, "", -1, offs)
		} else {
			res, err = c.client.CommitGroupOffsets(ctx, c.cfg.ConsumerGroup, g.memberID, g.generation, offs)
		}
		return err
	})
	if err != nil {
		if errors.Is(err, api.ErrFencedGeneration) {
			notify(c.hbNow) // the heartbeat brings the generation, or joins again
		}
		return fmt.Errorf("sdk: commit group %q: %w", c.cfg.ConsumerGroup, err)
	}
	if len(res) != len(offs) {
		return fmt.Errorf("sdk: commit group %q: %w: %d results for %d offsets", c.cfg.ConsumerGroup, ErrUnexpectedResponse, len(res), len(offs))
	}
	var errs []error
	c.mu.Lock()
	for i, r := range res {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("partition %d offset %d: %w", r.Partition, r.Offset, r.Err))
			if errors.Is(r.Err, api.ErrUnknownTopicID) {
				c.restartPending = true // the topic was deleted: start over
				notify(c.restartCh)
			}
			continue
		}
		p, off := offs[i].Partition, offs[i].Offset
		if pos, held := c.consumed[p]; held {
			c.committed[p] = off
			if pos == off {
				delete(c.returned, p)
			}
		}
		if lost, ok := c.lost[p]; ok && off >= lost {
			delete(c.lost, p)
			delete(c.lostID, p)
		}
	}
	c.mu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("sdk: commit group %q: %w", c.cfg.ConsumerGroup, errors.Join(errs...))
	}
	return nil
}

// CloseCommitError is the error of a consumer's Close when its final
// commit did not store every position it was to store: the server did not
// answer within the close budget (CloseTimeout, or CloseContext's
// context), could not be reached, or refused the commit. The records after
// the group's committed offsets are read again by the member that gets
// the partitions next. errors.Is and errors.As see Err, the cause
// (context.DeadlineExceeded, ErrConnection, api.ErrFencedGeneration, ...).
type CloseCommitError struct {
	// Group and Topic are the consumer's.
	Group, Topic string
	// Positions maps each partition whose position was not stored to
	// that position (the offset after the records returned, or marked).
	Positions map[uint32]uint64
	// Err is why the commit did not store them.
	Err error
}

// Error says how many partitions' positions were not committed, which, and
// why.
func (e *CloseCommitError) Error() string {
	ps := make([]uint32, 0, len(e.Positions))
	for p := range e.Positions {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d@%d", p, e.Positions[p])
	}
	return fmt.Sprintf("sdk: close: the positions of %d partitions of topic %q (partition@offset %s) were not committed to group %q: %v",
		len(ps), e.Topic, b.String(), e.Group, e.Err)
}

// Unwrap returns the cause.
func (e *CloseCommitError) Unwrap() error { return e.Err }

// closeBudget returns the context of a Close: ctx, also bounded by d when
// d is positive.
func closeBudget(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// budgetErr names CloseTimeout in err when the close budget ended by it
// (ctx done, parent not).
func budgetErr(parent, ctx context.Context, d time.Duration, err error) error {
	if ctx.Err() != nil && parent.Err() == nil {
		return fmt.Errorf("CloseTimeout %v spent: %w", d, err)
	}
	return err
}

// Close is CloseContext without a deadline of its own: it returns within
// CloseTimeout (default 10s).
func (c *Consumer) Close() error {
	return c.CloseContext(context.Background())
}

// CloseContext stops reading, commits when AutoCommit is on (skipped when
// the last Poll returned an error, not when a later Poll went on): the
// positions after the records returned by Poll, or with AutoCommitMarked
// after the marked ones. It then leaves the group so its partitions move
// at once, and closes the connection.
//
// The commit and the leave share one budget, from the call on:
// CloseTimeout and ctx, whichever ends first (as the timeout of Kafka's
// consumer close). When the commit does not store every position within
// it, CloseContext returns a *CloseCommitError naming the partitions whose
// positions were not committed and wrapping the cause (for a server that
// stopped answering, context.DeadlineExceeded, or ctx's error): it never
// returns nil while a position was not stored. Positions lost earlier (see
// Commit) are reported with it. Leaving the group is best effort: skipped
// once the budget is spent, its failure only logged; the session timeout
// then removes the member.
//
// Close and CloseContext are idempotent (a later call returns the first
// one's error); after CloseWithoutCommit they do nothing.
func (c *Consumer) CloseContext(ctx context.Context) error {
	c.close(ctx, true)
	return c.closeErr
}

// CloseWithoutCommit is Close without the commit, whatever AutoCommit
// says: for an application that failed while processing what Poll
// returned and wants those records read again (by the member that gets
// the partitions next, from the group's committed offsets) rather than
// counted as done. It leaves the group (best effort, within CloseTimeout)
// and closes the connection; after Close it does nothing.
func (c *Consumer) CloseWithoutCommit() {
	c.close(context.Background(), false)
}

// close stops reading, commits (with AutoCommit, when commit is set),
// leaves the group and closes the connection, once, within the budget of
// parent and CloseTimeout.
func (c *Consumer) close(parent context.Context, commit bool) {
	c.closeOnce.Do(func() {
		ctx, cancel := closeBudget(parent, c.cfg.CloseTimeout)
		defer cancel()
		c.cancel()
		c.wg.Wait()
		c.mu.Lock()
		failed := c.failed
		c.mu.Unlock()
		if commit && c.cfg.AutoCommit && c.cfg.ConsumerGroup != "" && !failed {
			var cerr error
			if err := c.commitPartitions(ctx, nil); err != nil {
				cerr = &CloseCommitError{Group: c.cfg.ConsumerGroup, Topic: c.cfg.Topic, Positions: c.uncommitted(),
					Err: budgetErr(parent, ctx, c.cfg.CloseTimeout, err)}
			}
			c.closeErr = joinLost(c.takeLost(), cerr)
		}
		c.leave(ctx)
		c.core.close()
	})
}

// uncommitted returns the positions a commit of every partition held
// would store that the group does not have (as commitPartitions picks
// them).
func (c *Consumer) uncommitted() map[uint32]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[uint32]uint64{}
	for p := range c.consumed {
		pos, ok := c.commitPos(p)
		if !ok {
			continue
		}
		if prev, done := c.committed[p]; done && prev == pos {
			continue
		}
		out[p] = pos
	}
	return out
}
