package sdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/seedqueue/sq/api"
)

// groupState is the consumer's membership, guarded by Consumer.mu.
// memberID is empty for a standalone consumer, and after the member left
// the group because Poll was not called within MaxPollInterval (left).
type groupState struct {
	memberID   string
	generation int32
	interval   time.Duration
	left       bool // left after MaxPollInterval; the next Poll rejoins
}

// join joins the group and starts reading the assigned partitions. It
// returns false, nil when the server has no coordinator (the consumer
// then runs standalone).
func (c *Consumer) join(ctx context.Context) (bool, error) {
	var m GroupMembership
	err := retryCoordinator(ctx, c.client.cfg.RequestTimeout, func() error {
		var err error
		m, err = c.client.JoinGroup(ctx, c.cfg.ConsumerGroup, "", []string{c.cfg.Topic}, c.cfg.SessionTimeout)
		return err
	})
	if errors.Is(err, api.ErrInvalidRequest) {
		c.log.Warn("sdk: server has no group coordinator; consuming every partition as a standalone consumer", "group", c.cfg.ConsumerGroup)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	c.group = groupState{memberID: m.MemberID, generation: m.Generation, interval: m.HeartbeatInterval}
	c.mu.Unlock()
	c.log.Info("sdk: joined group", "group", c.cfg.ConsumerGroup, "member", m.MemberID, "generation", m.Generation, "partitions", m.Assignment[c.cfg.Topic])
	return true, c.apply(ctx, m.Assignment[c.cfg.Topic])
}

// heartbeatLoop heartbeats every interval (or at once when asked) and
// applies the assignment of each answer, until Close. It leaves the group
// when the application stalls past MaxPollInterval, and joins again once
// Poll is called.
func (c *Consumer) heartbeatLoop() {
	for {
		c.mu.Lock()
		d := c.group.interval
		c.mu.Unlock()
		if hb := c.cfg.HeartbeatInterval; hb > 0 && (d <= 0 || hb < d) {
			d = hb
		}
		t := time.NewTimer(max(d, 10*time.Millisecond))
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-c.hbNow:
			t.Stop()
		case <-c.restartCh:
			t.Stop()
		}
		if c.restartDue() {
			// A failure (the topic does not exist yet) is retried at
			// the next tick.
			_ = c.restartTopic()
		}
		if c.leaveIfStalled() {
			continue
		}
		c.mu.Lock()
		left, stalled := c.group.left, c.stalledLocked()
		c.mu.Unlock()
		if left {
			if !stalled {
				c.rejoin()
			}
			continue
		}
		if err := c.heartbeat(); err != nil && c.ctx.Err() == nil {
			c.log.Warn("sdk: heartbeat failed", "group", c.cfg.ConsumerGroup, "err", err)
		}
	}
}

// stalledLocked reports whether the application has not called Poll for
// longer than MaxPollInterval; c.mu held.
func (c *Consumer) stalledLocked() bool {
	return c.cfg.MaxPollInterval > 0 && !c.polling && c.cfg.now().Sub(c.lastPoll) > c.cfg.MaxPollInterval
}

// leaveIfStalled leaves the group when the member has not polled within
// MaxPollInterval (as Kafka's max.poll.interval.ms, KIP-62): its
// partitions are dropped without committing (positions returned by Poll
// and not committed are recorded as lost) and the coordinator moves them
// at once. It reports whether it left.
func (c *Consumer) leaveIfStalled() bool {
	c.mu.Lock()
	g := c.group
	if g.memberID == "" || !c.stalledLocked() {
		c.mu.Unlock()
		return false
	}
	idle := c.cfg.now().Sub(c.lastPoll).Round(time.Millisecond)
	c.group = groupState{interval: g.interval, left: true}
	c.mu.Unlock()
	cause := fmt.Errorf("%w: no Poll for %v (MaxPollInterval %v)", ErrMaxPollIntervalExceeded, idle, c.cfg.MaxPollInterval)
	c.log.Warn("sdk: Poll not called within MaxPollInterval; leaving the group so its partitions move, "+
		"without committing records returned since the last commit (the next Poll joins again)",
		"group", c.cfg.ConsumerGroup, "member", g.memberID, "since_last_poll", idle,
		"max_poll_interval", c.cfg.MaxPollInterval, "partitions", c.owned())
	c.dropAll(cause)
	ctx, cancel := context.WithTimeout(c.ctx, c.client.cfg.RequestTimeout)
	defer cancel()
	if err := c.client.LeaveGroup(ctx, c.cfg.ConsumerGroup, g.memberID); err != nil && c.ctx.Err() == nil {
		c.log.Warn("sdk: leave group failed; the session timeout will remove the member", "group", c.cfg.ConsumerGroup, "err", err)
	}
	return true
}

