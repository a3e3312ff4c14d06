// The follower's side of a replicated partition (docs/architecture.md
// §3.10): appending what the leader sent, truncating a divergent suffix,
// starting over at the leader's log start, and repairing a replica the
// scrub found damaged.

package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine/replica"
	"github.com/seedqueue/sq/segment"
)

// LocalEpochs returns a copy of the partition's leader-epoch cache, which
// a follower passes to replica.TruncationOffset with the leader's
// EndOffsetForEpoch answer for its latest epoch. Errors:
// UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC, UNKNOWN_PARTITION, the partition's
// error when it failed to open, INVALID_REQUEST without
// Options.Replication.
func (e *Engine) LocalEpochs(topic string, id api.TopicID, partition int) (*replica.EpochCache, error) {
	_, r, err := e.replicated(topic, id, partition)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cache.Clone(), nil
}

// AppendReplica appends on a follower batches fetched from the
// partition's leader, keeping the offsets and leader epochs the leader
// gave them: the first batch must start at the log end offset and each
// next one where the one before ends (else OFFSET_OUT_OF_RANGE with the
// log's range, nothing written). Each batch is checked as a publish is
// (CORRUPT_BATCH, MESSAGE_TOO_LARGE), and its leader epoch must not be
// below the latest epoch in the leader-epoch cache nor above the
// partition's current epoch (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH); a
// batch of a newer epoch than the cache's latest records it, durably,
// before the batch is written. The batches are synced as the topic's sync
// policy says, and the high watermark becomes min(leaderHW, log end
// offset). batches may be empty (to pass on leaderHW). It returns the
// replica's state after the append. Errors also: NOT_LEADER when this node
// is not a follower (the leader never takes replica appends),
// STORAGE_ERROR, DISK_FULL, PARTITION_FAILED, UNKNOWN_TOPIC_ID,
// UNKNOWN_TOPIC, UNKNOWN_PARTITION, SHUTTING_DOWN, INVALID_REQUEST
// without Options.Replication, or ctx's error (before anything is
// queued).
func (e *Engine) AppendReplica(ctx context.Context, topic string, id api.TopicID, partition int, batches [][]byte, leaderHW uint64) (ReplicaState, error) {
	t, _, err := e.partitionID(topic, id, partition)
	if err != nil {
		return ReplicaState{}, err
	}
	p, r, err := e.replicated(topic, id, partition)
	if err != nil {
		return ReplicaState{}, err
	}
	limits := t.state.Load().limits
	size := 0
	for i, b := range batches {
		if _, err := batch.Validate(b, limits); err != nil {
			if errors.Is(err, batch.ErrTooLarge) {
				return ReplicaState{}, api.WrapError(api.CodeMessageTooLarge, err, "replica batch %d of %s/%d", i, topic, partition)
			}
			return ReplicaState{}, api.WrapError(api.CodeCorruptBatch, err, "replica batch %d of %s/%d", i, topic, partition)
		}
		size += len(b)
	}
	if err := ctx.Err(); err != nil {
		return ReplicaState{}, err
	}
	if size > 0 && !IsInternalTopic(p.topic) { // group commits pass the floor, as on the leader
		if err := e.disk.admit(size, p.spare); err != nil {
			return ReplicaState{}, err
		}
	}
	var st ReplicaState
	err = p.onAppend(func() error {
		var err error
		st, err = p.appendReplica(r, batches, leaderHW)
		return err
	})
	return st, err
}

