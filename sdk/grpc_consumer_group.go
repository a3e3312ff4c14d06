package sdk

import (
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// grpcGroup is a GrpcConsumer's membership, guarded by GrpcConsumer.mu.
// memberID is empty for a standalone consumer.
type grpcGroup struct {
	memberID   string
	generation int32
	interval   time.Duration
	// left: the member left the group because Poll was not called within
	// MaxPollInterval (memberID is then empty); the heartbeat goroutine
	// joins again once Poll is called.
	left bool
	// revoking holds partitions taken from the member whose goroutines
	// were stopped; the next Poll, Commit or Close commits (with
	// AutoCommit) and releases them, and the heartbeat after reports them
	// no longer owned.
	revoking map[uint32]bool
	// dropped holds partitions lost when the member was fenced or left:
	// their positions are forgotten without committing, and reported by
	// the next Commit as not stored, with dropCause.
	dropped   map[uint32]bool
	dropCause error
	// assigned holds partitions started since the last sync, for
	// OnPartitionsAssigned.
	assigned []uint32
	hbNow    chan struct{}
	// revokeNow wakes an idle Poll to release revoked partitions.
	revokeNow chan struct{}
}

// join joins the group as a new member and returns its assignment of the
// topic. member is false when the server has no group coordinator: the
// consumer then reads every partition as a standalone consumer.
func (c *GrpcConsumer) join(ctx context.Context) (parts []uint32, member bool, err error) {
	r, err := retryUnary(ctx, c.cfg.RequestTimeout, c.groups.JoinGroup, &sqv1.JoinGroupRequest{Group: c.cfg.ConsumerGroup,
		ClientId: c.cfg.ClientID, Topics: []string{c.cfg.Topic}, SessionTimeoutMs: int32(min(c.cfg.SessionTimeout.Milliseconds(), 1<<31-1))})
	if status.Code(err) == codes.Unimplemented {
		c.cfg.Logger.Warn("server has no group coordinator; consuming every partition as a standalone consumer", "group", c.cfg.ConsumerGroup)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	old := c.group // a member joining again keeps what Poll has yet to see
	c.group = grpcGroup{memberID: r.MemberId, generation: r.Generation, interval: time.Duration(r.HeartbeatIntervalMs) * time.Millisecond,
		revoking: map[uint32]bool{}, dropped: old.dropped, dropCause: old.dropCause, assigned: old.assigned, hbNow: old.hbNow, revokeNow: old.revokeNow}
	if c.group.dropped == nil {
		c.group.dropped = map[uint32]bool{}
	}
	if c.group.hbNow == nil {
		c.group.hbNow, c.group.revokeNow = make(chan struct{}, 1), make(chan struct{}, 1)
	}
	c.mu.Unlock()
	parts = topicParts(r.Assignment, c.cfg.Topic)
	c.cfg.Logger.Info("joined group", "group", c.cfg.ConsumerGroup, "member", r.MemberId, "generation", r.Generation, "partitions", parts)
	return parts, true, nil
}

// topicParts returns the sorted partitions of topic in an assignment.
func topicParts(a []*sqv1.TopicPartitions, topic string) []uint32 {
	var out []uint32
	for _, tp := range a {
		if tp.Topic != topic {
			continue
		}
		for _, p := range tp.Partitions {
			out = append(out, uint32(p))
		}
	}
	slices.Sort(out)
	return out
}

// partitionsOf returns the keys of m, sorted.
func partitionsOf[V any](m map[uint32]V) []uint32 {
	out := make([]uint32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// startHeartbeat starts the heartbeat goroutine of a member.
func (c *GrpcConsumer) startHeartbeat() {
	ctx, cancel := context.WithCancel(c.ctx)
	c.hbCancel, c.hbDone = cancel, make(chan struct{})
	go func() {
		defer close(c.hbDone)
		c.heartbeatLoop(ctx)
	}()
}

// stopHeartbeat stops the heartbeat goroutine and waits for it.
func (c *GrpcConsumer) stopHeartbeat() {
	if c.hbCancel != nil {
		c.hbCancel()
		<-c.hbDone
	}
}

// heartbeatLoop heartbeats every interval (or at once after a release)
// until ctx ends. It leaves the group when the application stalls past
// MaxPollInterval, and joins again once Poll is called.
func (c *GrpcConsumer) heartbeatLoop(ctx context.Context) {
	for {
		c.mu.Lock()
		d, now := c.group.interval, c.group.hbNow
		c.mu.Unlock()
		if hb := c.cfg.HeartbeatInterval; hb > 0 && (d <= 0 || hb < d) {
			d = hb
		}
		t := time.NewTimer(max(d, 10*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-now:
			t.Stop()
		}
		if c.leaveIfStalled(ctx) {
			continue
		}
		c.mu.Lock()
		left, stalled := c.group.left, c.stalledLocked()
		c.mu.Unlock()
		if left {
			if !stalled {
				if err := c.rejoin(ctx); err != nil && ctx.Err() == nil {
					c.cfg.Logger.Warn("joining the group again failed; retrying at the next heartbeat", "group", c.cfg.ConsumerGroup, "err", err)
				}
			}
			continue
		}
		if err := c.heartbeat(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("heartbeat failed", "group", c.cfg.ConsumerGroup, "err", err)
		}
	}
}

// owned returns the partitions the member holds: read now or waiting to
// be released; c.mu held.
func (c *GrpcConsumer) ownedLocked() []int32 {
	out := make([]int32, 0, len(c.run.parts)+len(c.group.revoking))
	for p := range c.run.parts {
		out = append(out, int32(p))
	}
	for p := range c.group.revoking {
		out = append(out, int32(p))
	}
	slices.Sort(out)
	return out
}

// heartbeat reports the partitions owned and applies the answer. A fenced
// member stops every partition (Poll forgets their positions without
// committing) and joins again.
func (c *GrpcConsumer) heartbeat(ctx context.Context) error {
	c.mu.Lock()
	g := c.group
	req := &sqv1.HeartbeatRequest{Group: c.cfg.ConsumerGroup, MemberId: g.memberID, Generation: g.generation,
		Owned: []*sqv1.TopicPartitions{{Topic: c.cfg.Topic, Partitions: c.ownedLocked()}}}
	c.mu.Unlock()
	r, err := retryUnary(ctx, c.cfg.RequestTimeout, c.groups.Heartbeat, req)
	if errors.Is(err, api.ErrFencedGeneration) {
		c.cfg.Logger.Warn("removed from the group; dropping its partitions without committing and joining again",
			"group", c.cfg.ConsumerGroup, "member", g.memberID, "err", err)
		c.mu.Lock()
		c.dropAllLocked(err)
		c.mu.Unlock()
		return c.rejoin(ctx)
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.group.memberID == g.memberID {
		c.group.generation = r.Generation
		c.group.interval = time.Duration(r.HeartbeatIntervalMs) * time.Millisecond
	}
	c.mu.Unlock()
	return c.apply(ctx, topicParts(r.Assignment, c.cfg.Topic))
}

// apply makes assigned the partitions read: a partition no longer
// assigned stops being read at once and waits, revoking, for Poll to
// release it; a new one starts at the group's committed offset (else
// StartFrom). A partition still revoking is not restarted: once released,
// the coordinator hands it back at a later heartbeat.
func (c *GrpcConsumer) apply(ctx context.Context, assigned []uint32) error {
	want := map[uint32]bool{}
	for _, p := range assigned {
		want[p] = true
	}
	c.mu.Lock()
	r := c.run
	var added []uint32
	for _, p := range assigned {
		if r.parts[p] == nil && !c.group.revoking[p] {
			added = append(added, p)
		}
	}
	for p, part := range r.parts {
		if !want[p] {
			part.cancel()
			delete(r.parts, p)
			c.group.revoking[p] = true
			select {
			case c.group.revokeNow <- struct{}{}:
			default:
			}
		}
	}
	c.mu.Unlock()
	if len(added) == 0 {
		return nil
	}
	id, starts, _, err := c.startOffsets(ctx, added)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != r || id != r.id || r.ctx.Err() != nil {
		return nil // the run changed meanwhile: the next heartbeat applies again
	}
	for _, p := range added {
		if off, ok := starts[p]; ok && r.parts[p] == nil && !c.group.revoking[p] {
			c.startPartitionLocked(r, p, off)
			c.group.assigned = append(c.group.assigned, p)
		}
	}
	return nil
}

// sync brings Poll's state up to the membership: the positions of
// partitions lost to fencing are forgotten; revoked partitions are
// committed (with AutoCommit) and released, and the coordinator told at
// once; the callbacks run. It does nothing for a standalone consumer.
func (c *GrpcConsumer) sync(ctx context.Context) {
	c.mu.Lock()
	if c.group.memberID == "" && !c.group.left {
		c.mu.Unlock()
		return
	}
	dropped := partitionsOf(c.group.dropped)
	clear(c.group.dropped)
	if len(dropped) > 0 {
		c.noteLostLocked(dropped, c.group.dropCause)
	}
	revoking := partitionsOf(c.group.revoking)
	assigned := c.group.assigned
	c.group.assigned = nil
	hbNow := c.group.hbNow
	c.mu.Unlock()
	c.forget(dropped)
	if len(dropped) > 0 && c.cfg.OnPartitionsRevoked != nil {
		c.cfg.OnPartitionsRevoked(dropped)
	}
	if len(revoking) > 0 {
		if c.cfg.AutoCommit {
			if err := c.commitPositions(ctx, revoking); err != nil {
				c.cfg.Logger.Warn("commit of revoked partitions failed", "group", c.cfg.ConsumerGroup, "partitions", revoking, "err", err)
				c.mu.Lock()
				c.noteLostLocked(revoking, err)
				c.mu.Unlock()
			}
		}
		c.forget(revoking)
		c.mu.Lock()
		for _, p := range revoking {
			delete(c.group.revoking, p)
		}
		c.mu.Unlock()
		c.cfg.Logger.Info("partitions revoked", "group", c.cfg.ConsumerGroup, "partitions", revoking)
		select {
		case hbNow <- struct{}{}:
		default:
		}
		if c.cfg.OnPartitionsRevoked != nil {
			c.cfg.OnPartitionsRevoked(revoking)
		}
	}
	if len(assigned) > 0 {
		slices.Sort(assigned)
		c.cfg.Logger.Info("partitions assigned", "group", c.cfg.ConsumerGroup, "partitions", assigned)
		if c.cfg.OnPartitionsAssigned != nil {
			c.cfg.OnPartitionsAssigned(assigned)
		}
	}
}

// current reports whether b comes from the partition goroutine reading
// its partition now.
func (c *GrpcConsumer) current(b grpcBatch) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run.parts[b.p] == b.part
}

// addPending queues the records of b.
func (c *GrpcConsumer) addPending(b grpcBatch) {
	c.pending = append(c.pending, b.msgs...)
	for range b.msgs {
		c.pendingPart = append(c.pendingPart, b.part)
	}
}

// dropStale removes the pending records of partition goroutines stopped
// since they were read (the partition was revoked or the member fenced):
// they are not returned, and the group's next reader of the partition
// reads them from the committed offset.
func (c *GrpcConsumer) dropStale() {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for i, m := range c.pending {
		if c.run.parts[m.Partition] == c.pendingPart[i] {
			c.pending[n], c.pendingPart[n] = m, c.pendingPart[i]
			n++
		}
	}
	clear(c.pending[n:])
	clear(c.pendingPart[n:])
	c.pending, c.pendingPart = c.pending[:n], c.pendingPart[:n]
}

// Assignment returns the partitions the consumer reads now, sorted: every
// partition of the topic for a standalone consumer, the group's
// assignment for a member.
func (c *GrpcConsumer) Assignment() []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return partitionsOf(c.run.parts)
}

// leave leaves the group at Close so that the partitions move at once. It
// is skipped when ctx, Close's budget, is spent: the session timeout
// removes the member.
func (c *GrpcConsumer) leave(ctx context.Context) {
	c.mu.Lock()
	id := c.group.memberID
	c.mu.Unlock()
	if id == "" {
		return
	}
	if ctx.Err() != nil {
		c.cfg.Logger.Warn("close budget spent; not leaving the group, the session timeout will remove the member", "group", c.cfg.ConsumerGroup, "err", context.Cause(ctx))
		return
	}
	if _, err := unary(ctx, c.cfg.RequestTimeout, c.groups.LeaveGroup, &sqv1.LeaveGroupRequest{Group: c.cfg.ConsumerGroup, MemberId: id}); err != nil {
		c.cfg.Logger.Warn("leave group failed; the session timeout will remove the member", "group", c.cfg.ConsumerGroup, "err", err)
	}
}
