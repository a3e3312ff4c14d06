package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine/replica"
	"github.com/seedqueue/sq/ring"
	"github.com/seedqueue/sq/segment"
)

// Files of a replicated partition, beside its segments
// (docs/architecture.md §3.10, docs/storage.md "Replica files and truncation").
const (
	epochCheckpointName = "leader-epoch-checkpoint"
	hwCheckpointName    = "replication-offset-checkpoint"
	hwCheckpointVersion = 0
)

// role is a replicated partition's part in its replica set.
type role uint8

const (
	// roleNone: opened, neither BecomeLeader nor BecomeFollower yet.
	roleNone role = iota
	roleLeader
	roleFollower
)

// replState is one partition's replication state (Options.Replication
// set). mu guards every field; the append goroutine changes the log, the
// epoch cache and the durable log end offset, and BecomeLeader,
// BecomeFollower, AppendReplica and TruncateTo run there too, so that they
// are ordered with commits.
type replState struct {
	self   string
	lagMax time.Duration

	mu     sync.Mutex
	role   role
	epoch  uint32
	leader string // the leader's node id on a follower
	isr    []string
	minISR int
	// replicas are the partition's replicas as the last BecomeLeader gave
	// them (a sole replica cannot be repaired from another).
	replicas []string
	ls       *replica.LeaderState // the leader's state; nil unless roleLeader
	cache    replica.EpochCache
	// durable is the durable log end offset: what the sync policy has
	// made durable (docs/architecture.md §3.10).
	durable uint64
	// corrupt is the damage a scrub found in a sealed segment, nil when
	// none: the replica is not eligible as leader (ReplicaState.Corrupt)
	// until, as a follower, it has cut its log at corruptBase (the
	// damaged segment's base offset; repaired set) and fetched again up
	// to the leader's high watermark.
	corrupt     error
	corruptBase uint64
	repaired    bool
	// hwWritten is the high watermark in replication-offset-checkpoint;
	// read and written by checkpointHW only, on the append goroutine.
	hwWritten uint64
}

