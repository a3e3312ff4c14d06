package sim

import (
	"slices"
	"time"

	"github.com/seedqueue/sq/engine/replica"
)

// batch is one batch of the log: a value and the epoch of the leader
// that appended it.
type batch struct {
	value uint64
	epoch uint32
}

type role uint8

const (
	roleNone role = iota
	roleLeader
	roleFollower
)

// pendingProduce is a value a leader appended and acknowledges once its
// high watermark passes it.
type pendingProduce struct {
	value, offset uint64
}

// node is one replica. What survives a crash: the durable prefix of the
// log, the epoch cache (truncated to that prefix at restart), the high
// watermark checkpoint, the metadata it applied (its copy of the metadata
// log) and the epoch it must not lead again.
type node struct {
	id         string
	i          int
	up         bool
	inc        int  // incarnation, bumped by each crash
	everyBatch bool // sync policy: every batch, or at sync steps

	log     []batch
	durable uint64 // the durable prefix of log
	cache   replica.EpochCache
	hw      uint64
	hwCkpt  uint64
	meta    meta
	fenced  uint32 // leads no epoch <= this: the epochs it knew before a crash

	role       role
	epoch      uint32
	leader     string
	ls         *replica.LeaderState
	pending    []pendingProduce
	proposal   []string // set-isr in flight
	proposalAt time.Time
	truncating bool // a follower that has not finished offsetForLeaderEpoch
	seq        uint64
	waiting    bool // a request is outstanding
	sentAt     time.Time
}

func (n *node) leo() uint64 { return uint64(len(n.log)) }

// read serves a consumer's fetch from offset pos: the batches from pos up
// to the node's high watermark; false when pos is above it.
func (n *node) read(pos uint64, aboveHW bool) (start uint64, batches []batch, hw uint64, ok bool) {
	hw = n.hw
	if aboveHW {
		hw = n.leo()
	}
	if pos > hw {
		return 0, nil, 0, false
	}
	return pos, slices.Clone(n.log[pos:hw]), hw, true
}

// applyMeta applies metadata newer than the node's.
func (s *Sim) applyMeta(n *node, md meta) {
	if md.Version <= n.meta.Version {
		return
	}
	n.meta = md.clone()
	s.applyRole(n)
}

// applyRole makes the node's role match its metadata: a new epoch makes it
// leader (unless fenced) or follower; within its epoch, a leader takes
// the committed ISR.
func (s *Sim) applyRole(n *node) {
	md := n.meta
	if md.Epoch != n.epoch || n.role == roleNone {
		s.leaveRole(n)
		n.epoch = md.Epoch
		switch {
		case md.Leader == n.id && md.Epoch > n.fenced:
			s.becomeLeader(n)
		case md.Leader != "" && md.Leader != n.id:
			n.role, n.leader, n.truncating = roleFollower, md.Leader, true
		}
		return
	}
	if n.role == roleLeader {
		n.proposal = nil
		if hw, adv := n.ls.SetISR(md.ISR, s.cfg.MinISR); adv {
			s.leaderHW(n, hw)
		}
	}
}

func (s *Sim) leaveRole(n *node) {
	n.role, n.leader, n.ls = roleNone, "", nil
	n.pending, n.proposal = nil, nil
	n.waiting, n.truncating = false, false
}

func (s *Sim) becomeLeader(n *node) {
	n.role, n.leader = roleLeader, n.id
	n.cache.Assign(n.epoch, n.leo())
	n.hw = min(n.hw, n.leo())
	n.ls = replica.NewLeaderState(n.id, s.ids, n.meta.ISR, n.epoch, n.leo(), n.hw, s.cfg.MinISR, s.now)
	s.tracef("%s leads epoch %d from offset %d, hw %d", n.id, n.epoch, n.leo(), n.hw)
	s.setLocal(n)
}

// setLocal tells the leader state the leader's own log end offsets.
func (s *Sim) setLocal(n *node) {
	hw, _ := n.ls.SetLocal(n.leo(), n.durable, s.now)
	s.leaderHW(n, hw)
}

