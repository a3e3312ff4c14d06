package gossip

import (
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/gossip/meta"
)

// A node that restarts while the metadata still names it the leader of a
// partition does not lead it again under the same leader epoch: the
// crash may have cost it the unsynced end of its log, which its followers
// may have fetched (a leader serves its writes to followers before their
// fdatasync ends). Under the same epoch the records it appends next would
// take those offsets, and a follower, whose truncation compares epochs
// (KIP-101), would keep its divergent copy. So the restarted node fences
// its replica (a follower with no leader: no appends, no reads) and
// proposes a meta.LeaderChange with Restart set, which bumps the epoch
// and keeps it the leader; once that is applied it leads the new epoch
// from its own log end, and its followers truncate to it. A proposal that
// fails is made again at the next pass; one outdated by another election
// is skipped by the metadata (its epoch moved).

// resumesEpoch reports whether this node would lead partition i of t
// under epoch, an epoch its replica already led before the process
// started: the storage does not lead it now, and its leader-epoch cache
// ends with that epoch.
func (r *Replicator) resumesEpoch(topic string, id api.TopicID, partition int, epoch uint32) bool {
	st, err := r.store.ReplicaState(topic, id, partition)
	if err != nil || st.Leader && st.LeaderEpoch == epoch {
		return false
	}
	c, err := r.store.LocalEpochs(topic, id, partition)
	if err != nil {
		return false
	}
	latest, ok := c.Latest()
	return ok && latest.Epoch == epoch
}

// proposeRestarts proposes, in one command, the epoch bumps of changes
// (each with Restart set), unless a proposal of restarts is in flight;
// r.mu is held. The proposal runs on its own goroutine, which kicks a new
// pass when it ends and then closes r.restartDone (Start waits for it, so
// that a restarted node's data plane serves its partitions led already).
func (r *Replicator) proposeRestarts(changes []meta.LeaderChange) {
	if len(changes) == 0 || r.restarting {
		return
	}
	r.restarting = true
	done := make(chan struct{})
	r.restartDone = done
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(done)
		ctx, cancel := r.proposeContext()
		res, err := r.c.Propose(ctx, meta.Command{Op: meta.OpSetLeaders, Leaders: changes})
		cancel()
		if err == nil && res.Err != nil {
			err = res.Err
		}
		if err != nil {
			r.log.Warn("replication: proposing new leader epochs for the partitions this restarted node leads failed; retrying",
				"partitions", len(changes), "err", err)
		} else {
			r.log.Info("replication: this restarted node leads its partitions under new leader epochs", "partitions", len(changes), "bumped", res.Moved)
		}
		r.mu.Lock()
		r.restarting = false
		r.mu.Unlock()
		r.Kick()
	}()
}

// awaitRestarts waits, after Start's first pass, for the proposal of new
// leader epochs that pass made (if any) to end, at most ProposeTimeout or
// until Close, and then makes a second pass, which leads the new epochs.
// A node whose proposal fails (no quorum) serves anyway: its partitions
// answer LEADER_NOT_AVAILABLE until a later pass leads them.
func (r *Replicator) awaitRestarts() {
	r.mu.Lock()
	done := r.restartDone
	r.mu.Unlock()
	if done == nil {
		return
	}
	t := time.NewTimer(r.opts.ProposeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-r.stop:
		return
	}
	r.Sync()
}