// appendReplica is AppendReplica on the append goroutine.
func (p *partition) appendReplica(r *replState, batches [][]byte, leaderHW uint64) (ReplicaState, error) {
	if e := p.failed.Load(); e != nil {
		return ReplicaState{}, e
	}
	r.mu.Lock()
	if r.role != roleFollower {
		err := api.NewError(api.CodeNotLeader, "%s/%d takes replica appends only as a follower (leader epoch %d)", p.topic, p.id, r.epoch)
		r.mu.Unlock()
		return ReplicaState{}, err
	}
	leo := p.log.NextOffset()
	next := leo
	latest, known := r.cache.Latest()
	cur := latest.Epoch
	var assign []replica.EpochEntry
	for i, b := range batches {
		h, _ := batch.ParseHeader(b)
		switch {
		case h.BaseOffset != next:
			r.mu.Unlock()
			return ReplicaState{}, api.NewRangeError(api.CodeOffsetOutOfRange, p.log.LogStartOffset(), leo,
				"replica batch %d of %s/%d starts at offset %d, the log needs %d", i, p.topic, p.id, h.BaseOffset, next)
		case known && h.LeaderEpoch < cur:
			r.mu.Unlock()
			return ReplicaState{}, api.NewError(api.CodeFencedLeaderEpoch, "replica batch at offset %d of %s/%d has leader epoch %d, below the log's %d", h.BaseOffset, p.topic, p.id, h.LeaderEpoch, cur)
		case h.LeaderEpoch > r.epoch:
			r.mu.Unlock()
			return ReplicaState{}, api.NewError(api.CodeUnknownLeaderEpoch, "replica batch at offset %d of %s/%d has leader epoch %d, newer than the current %d", h.BaseOffset, p.topic, p.id, h.LeaderEpoch, r.epoch)
		}
		if !known || h.LeaderEpoch > cur {
			assign = append(assign, replica.EpochEntry{Epoch: h.LeaderEpoch, StartOffset: h.BaseOffset})
			known, cur = true, h.LeaderEpoch
		}
		next = h.NextOffset()
	}
	if len(assign) > 0 {
		prev := *r.cache.Clone()
		for _, a := range assign {
			r.cache.Assign(a.Epoch, a.StartOffset)
		}
		// Before the batches: an entry without its batches is dropped at
		// the next open (it starts at or after the log end), batches
		// without their entry would be mis-attributed to an older epoch.
		if err := p.writeEpochs(r); err != nil {
			r.cache = prev
			r.mu.Unlock()
			return ReplicaState{}, err
		}
	}
	r.mu.Unlock()
	if len(batches) > 0 {
		if _, err := p.log.AppendReplica(batches, p.now().UnixMilli()); err != nil {
			if errors.Is(err, segment.ErrFailed) {
				e := api.WrapError(api.CodePartitionFailed, err, "partition %s/%d", p.topic, p.id)
				p.fail(e)
				return ReplicaState{}, e
			}
			p.logger.Warn("replica append failed", "batches", len(batches), "err", err)
			return ReplicaState{}, storageError(fmt.Sprintf("replica append to %s/%d", p.topic, p.id), err)
		}
		// Written: the follower holds the producers' state its leader
		// holds (producers.go), so that it can take over.
		p.observeProducers(batches)
		if err := p.syncPerPolicy(len(batches)); err != nil {
			return ReplicaState{}, err
		}
		p.localAdvanced(p.log.NextOffset(), p.policy.Load().Mode == SyncEveryBatch)
	}
	leo = p.log.NextOffset()
	r.mu.Lock()
	// The high watermark never moves back but through a truncation.
	if hw := replica.FollowerHighWatermark(leaderHW, leo); hw > p.hw.Load() {
		p.hw.Store(hw)
	}
	if r.corrupt != nil && r.repaired && leo >= leaderHW {
		p.logger.Info("replica repaired: the damaged segment was cut and fetched again from the leader", "log_end", leo, "leader_high_watermark", leaderHW)
		r.corrupt, r.repaired = nil, false
	}
	r.mu.Unlock()
	p.wake()
	return p.replicaState(r), nil
}

// TruncateTo cuts the partition's log on a follower at offset, a batch
// boundary (KIP-101: the divergent suffix after a leader change): the
// log's batches at or after offset are removed durably
// (segment.Log.TruncateTo), then the leader-epoch cache entries starting
// at or after offset, and the high watermark and durable log end offset
// fall to at most offset (a replica never exposes a high watermark above
// what it has truncated under, KAFKA-14704). offset at the log end changes
// nothing. Errors: INVALID_REQUEST on the leader (a leader never
// truncates its log), OFFSET_OUT_OF_RANGE (offset outside the log,
// or inside a batch), PARTITION_FAILED (a failure halfway through fails
// the partition until restart), STORAGE_ERROR, UNKNOWN_TOPIC_ID,
// UNKNOWN_TOPIC, UNKNOWN_PARTITION, SHUTTING_DOWN.
func (e *Engine) TruncateTo(topic string, id api.TopicID, partition int, offset uint64) error {
	p, r, err := e.replicated(topic, id, partition)
	if err != nil {
		return err
	}
	return p.onAppend(func() error { return p.truncateTo(r, offset) })
}