// rejoin joins the group again after leaveIfStalled, once Poll was
// called. A failure is logged and retried at the next heartbeat tick.
func (c *Consumer) rejoin() {
	ctx, cancel := context.WithTimeout(c.ctx, c.client.cfg.RequestTimeout)
	defer cancel()
	if _, err := c.join(ctx); err != nil && c.ctx.Err() == nil {
		c.log.Warn("sdk: joining the group again failed; retrying", "group", c.cfg.ConsumerGroup, "err", err)
	}
}

// pollStarted and pollEnded mark Poll's activity for MaxPollInterval; a
// member that left the group is asked to join again at once.
func (c *Consumer) pollStarted() {
	c.mu.Lock()
	c.polling, c.lastPoll = true, c.cfg.now()
	left := c.group.left
	c.mu.Unlock()
	if left {
		notify(c.hbNow)
	}
}

func (c *Consumer) pollEnded() {
	c.mu.Lock()
	c.polling, c.lastPoll = false, c.cfg.now()
	c.mu.Unlock()
}

// owned returns the partitions this member holds: read now or waiting to
// be released.
func (c *Consumer) owned() []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]uint32(nil), c.order...)
	for p := range c.revoking {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (c *Consumer) heartbeat() error {
	ctx, cancel := context.WithTimeout(c.ctx, c.client.cfg.RequestTimeout)
	defer cancel()
	c.mu.Lock()
	g := c.group
	c.mu.Unlock()
	var m GroupMembership
	err := retryCoordinator(ctx, c.client.cfg.RequestTimeout, func() error {
		var err error
		m, err = c.client.Heartbeat(ctx, c.cfg.ConsumerGroup, g.memberID, g.generation, Assignment{c.cfg.Topic: c.owned()})
		return err
	})
	if errors.Is(err, api.ErrFencedGeneration) {
		// Removed (session expired): the partitions may be another
		// member's already. Drop them without committing and join again.
		c.log.Warn("sdk: removed from the group; joining again", "group", c.cfg.ConsumerGroup, "member", g.memberID, "err", err)
		c.dropAll(err)
		_, err = c.join(ctx)
		return err
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.group.generation, c.group.interval = m.Generation, m.HeartbeatInterval
	c.mu.Unlock()
	return c.apply(ctx, m.Assignment[c.cfg.Topic])
}

// apply makes the assignment current: new partitions start reading at the
// committed offset; revoked ones stop being read and, with AutoCommit,
// wait for Poll to commit and release them (without AutoCommit they are
// released at once).
func (c *Consumer) apply(ctx context.Context, assigned []uint32) error {
	want := map[uint32]bool{}
	for _, p := range assigned {
		want[p] = true
	}
	c.mu.Lock()
	var added, revoked []uint32
	var dones []chan struct{}
	for _, p := range assigned {
		switch {
		case c.revoking[p]:
			// Given back before it was released: go on from the position.
			delete(c.revoking, p)
			c.startFetcher(p, c.consumed[p])
		case c.parts[p] == nil:
			added = append(added, p)
		}
	}
	for _, p := range append([]uint32(nil), c.order...) {
		if !want[p] {
			dones = append(dones, c.stopFetcher(p))
			revoked = append(revoked, p)
			c.revoking[p] = true
		}
	}
	c.mu.Unlock()
	for _, d := range dones {
		<-d
	}
	if len(revoked) > 0 {
		c.log.Info("sdk: partitions revoked", "group", c.cfg.ConsumerGroup, "partitions", revoked)
		if c.cfg.AutoCommit {
			notify(c.revoke) // Poll commits and releases them
		} else {
			c.release(revoked)
		}
	}
	if len(added) == 0 {
		return nil
	}
	slices.Sort(added)
	if c.cfg.OnPartitionsAssigned != nil {
		// Poll returns no record of an added partition before the
		// callback named it, as Kafka's rebalance listener.
		c.withhold(added, true)
		defer c.withhold(added, false)
	}
	if err := c.assign(ctx, added, TopicInfo{}); err != nil {
		return err
	}
	c.log.Info("sdk: partitions assigned", "group", c.cfg.ConsumerGroup, "partitions", added)
	if c.cfg.OnPartitionsAssigned != nil {
		c.cfg.OnPartitionsAssigned(added)
	}
	return nil
}

// withhold keeps Poll from returning the records of ps (on), or lets it
// again (off) and wakes a Poll waiting for records.
func (c *Consumer) withhold(ps []uint32, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.withheld == nil {
		c.withheld = map[uint32]bool{}
	}
	for _, p := range ps {
		if on {
			c.withheld[p] = true
		} else {
			delete(c.withheld, p)
		}
	}
	if !on {
		notify(c.ready)
	}
}

// releaseRevoked commits (with AutoCommit) and releases the revoked
// partitions. Poll calls it: the records it returned before have been
// processed, so the commit covers exactly them.
func (c *Consumer) releaseRevoked(ctx context.Context) {
	c.mu.Lock()
	var ps []uint32
	for p := range c.revoking {
		ps = append(ps, p)
	}
	c.mu.Unlock()
	if len(ps) == 0 {
		return
	}
	if c.cfg.AutoCommit {
		if err := c.commitPartitions(ctx, ps); err != nil {
			c.log.Warn("sdk: commit of revoked partitions failed", "group", c.cfg.ConsumerGroup, "partitions", ps, "err", err)
			// Positions of a deleted topic can never be stored, nor read
			// again: they are not reported as lost.
			if !errors.Is(err, api.ErrUnknownTopicID) {
				c.mu.Lock()
				c.noteLost(ps, err) // reported by the next Commit or Close
				c.mu.Unlock()
			}
		}
	}
	c.release(ps)
}

// release forgets revoked partitions and heartbeats at once so that the
// coordinator can hand them over. A partition given back while Poll was
// committing it (apply resumed reading it) is not released: its position
// and commit state stay, and OnPartitionsRevoked does not name it.
func (c *Consumer) release(ps []uint32) {
	c.mu.Lock()
	var gone []uint32
	for _, p := range ps {
		if !c.revoking[p] {
			continue
		}
		gone = append(gone, p)
		delete(c.revoking, p)
		delete(c.consumed, p)
		delete(c.committed, p)
		delete(c.returned, p)
		delete(c.marked, p)
		delete(c.from, p)
		delete(c.posID, p)
	}
	c.mu.Unlock()
	notify(c.hbNow)
	slices.Sort(gone)
	if len(gone) > 0 && c.cfg.OnPartitionsRevoked != nil {
		c.cfg.OnPartitionsRevoked(gone)
	}
}

// dropAll stops reading every partition without committing: the member
// was fenced (cause). Positions after records returned by Poll and not
// committed are recorded as lost, for Commit to report.
func (c *Consumer) dropAll(cause error) {
	c.stopAll()
	c.mu.Lock()
	var ps []uint32
	for p := range c.consumed {
		ps = append(ps, p)
	}
	c.noteLost(nil, cause)
	clear(c.revoking)
	clear(c.consumed)
	clear(c.committed)
	clear(c.returned)
	clear(c.marked)
	clear(c.from)
	clear(c.posID)
	c.mu.Unlock()
	slices.Sort(ps)
	if len(ps) > 0 && c.cfg.OnPartitionsRevoked != nil {
		c.cfg.OnPartitionsRevoked(ps)
	}
}

// leave leaves the group at Close, so partitions move at once. It is
// skipped when ctx, Close's budget, is spent, and while the server cannot be reached (the client's last dial
// failed and it has no connection): waiting out the reconnection backoff
// would delay Close for a request that cannot succeed, and the session
// timeout removes the member anyway.
func (c *Consumer) leave(ctx context.Context) {
	c.mu.Lock()
	id := c.group.memberID
	c.mu.Unlock()
	if id == "" {
		return
	}
	if ctx.Err() != nil {
		c.log.Warn("sdk: close budget spent; not leaving the group, the session timeout will remove the member", "group", c.cfg.ConsumerGroup, "err", context.Cause(ctx))
		return
	}
	if c.client.unreachable() {
		c.log.Warn("sdk: server unreachable at Close; not leaving the group, the session timeout will remove the member", "group", c.cfg.ConsumerGroup, "addr", c.client.cfg.Addr)
		return
	}
	if err := c.client.LeaveGroup(ctx, c.cfg.ConsumerGroup, id); err != nil {
		c.log.Warn("sdk: leave group failed; the session timeout will remove the member", "group", c.cfg.ConsumerGroup, "err", err)
	}
}

// unreachable reports whether the client has no usable connection and its
// last dial failed, so that its next request would first wait out the
// reconnection backoff.
func (c *Client) unreachable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failures > 0 && (c.cur == nil || c.cur.broken())
}