// openReplication loads p's replication state from its files: the epoch
// cache (entries starting at or after the log end dropped, as they name
// epochs that appended nothing here) and the high watermark, min(the
// checkpoint, LEO), or LEO without a checkpoint (a partition from before
// replication). A damaged epoch checkpoint is rebuilt from the leaderEpoch
// fields of the log's batches, with an error logged.
func (p *partition) openReplication(opts *ReplicationOptions, fsys ring.FS) error {
	r := &replState{self: opts.NodeID, lagMax: opts.LagTimeMax}
	leo := p.log.NextOffset()
	b, err := ring.ReadFile(fsys, filepath.Join(p.dir, epochCheckpointName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read %s: %w", epochCheckpointName, err)
	default:
		if err := r.cache.UnmarshalText(b); err != nil {
			p.logger.Error("leader-epoch checkpoint damaged; rebuilt from the log's batches", "file", filepath.Join(p.dir, epochCheckpointName), "err", err)
			if r.cache, err = epochsFromLog(p.log); err != nil {
				return err
			}
		}
	}
	r.cache.TruncateFromEnd(leo)
	r.cache.TruncateFromStart(p.log.LogStartOffset())
	if e, ok := r.cache.Latest(); ok {
		r.epoch = e.Epoch
	}
	hw := leo
	b, err = ring.ReadFile(fsys, filepath.Join(p.dir, hwCheckpointName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read %s: %w", hwCheckpointName, err)
	default:
		v, err := parseHWCheckpoint(b)
		if err != nil {
			// Replaced atomically, so damage means disk trouble; the log
			// end is what a partition from before replication gets.
			p.logger.Error("replication-offset checkpoint damaged; the high watermark starts at the log end", "err", err)
		} else {
			hw = min(v, leo)
		}
	}
	r.durable = leo // recovery synced what it kept
	r.hwWritten = hw
	p.hw.Store(hw)
	p.repl = r
	return nil
}

// epochsFromLog rebuilds an epoch cache from the leaderEpoch fields of
// the batches of l.
func epochsFromLog(l *segment.Log) (replica.EpochCache, error) {
	var c replica.EpochCache
	off, end := l.LogStartOffset(), l.NextOffset()
	for off < end {
		v, err := l.Read(off, 16<<20, end)
		if err != nil {
			return c, fmt.Errorf("rebuild the leader-epoch cache: %w", err)
		}
		next := v.NextOffset
		for _, buf := range v.Bufs {
			for len(buf) > 0 {
				h, err := batch.ParseHeader(buf)
				if err != nil || h.Size() > len(buf) {
					v.Release()
					return c, fmt.Errorf("rebuild the leader-epoch cache: batch at offset %d: %v", off, err)
				}
				c.Assign(h.LeaderEpoch, h.BaseOffset)
				buf = buf[h.Size():]
			}
		}
		v.Release()
		if next <= off {
			return c, fmt.Errorf("rebuild the leader-epoch cache: no progress at offset %d", off)
		}
		off = next
	}
	return c, nil
}

// parseHWCheckpoint parses replication-offset-checkpoint: a version line
// ("0") and the high watermark, each ending in "\n".
func parseHWCheckpoint(b []byte) (uint64, error) {
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	if !bytes.HasSuffix(b, []byte("\n")) || len(lines) != 2 || string(lines[0]) != strconv.Itoa(hwCheckpointVersion) {
		return 0, fmt.Errorf("%s: %q is not a version line %q and a high watermark", hwCheckpointName, b, strconv.Itoa(hwCheckpointVersion))
	}
	v, err := strconv.ParseUint(string(lines[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: high watermark %q: %w", hwCheckpointName, lines[1], err)
	}
	return v, nil
}

// writeEpochs persists the epoch cache (tmp, fsync, rename, fsync of the
// directory). r.mu is held.
func (p *partition) writeEpochs(r *replState) error {
	b, _ := r.cache.MarshalText()
	if err := writeFileAtomic(p.fs, filepath.Join(p.dir, epochCheckpointName), b); err != nil {
		return storageError(fmt.Sprintf("write the leader-epoch checkpoint of %s/%d", p.topic, p.id), err)
	}
	return nil
}

// checkpointHW writes the high watermark to replication-offset-checkpoint
// when it moved since the last write (the periodic checkpoint and Close).
func (p *partition) checkpointHW() {
	r := p.repl
	if r == nil || p.failed.Load() != nil || p.deleted.Load() {
		return
	}
	// Only the append goroutine (and close, after it ended) writes the
	// file, so hwWritten needs no lock, and the fsyncs hold none.
	hw := p.hw.Load()
	if hw == r.hwWritten {
		return
	}
	data := fmt.Appendf(nil, "%d\n%d\n", hwCheckpointVersion, hw)
	if err := writeFileAtomic(p.fs, filepath.Join(p.dir, hwCheckpointName), data); err != nil {
		p.logger.Warn("replication-offset checkpoint failed; retried at the next checkpoint", "err", err)
		return
	}
	r.hwWritten = hw
}

// localAdvanced is called on the append goroutine after a commit or a
// sync that left the log end at leo; synced says an fdatasync covered it.
// Single node: the high watermark is leo, as before replication. On a
// replicated partition the durable log end offset becomes leo when synced
// or under the policy none (durability by the page cache, the user's
// choice), and a leader feeds it to its LeaderState. It wakes long polls
// either way: a replica fetch waits for the log end.
func (p *partition) localAdvanced(leo uint64, synced bool) {
	r := p.repl
	if r == nil {
		p.publishHW(leo)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if synced || p.policy.Load().Mode == SyncNone {
		r.durable = leo
	}
	if r.role == roleLeader {
		if hw, adv := r.ls.SetLocal(leo, r.durable, p.now()); adv {
			p.hw.Store(hw)
		}
	}
	p.wake()
}

// wake closes and replaces the channel that long polls and acks-all waits
// select on: the high watermark, the log end, the role or the ISR moved.
func (p *partition) wake() {
	ch := make(chan struct{})
	old := p.notify.Swap(&ch)
	close(*old)
}

// onAppend runs fn on the append goroutine and returns its error; NOT
// running it when the partition is closing (SHUTTING_DOWN).
func (p *partition) onAppend(fn func() error) error {
	done := make(chan error, 1)
	op := func() { done <- fn() }
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	select {
	case p.ops <- op:
	case <-p.stop:
		p.mu.RUnlock()
		return api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	p.mu.RUnlock()
	select {
	case err := <-done:
		return err
	case <-p.done:
		return api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
}

// replicated returns the partition of topic (with id, when set) and its
// replication state; UNKNOWN_TOPIC_ID for a wrong id, INVALID_REQUEST
// when the engine has no Options.Replication, the partition's error when
// it failed to open.
func (e *Engine) replicated(topic string, id api.TopicID, partition int) (*partition, *replState, error) {
	_, p, err := e.partitionID(topic, id, partition)
	if err != nil {
		return nil, nil, err
	}
	if p.deleted.Load() {
		return nil, nil, unknownTopic(topic)
	}
	if p.log == nil {
		return nil, nil, p.failed.Load()
	}
	if p.repl == nil {
		if f := p.failed.Load(); f != nil {
			return nil, nil, f
		}
		return nil, nil, api.NewError(api.CodeInvalidRequest, "the engine does not replicate (no replication options)")
	}
	return p, p.repl, nil
}

// checkEpoch compares a request's leader epoch with the partition's:
// older is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH. r.mu is held.
func (p *partition) checkEpoch(r *replState, epoch uint32) error {
	switch {
	case epoch < r.epoch:
		return api.NewError(api.CodeFencedLeaderEpoch, "leader epoch %d of %s/%d is older than the current %d", epoch, p.topic, p.id, r.epoch)
	case epoch > r.epoch:
		return api.NewError(api.CodeUnknownLeaderEpoch, "leader epoch %d of %s/%d is newer than the current %d", epoch, p.topic, p.id, r.epoch)
	}
	return nil
}

// notLeader is NOT_LEADER for p, naming the leader when known. r.mu is held.
func (p *partition) notLeader(r *replState) error {
	if r.role == roleFollower && r.leader != "" {
		return api.NewError(api.CodeNotLeader, "%s/%d is led by %s (leader epoch %d)", p.topic, p.id, r.leader, r.epoch)
	}
	return api.NewError(api.CodeNotLeader, "this node does not lead %s/%d (leader epoch %d)", p.topic, p.id, r.epoch)
}

// BecomeLeader makes this node the leader of the partition from leader
// epoch epoch with the given replicas (node ids, in replica order), the
// committed in-sync set isr, and min.insync.replicas minISR: the epoch
// starts at the log end offset (recorded in the leader-epoch checkpoint
// before it returns), client appends are accepted and stamped with epoch,
// and the high watermark follows the durable log end offsets of the
// in-sync set from the current one (docs/architecture.md §3.10). Calling it
// again for the current epoch updates the ISR and minISR only, as
// UpdateISR does (committed sets in commit order, never an older one). Errors:
// FENCED_LEADER_EPOCH for an epoch older than the partition's,
// UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC, UNKNOWN_PARTITION, STORAGE_ERROR,
// SHUTTING_DOWN, INVALID_REQUEST without Options.Replication.
func (e *Engine) BecomeLeader(topic string, id api.TopicID, partition int, epoch uint32, replicas, isr []string, minISR int) error {
	p, r, err := e.replicated(topic, id, partition)
	if err != nil {
		return err
	}
	return p.onAppend(func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if epoch < r.epoch || epoch == r.epoch && r.role == roleFollower {
			return api.NewError(api.CodeFencedLeaderEpoch, "leader epoch %d of %s/%d: the partition is at %d", epoch, p.topic, p.id, r.epoch)
		}
		if epoch == r.epoch && r.role == roleLeader {
			if hw, adv := r.ls.SetISR(isr, minISR); adv {
				p.hw.Store(hw)
			}
			r.isr, r.minISR = slices.Clone(isr), minISR
			p.wake()
			return nil
		}
		leo := p.log.NextOffset()
		prev := *r.cache.Clone()
		// The epoch starts at the log end, or where it started already
		// (this node led it before a restart).
		epochStart := leo
		if latest, ok := r.cache.Latest(); ok && latest.Epoch == epoch {
			epochStart = latest.StartOffset
		}
		r.cache.Assign(epoch, leo)
		if err := p.writeEpochs(r); err != nil {
			r.cache = prev
			return err
		}
		now := p.now()
		r.role, r.epoch, r.leader = roleLeader, epoch, r.self
		r.isr, r.minISR, r.replicas = slices.Clone(isr), minISR, slices.Clone(replicas)
		if r.corrupt != nil && len(replicas) <= 1 {
			// The only replica: nothing to repair it from. It fails as a
			// single node's corrupt partition does.
			p.fail(api.WrapError(api.CodePartitionFailed, r.corrupt, "partition %s/%d is corrupt", p.topic, p.id))
		}
		hw := p.hw.Load()
		r.ls = replica.NewLeaderState(r.self, replicas, isr, epoch, epochStart, hw, minISR, now)
		if hw, adv := r.ls.SetLocal(leo, r.durable, now); adv {
			p.hw.Store(hw)
		}
		p.logger.Info("leading the partition", "leader_epoch", epoch, "epoch_start", epochStart, "replicas", replicas, "isr", isr, "min_insync_replicas", minISR)
		p.wake()
		return nil
	})
}

// BecomeFollower makes this node a follower of leader for leader epoch
// epoch: client appends get NOT_LEADER (those queued and not yet written
// too, and acks-all waits in progress), and the log changes only through
// AppendReplica and TruncateTo. The high watermark stays where it is until
// the first AppendReplica. Errors: FENCED_LEADER_EPOCH for an epoch older
// than the partition's, or equal to it on the leader of that epoch;
// UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC, UNKNOWN_PARTITION, SHUTTING_DOWN,
// INVALID_REQUEST without Options.Replication.
func (e *Engine) BecomeFollower(topic string, id api.TopicID, partition int, epoch uint32, leader string) error {
	p, r, err := e.replicated(topic, id, partition)
	if err != nil {
		return err
	}
	return p.onAppend(func() error {
		r.mu.Lock()
		if epoch < r.epoch || epoch == r.epoch && r.role == roleLeader {
			r.mu.Unlock()
			return api.NewError(api.CodeFencedLeaderEpoch, "leader epoch %d of %s/%d: the partition is at %d", epoch, p.topic, p.id, r.epoch)
		}
		if r.role != roleFollower || r.epoch != epoch || r.leader != leader {
			p.logger.Info("following the partition's leader", "leader", leader, "leader_epoch", epoch)
		}
		r.role, r.epoch, r.leader, r.ls = roleFollower, epoch, leader, nil
		p.wake()
		r.mu.Unlock()
		// A leader that stepped down for damage repairs it now.
		return p.repairCorrupt(r)
	})
}

// UpdateISR records a committed change of the partition's in-sync set
// (and min.insync.replicas) for leader epoch epoch. On the leader it ends
// the ISR change in flight (ISRProposals), whether the committed set is
// the one proposed or not, and may advance the high watermark; acks-all
// waits see the new set. Pass each committed set of the epoch once, in
// commit order, never an older one delivered late
// (replica.LeaderState.SetISR). Errors: FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH
// (epoch is not the partition's), UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC,
// UNKNOWN_PARTITION, INVALID_REQUEST without Options.Replication.
func (e *Engine) UpdateISR(topic string, id api.TopicID, partition int, epoch uint32, isr []string, minISR int) error {
	p, r, err := e.replicated(topic, id, partition)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := p.checkEpoch(r, epoch); err != nil {
		return err
	}
	r.isr, r.minISR = slices.Clone(isr), minISR
	if r.role == roleLeader {
		if hw, adv := r.ls.SetISR(isr, minISR); adv {
			p.hw.Store(hw)
		}
	}
	p.wake()
	return nil
}

// ISRProposal is an in-sync set change the leader of a partition asks the
// metadata log to commit (meta op set-isr), guarded by Epoch.
type ISRProposal struct {
	Topic     string
	ID        api.TopicID
	Partition int
	// Epoch is the leader epoch the proposal is made in.
	Epoch uint32
	// ISR is the proposed in-sync set, in replica order.
	ISR []string
}

// ISRProposals returns the ISR changes the partitions this node leads
// want at time now: drop followers not caught up for
// ReplicationOptions.LagTimeMax, add caught-up ones (docs/cluster.md). A
// partition with a proposal returned makes no other until UpdateISR
// reports a committed set for it (the proposed one, or the current one if
// the proposal was refused). Nil without Options.Replication.
func (e *Engine) ISRProposals(now time.Time) []ISRProposal {
	if e.opts.Replication == nil {
		return nil
	}
	e.mu.RLock()
	topics := make([]*topic, 0, len(e.topics))
	for _, t := range e.topics {
		topics = append(topics, t)
	}
	e.mu.RUnlock()
	var out []ISRProposal
	for _, t := range topics {
		m := t.meta()
		for _, p := range t.parts() {
			r := p.repl
			if r == nil || p.deleted.Load() {
				continue
			}
			r.mu.Lock()
			if r.role == roleLeader {
				if isr, ok := r.ls.ISRChange(now, r.lagMax); ok {
					out = append(out, ISRProposal{Topic: m.Name, ID: m.ID, Partition: p.id, Epoch: r.epoch, ISR: isr})
				}
			}
			r.mu.Unlock()
		}
	}
	slices.SortFunc(out, func(a, b ISRProposal) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return a.Partition - b.Partition
	})
	return out
}

// ReplicaState is a replica's view of its partition.
type ReplicaState struct {
	// LogStartOffset and LogEndOffset bound the local log.
	LogStartOffset, LogEndOffset uint64
	// DurableEndOffset is the durable log end offset: the end of what the
	// sync policy has made durable (at most LogEndOffset).
	DurableEndOffset uint64
	// HighWatermark is the local high watermark (never above
	// LogEndOffset).
	HighWatermark uint64
	// LeaderEpoch is the partition's current leader epoch here.
	LeaderEpoch uint32
	// Leader says whether this node leads the partition.
	Leader bool
	// Corrupt says that a scrub found damage in one of the replica's
	// sealed segments (Options.ScrubInterval) and the replica has not yet
	// been repaired: as a follower it cuts its log below the damaged
	// segment at once and is repaired once it has fetched again up to the
	// leader's high watermark. A Corrupt replica must not be elected
	// leader, and a Corrupt leader should hand its leadership over.
	Corrupt bool
}

// ReplicaState returns this node's replication state of the partition.
// Errors: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC, UNKNOWN_PARTITION, the
// partition's error when it failed to open, INVALID_REQUEST without
// Options.Replication.
func (e *Engine) ReplicaState(topic string, id api.TopicID, partition int) (ReplicaState, error) {
	p, r, err := e.replicated(topic, id, partition)
	if err != nil {
		return ReplicaState{}, err
	}
	return p.replicaState(r), nil
}

// replicaState reads p's ReplicaState.
func (p *partition) replicaState(r *replState) ReplicaState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ReplicaState{
		LogStartOffset:   p.log.LogStartOffset(),
		LogEndOffset:     p.log.NextOffset(),
		DurableEndOffset: r.durable,
		HighWatermark:    p.hw.Load(),
		LeaderEpoch:      r.epoch,
		Leader:           r.role == roleLeader,
		Corrupt:          r.corrupt != nil,
	}
}

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
	if size > 0 {
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

// retentionMoved records on a replicated partition that retention moved
// the log start to start: the leader-epoch cache forgets what is below.
func (p *partition) retentionMoved(start uint64) {
	r := p.repl
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	before := r.cache.Entries()
	r.cache.TruncateFromStart(start)
	if slices.Equal(before, r.cache.Entries()) {
		return
	}
	if err := p.writeEpochs(r); err != nil {
		p.logger.Warn("leader-epoch checkpoint after retention failed; written again at the next change", "err", err)
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
