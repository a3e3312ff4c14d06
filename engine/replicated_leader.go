// The leader's side of a replicated partition (docs/architecture.md
// §3.10): answering followers' fetches and epoch requests, and the
// admission and acknowledgement of acks-all appends.

package engine

import (
	"context"
	"errors"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/segment"
)

// EndOffsetForEpoch answers a follower's OffsetForLeaderEpoch request on
// the partition's leader (KIP-101, KIP-279): the largest epoch E' <= epoch
// in the leader-epoch cache and the end offset of E' (the start of the
// next epoch, or the log end offset for the current one). When the cache
// holds no epoch <= epoch it returns epoch and the first offset the cache
// vouches for (the log start offset of the earliest epoch), so that a
// follower truncating to it keeps nothing the leader contradicts. Errors:
// NOT_LEADER, UNKNOWN_LEADER_EPOCH (epoch is newer than the leader's),
// UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC, UNKNOWN_PARTITION, INVALID_REQUEST
// without Options.Replication.
func (e *Engine) EndOffsetForEpoch(topic string, id api.TopicID, partition int, epoch uint32) (uint32, uint64, error) {
	p, r, err := e.replicated(topic, id, partition)
	if err != nil {
		return 0, 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.role != roleLeader {
		return 0, 0, p.notLeader(r)
	}
	if epoch > r.epoch {
		return 0, 0, api.NewError(api.CodeUnknownLeaderEpoch, "leader epoch %d of %s/%d is newer than the leader's %d", epoch, p.topic, p.id, r.epoch)
	}
	ep, end, _ := r.cache.EndOffsetFor(epoch, p.log.NextOffset())
	return ep, end, nil
}

// FetchReplica serves a follower's replica fetch on the partition's
// leader (docs/cluster.md): it records the follower's log end offset
// (r.FetchOffset) and durable log end offset, which may advance the high
// watermark, then returns whole batches from r.FetchOffset up to the
// leader's log end offset (not only below the high watermark), at least
// one batch when there is one, waiting up to r.MaxWait (capped at 30 s)
// for the log end to move when there is none. The result carries the
// high watermark and the leader epoch; the caller must Release it.
// Errors: NOT_LEADER, FENCED_LEADER_EPOCH (r.LeaderEpoch is older than the
// leader's), UNKNOWN_LEADER_EPOCH (newer), OFFSET_OUT_OF_RANGE
// (r.FetchOffset below the log start or above the log end: the follower
// truncates first), UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC, UNKNOWN_PARTITION,
// PARTITION_FAILED, SHUTTING_DOWN, INVALID_REQUEST without
// Options.Replication, or ctx's error.
func (e *Engine) FetchReplica(ctx context.Context, rf ReplicaFetch) (*FetchResult, error) {
	e.obs.inFlight.Add(1)
	defer e.obs.inFlight.Add(-1)
	t, _, err := e.partitionID(rf.Topic, rf.TopicID, rf.Partition)
	if err != nil {
		return nil, err
	}
	p, r, err := e.replicated(rf.Topic, rf.TopicID, rf.Partition)
	if err != nil {
		return nil, err
	}
	maxWait := min(rf.MaxWait, defaultFetchMaxWait)
	maxBytes := max(rf.MaxBytes, 1)
	if !t.refs.acquire() {
		return nil, goneTopic(rf.Topic, rf.TopicID)
	}
	res, err := holdTopic(t, p, rf.Topic)(p.fetchReplica(ctx, r, rf, maxBytes, maxWait, e.closing))
	if res != nil {
		res.TopicID = t.meta().ID
	}
	return res, err
}

// fetchReplica is FetchReplica on p.
func (p *partition) fetchReplica(ctx context.Context, r *replState, rf ReplicaFetch, maxBytes int, maxWait time.Duration, stop <-chan struct{}) (*FetchResult, error) {
	r.mu.Lock()
	if r.role != roleLeader {
		err := p.notLeader(r)
		r.mu.Unlock()
		return nil, err
	}
	if err := p.checkEpoch(r, rf.LeaderEpoch); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	epoch := r.epoch
	start, leo := p.log.LogStartOffset(), p.log.NextOffset()
	if rf.FetchOffset < start || rf.FetchOffset > leo {
		r.mu.Unlock()
		return nil, api.NewRangeError(api.CodeOffsetOutOfRange, start, leo,
			"replica fetch offset %d outside [%d, %d] of %s/%d", rf.FetchOffset, start, leo, p.topic, p.id)
	}
	if hw, adv := r.ls.UpdateFollower(rf.FollowerID, rf.FetchOffset, min(rf.DurableOffset, rf.FetchOffset), p.now()); adv {
		p.hw.Store(hw)
		p.wake()
	}
	r.mu.Unlock()
	var timer *time.Timer
	for {
		wait := *p.notify.Load()
		if p.deleted.Load() {
			return nil, unknownTopic(p.topic)
		}
		r.mu.Lock()
		lost := r.role != roleLeader || r.epoch != epoch
		var lostErr error
		if lost {
			lostErr = p.notLeader(r)
		}
		r.mu.Unlock()
		if lost {
			return nil, lostErr
		}
		start, leo := p.log.LogStartOffset(), p.log.NextOffset()
		hw := p.hw.Load()
		if rf.FetchOffset < start {
			return nil, api.NewRangeError(api.CodeOffsetOutOfRange, start, leo,
				"replica fetch offset %d below the log start %d of %s/%d", rf.FetchOffset, start, p.topic, p.id)
		}
		res := &FetchResult{HighWatermark: hw, LogStartOffset: start, LeaderEpoch: epoch}
		if rf.FetchOffset < leo {
			v, err := p.log.Read(rf.FetchOffset, maxBytes, leo)
			if err != nil {
				var oor *segment.OffsetOutOfRangeError
				if errors.As(err, &oor) {
					return nil, api.NewRangeError(api.CodeOffsetOutOfRange, oor.Start, leo,
						"replica fetch offset %d below the log start %d of %s/%d", rf.FetchOffset, oor.Start, p.topic, p.id)
				}
				return nil, storageError("read", err)
			}
			res.Bufs, res.release = v.Bufs, v.Release
			return res, nil
		}
		if maxWait <= 0 {
			return res, nil
		}
		if timer == nil {
			timer = time.NewTimer(maxWait)
			defer timer.Stop()
		}
		select {
		case <-wait:
		case <-timer.C:
			maxWait = 0
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-stop:
			return nil, api.NewError(api.CodeShuttingDown, "server is shutting down")
		}
	}
}

// replicatedAppendCheck is the admission of a client append on a
// replicated partition: NOT_LEADER unless it leads, and with acks all
// NOT_ENOUGH_REPLICAS when the in-sync set is below min.insync.replicas.
func (p *partition) replicatedAppendCheck(acks Acks) error {
	r := p.repl
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.role != roleLeader {
		return p.notLeader(r)
	}
	if acks == AcksAll && len(r.isr) < r.minISR {
		return api.NewError(api.CodeNotEnoughReplicas, "%s/%d has %d in-sync replicas %v, min.insync.replicas is %d", p.topic, p.id, len(r.isr), r.isr, r.minISR)
	}
	return nil
}

// commitEpoch returns the leader epoch that a commit stamps on its batches,
// or NOT_LEADER when this node no longer leads (the batches are refused
// unwritten). Single node: epoch 0. Runs on the append goroutine.
func (p *partition) commitEpoch() (uint32, error) {
	r := p.repl
	if r == nil {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.role != roleLeader {
		return 0, p.notLeader(r)
	}
	return r.epoch, nil
}

// awaitReplicated waits, for an acks-all append acknowledged by the
// commit with res in leader epoch epoch, until the high watermark passes
// the batch: then res says DurabilityReplicated and the in-sync set's
// size. It fails with NOT_ENOUGH_REPLICAS when the in-sync set falls
// below min.insync.replicas first, NOT_LEADER when the leadership changes
// (the batch may or may not survive), SHUTTING_DOWN, or ctx's error.
func (p *partition) awaitReplicated(ctx context.Context, res AppendResult, epoch uint32) (AppendResult, error) {
	r := p.repl
	end := res.BaseOffset + uint64(res.RecordCount)
	for {
		wait := *p.notify.Load()
		r.mu.Lock()
		lost := r.role != roleLeader || r.epoch != epoch
		isr, minISR := len(r.isr), r.minISR
		var err error
		if lost {
			err = p.notLeader(r)
		}
		r.mu.Unlock()
		switch {
		case lost:
			return AppendResult{}, err
		case isr < minISR:
			// Checked first, as Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND:
			// the high watermark advances whatever the in-sync set's
			// size, so it may pass the batch once the set shrank to the
			// leader alone, which is no acks-all acknowledgement.
			return AppendResult{}, api.NewError(api.CodeNotEnoughReplicas, "%s/%d: the in-sync set fell to %d, below min.insync.replicas %d, before the batch at offset %d was acknowledged", p.topic, p.id, isr, minISR, res.BaseOffset)
		case p.hw.Load() >= end:
			res.Durability, res.Replicas = DurabilityReplicated, int32(isr)
			return res, nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return AppendResult{}, ctx.Err()
		case <-p.stop:
			return AppendResult{}, api.NewError(api.CodeShuttingDown, "server is shutting down")
		}
	}
}
