package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
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
	err = p.onAppend(func() error {
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
	if err == nil {
		e.leadOffsets(topic, partition, epoch)
	}
	return err
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
	err = p.onAppend(func() error {
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
	if r.roleIs(roleFollower) {
		e.resignOffsets(topic, partition)
	}
	return err
}

// roleIs reports whether the partition's role is want.
func (r *replState) roleIs(want role) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.role == want
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