// leaderHW takes the leader's new high watermark and acknowledges the
// values below it.
func (s *Sim) leaderHW(n *node, hw uint64) {
	if s.cfg.Break == BreakLeaderAloneHW {
		hw = max(n.hw, n.durable)
	}
	n.hw = hw
	kept := n.pending[:0]
	for _, p := range n.pending {
		if p.offset < n.hw {
			s.send(&message{kind: msgAck, from: n.id, to: clientID, value: p.value, offset: p.offset})
		} else {
			kept = append(kept, p)
		}
	}
	n.pending = kept
}

// tick is a node's timer: a follower sends its next request (when none
// is outstanding or the last timed out); a leader proposes an ISR change,
// or resends the one in flight.
func (s *Sim) tick(n *node) {
	if !n.up {
		return
	}
	switch n.role {
	case roleFollower:
		if n.waiting && s.now.Sub(n.sentAt) < requestTimeout {
			return
		}
		s.request(n)
	case roleLeader:
		if n.proposal != nil {
			if s.now.Sub(n.proposalAt) >= proposalResend {
				s.propose(n)
			}
			return
		}
		if isr, ok := n.ls.ISRChange(s.now, s.cfg.LagMax); ok {
			n.proposal = isr
			s.propose(n)
		}
	}
}

func (s *Sim) propose(n *node) {
	n.proposalAt = s.now
	s.send(&message{kind: msgPropose, from: n.id, to: ctlID, epoch: n.epoch, base: n.meta.Version, isr: slices.Clone(n.proposal)})
}

// request sends a follower's next request: offsetForLeaderEpoch while it
// truncates, else a fetch from its log end offset.
func (s *Sim) request(n *node) {
	n.seq++
	n.waiting, n.sentAt = true, s.now
	if n.truncating && s.cfg.Break != BreakSkipTruncation {
		if latest, ok := n.cache.Latest(); ok {
			s.send(&message{kind: msgEpochReq, from: n.id, to: n.leader, seq: n.seq, epoch: n.epoch, latest: latest.Epoch})
			return
		}
	}
	n.truncating = false
	s.send(&message{kind: msgFetch, from: n.id, to: n.leader, seq: n.seq, epoch: n.epoch, offset: n.leo(), durable: n.durable})
}

// handleFetch serves a follower's fetch on the leader.
func (s *Sim) handleFetch(n *node, m *message) {
	resp := &message{kind: msgFetchResp, from: n.id, to: m.from, seq: m.seq, epoch: n.epoch, offset: m.offset}
	switch {
	case n.role != roleLeader || m.epoch != n.epoch:
		resp.err = true
	case m.offset > n.leo():
		resp.err, resp.outOfRange, resp.endOffset = true, true, n.leo()
	default:
		hw, _ := n.ls.UpdateFollower(m.from, m.offset, min(m.durable, m.offset), s.now)
		s.leaderHW(n, hw)
		resp.batches = slices.Clone(n.log[m.offset:min(n.leo(), m.offset+fetchBatchesMax)])
		resp.hw = n.hw
	}
	s.send(resp)
}

// current reports whether a response answers the follower's outstanding
// request.
func (n *node) current(m *message) bool {
	return n.role == roleFollower && n.waiting && m.seq == n.seq && m.from == n.leader
}

// handleFetchResp appends what the leader sent and takes its high
// watermark, capped by the log end offset.
func (s *Sim) handleFetchResp(n *node, m *message) {
	if !n.current(m) || m.offset != n.leo() {
		return
	}
	n.waiting = false
	if m.err {
		if m.outOfRange {
			if s.cfg.Break == BreakSkipTruncation {
				s.truncate(n, m.endOffset)
			} else {
				n.truncating = true
			}
		}
		return
	}
	for _, b := range m.batches {
		n.cache.Assign(b.epoch, n.leo())
		n.log = append(n.log, b)
	}
	if n.everyBatch {
		n.durable = n.leo()
	}
	n.hw = replica.FollowerHighWatermark(m.hw, n.leo())
	if s.cfg.Break == BreakFollowerHWUncapped {
		n.hw = m.hw
	}
	if len(m.batches) > 0 {
		s.request(n) // more may be there: fetch again at once
	}
}