// mayCut refuses a cut of the log of a failed partition (its failure)
// and on the leader (INVALID_REQUEST: a leader never truncates its log).
func (p *partition) mayCut(r *replState) error {
	if e := p.failed.Load(); e != nil {
		return e
	}
	r.mu.Lock()
	leader, epoch := r.role == roleLeader, r.epoch
	r.mu.Unlock()
	if leader {
		return api.NewError(api.CodeInvalidRequest, "%s/%d: the leader of epoch %d never truncates its log", p.topic, p.id, epoch)
	}
	return nil
}

// truncateTo is TruncateTo on the append goroutine.
func (p *partition) truncateTo(r *replState, offset uint64) error {
	if err := p.mayCut(r); err != nil {
		return err
	}
	start, leo := p.log.LogStartOffset(), p.log.NextOffset()
	if offset == leo {
		// No batch to remove, but the epoch cache may hold an entry
		// starting at the log end (an epoch this node led without
		// appending): it is dropped, or the follower's truncation loop
		// (replica.TruncationComplete) would ask about it forever.
		r.mu.Lock()
		defer r.mu.Unlock()
		if e, ok := r.cache.Latest(); !ok || e.StartOffset < offset {
			return nil
		}
		r.cache.TruncateFromEnd(offset)
		return p.writeEpochs(r)
	}
	if err := p.log.TruncateTo(offset); err != nil {
		switch {
		case errors.Is(err, segment.ErrNotBoundary):
			return api.NewRangeError(api.CodeOffsetOutOfRange, start, leo, "truncate %s/%d to offset %d: %v", p.topic, p.id, offset, err)
		case errors.Is(err, segment.ErrFailed):
			e := api.WrapError(api.CodePartitionFailed, err, "partition %s/%d", p.topic, p.id)
			p.fail(e)
			return e
		}
		return storageError(fmt.Sprintf("truncate %s/%d", p.topic, p.id), err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.durable = min(r.durable, offset)
	if p.hw.Load() > offset {
		p.hw.Store(offset)
	}
	p.logger.Warn("log truncated to the leader's", "offset", offset, "from_offset", leo, "leader_epoch", r.epoch)
	p.wake()
	r.cache.TruncateFromEnd(offset)
	if err := p.writeEpochs(r); err != nil {
		return err
	}
	// The producers' state is rebuilt without the removed batches.
	p.reloadProducers()
	return nil
}

// TruncateFullyAndStartAt empties the partition's log on a follower and
// starts it at offset (Kafka's truncateFullyAndStartAt): for a follower
// whose log end is below its leader's log start (FetchReplica answers
// OFFSET_OUT_OF_RANGE with the leader's range), or whose whole log
// diverges from the leader's. Every segment is removed durably
// (segment.Log.TruncateFullyAndStartAt), the leader-epoch cache emptied,
// and the high watermark and durable log end set to offset. Errors:
// INVALID_REQUEST on the leader, PARTITION_FAILED (a failure halfway fails
// the partition until restart), STORAGE_ERROR, UNKNOWN_TOPIC_ID,
// UNKNOWN_TOPIC, UNKNOWN_PARTITION, SHUTTING_DOWN.
func (e *Engine) TruncateFullyAndStartAt(topic string, id api.TopicID, partition int, offset uint64) error {
	p, r, err := e.replicated(topic, id, partition)
	if err != nil {
		return err
	}
	return p.onAppend(func() error { return p.startOver(r, offset) })
}

// startOver is TruncateFullyAndStartAt on the append goroutine.
func (p *partition) startOver(r *replState, offset uint64) error {
	if err := p.mayCut(r); err != nil {
		return err
	}
	start, leo := p.log.LogStartOffset(), p.log.NextOffset()
	if err := p.log.TruncateFullyAndStartAt(offset); err != nil {
		if errors.Is(err, segment.ErrFailed) {
			e := api.WrapError(api.CodePartitionFailed, err, "partition %s/%d", p.topic, p.id)
			p.fail(e)
			return e
		}
		return storageError(fmt.Sprintf("start %s/%d over", p.topic, p.id), err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.durable = offset
	p.hw.Store(offset)
	p.logger.Warn("log emptied and started over at the leader's", "offset", offset, "from_start", start, "from_end", leo, "leader_epoch", r.epoch)
	p.wake()
	r.cache.TruncateFromEnd(0)
	if err := p.writeEpochs(r); err != nil {
		return err
	}
	p.reloadProducers()
	return nil
}

// syncPerPolicy applies the sync policy after a write of n batches on the
// append goroutine: every-batch syncs now (a failure fails the
// partition), the others mark the log dirty.
func (p *partition) syncPerPolicy(n int) error {
	if p.policy.Load().Mode != SyncEveryBatch {
		p.dirty = true
		p.unsynced += n
		return nil
	}
	start := time.Now()
	err := p.log.Sync()
	p.observeSync(start, n, err)
	if err != nil {
		e := api.WrapError(api.CodePartitionFailed, err, "fdatasync of %s failed", p.dir)
		p.fail(e)
		return e
	}
	p.syncedSinceCkp = true
	return nil
}

// knownCorrupt reports whether a scrub already found damage in p (a
// replicated partition) that is not repaired yet.
func (p *partition) knownCorrupt() bool {
	r := p.repl
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.corrupt != nil
}

// markCorrupt records the damage err (a *segment.CorruptError from the
// scrub) in a replicated partition: it is not eligible as leader
// (ReplicaState.Corrupt), and a follower cuts its log below the damaged
// segment at once (repairCorrupt) to fetch it again from its leader.
func (p *partition) markCorrupt(err error) {
	r := p.repl
	var ce *segment.CorruptError
	if !errors.As(err, &ce) {
		return
	}
	base, perr := strconv.ParseUint(strings.TrimSuffix(filepath.Base(ce.File), filepath.Ext(ce.File)), 10, 64)
	if perr != nil {
		p.fail(api.WrapError(api.CodePartitionFailed, err, "partition %s/%d is corrupt", p.topic, p.id))
		return
	}
	r.mu.Lock()
	r.corrupt, r.corruptBase, r.repaired = err, base, false
	leading, following := r.role == roleLeader, r.role == roleFollower
	sole := leading && len(r.replicas) <= 1
	r.mu.Unlock()
	if sole {
		// The only replica: nothing to repair it from. It fails as a
		// single node's corrupt partition does.
		p.fail(api.WrapError(api.CodePartitionFailed, err, "partition %s/%d is corrupt", p.topic, p.id))
		return
	}
	p.logger.Error("replica corrupt: not eligible as leader until repaired from the leader", "segment", base, "leading", leading, "err", err)
	// A partition not yet given its role (the scrub after Open runs before
	// the cluster's first pass) is repaired once it follows
	// (BecomeFollower), or fails once it leads alone (BecomeLeader).
	if following {
		if err := p.onAppend(func() error { return p.repairCorrupt(r) }); err != nil {
			p.logger.Warn("cutting the damaged segment failed; tried again at the next change of leader", "err", err)
		}
	}
}

// repairCorrupt runs on the append goroutine: a follower whose scrub found
// damage cuts its log at the damaged segment's base offset (TruncateTo),
// so that it fetches the rest again from its leader; ReplicaState.Corrupt
// stays set until it has caught up with the leader's high watermark
// (appendReplica). Nothing to do for a leader, nor when it is done.
func (p *partition) repairCorrupt(r *replState) error {
	r.mu.Lock()
	// Only a follower of a leader cuts its log: a replica fenced without
	// one (a leader back from a restart waiting for its new epoch, or a
	// partition whose leader died) may be the only copy of its records,
	// and cut them for nobody to give back.
	need := r.corrupt != nil && !r.repaired && r.role == roleFollower && r.leader != ""
	base := r.corruptBase
	r.mu.Unlock()
	if !need {
		return nil
	}
	if start := p.log.LogStartOffset(); base < start {
		base = start // retention deleted the damaged segment meanwhile
	}
	if err := p.truncateTo(r, base); err != nil {
		return err
	}
	r.mu.Lock()
	r.repaired = true
	r.mu.Unlock()
	p.logger.Warn("replica cut its log below the damaged segment; fetching it again from the leader", "offset", base)
	return nil
}