// handleEpochReq answers offsetForLeaderEpoch on the leader.
func (s *Sim) handleEpochReq(n *node, m *message) {
	resp := &message{kind: msgEpochResp, from: n.id, to: m.from, seq: m.seq, epoch: n.epoch}
	if n.role != roleLeader || m.epoch != n.epoch {
		resp.err = true
	} else {
		resp.endEpoch, resp.endOffset, resp.leaderKnows = n.cache.EndOffsetFor(m.latest, n.leo())
	}
	s.send(resp)
}

// handleEpochResp truncates the follower to replica.TruncationOffset,
// and asks again with its new latest epoch until
// replica.TruncationComplete; then it fetches.
func (s *Sim) handleEpochResp(n *node, m *message) {
	if !n.current(m) || !n.truncating {
		return
	}
	n.waiting = false
	if m.err {
		return
	}
	t := replica.TruncationOffset(&n.cache, n.leo(), m.endEpoch, m.endOffset, m.leaderKnows)
	n.truncating = !replica.TruncationComplete(&n.cache, m.endEpoch, m.leaderKnows)
	if s.cfg.Break == BreakTruncationOneRound {
		if n.truncating = t < n.leo(); !n.truncating {
			s.request(n)
			return
		}
	}
	s.truncate(n, t)
	s.request(n)
}

// truncate cuts the log and the epoch cache to end at t.
func (s *Sim) truncate(n *node, t uint64) {
	if t < n.leo() {
		s.tracef("%s truncates from %d to %d", n.id, n.leo(), t)
		s.stats.Truncations++
	}
	n.log = n.log[:t]
	n.durable = min(n.durable, t)
	n.cache.TruncateFromEnd(t)
	n.hw = min(n.hw, t)
	n.hwCkpt = min(n.hwCkpt, t)
	s.chk.truncated(n.i, t)
}

// handleProduce appends a value on a leader whose ISR has MinISR
// members (NOT_ENOUGH_REPLICAS otherwise, before writing), to be
// acknowledged once the high watermark passes it.
func (s *Sim) handleProduce(n *node, m *message) {
	if n.role != roleLeader || len(n.ls.ISR()) < s.cfg.MinISR {
		return
	}
	off := n.leo()
	n.log = append(n.log, batch{value: m.value, epoch: n.epoch})
	if n.everyBatch {
		n.durable = n.leo()
	}
	s.stats.Produced++
	n.pending = append(n.pending, pendingProduce{value: m.value, offset: off})
	s.setLocal(n)
}

func (s *Sim) handleAck(m *message) {
	s.stats.Acked++
	s.chk.acked(m.value, m.offset)
}

// sync makes the node's log durable and checkpoints its high watermark.
func (s *Sim) sync(n *node) {
	if !n.up {
		return
	}
	n.durable = n.leo()
	n.hwCkpt = n.hw
	if n.role == roleLeader {
		s.setLocal(n)
	}
}

// crash loses everything but the durable state.
func (s *Sim) crash(n *node) {
	if !n.up {
		return
	}
	s.tracef("crash %s (log %d, durable %d)", n.id, n.leo(), n.durable)
	s.stats.Crashes++
	s.leaveRole(n)
	n.up = false
	n.inc++
	n.log = n.log[:n.durable]
	n.cache.TruncateFromEnd(n.durable)
	n.hw = min(n.hwCkpt, n.leo())
	n.hwCkpt = n.hw
	if s.cfg.Break != BreakResumeEpoch {
		n.fenced = max(n.fenced, n.meta.Epoch)
	}
	n.epoch = 0
	s.chk.truncated(n.i, n.leo())
}

// restartNode starts a crashed node on its durable state: it takes the
// role its metadata gives, but never leads an epoch it knew before.
func (s *Sim) restartNode(n *node) {
	s.tracef("restart %s (log %d, hw %d)", n.id, n.leo(), n.hw)
	n.up = true
	s.applyRole(n)
}

// chooseLeader is the controller's election: replica.ChooseLeader over
// the ISR, or over every replica under BreakElectOutsideISR.
func chooseLeader(s *Sim, isr []string) (string, bool, bool) {
	if s.cfg.Break == BreakElectOutsideISR {
		return replica.ChooseLeader(s.ids, s.ids, s.eligible, false)
	}
	return replica.ChooseLeader(s.ids, isr, s.eligible, false)
}
