package replica

import (
	"slices"
	"time"
)

// FollowerState is what a partition's leader knows of one follower, from
// its replica fetches.
type FollowerState struct {
	// ID is the follower's node id.
	ID string
	// LEO is the follower's log end offset (the fetch offset of its last
	// fetch); 0 until it fetched.
	LEO uint64
	// Durable is the follower's durable log end offset (at most LEO).
	Durable uint64
	// LastCaughtUp is the last time the follower had everything the leader
	// had (see LeaderState.UpdateFollower); the state's creation time
	// until then.
	LastCaughtUp time.Time
	// LastFetch is the time of its last fetch; zero if it never fetched.
	LastFetch time.Time
	// InISR says whether the follower is in the committed in-sync set.
	InISR bool
}

// follower is the leader's mutable record of one follower.
type follower struct {
	FollowerState
	// fetchLEO is the leader's LEO at the follower's previous fetch
	// (Kafka's lastFetchLeaderLogEndOffset).
	fetchLEO uint64
	seen     bool
}

// LeaderState is one partition's replication state on its leader for one
// leader epoch: the followers' log end offsets, the committed in-sync set
// (ISR), the ISR change in flight, and the high watermark (HW) they give.
// A new leader epoch takes a new LeaderState. It does no I/O and reads no
// clock: every time is passed in. It is not safe for concurrent use.
//
// HW is the minimum durable log end offset over the maximal ISR (KIP-497:
// the committed ISR plus the members whose addition has been proposed and
// not yet committed; a proposed removal keeps its member until committed),
// the leader's own durable LEO included. It never moves back. It advances
// whatever the size of the ISR, as Kafka's does: min.insync.replicas
// bounds which publishes are accepted and acknowledged (acks all), not
// which records are visible. A record below HW is durable on every member
// of the ISR, the only replicas a clean election may choose, so it
// survives every clean election; holding HW back while the ISR is below
// minISR would hide records acknowledged under an earlier epoch from
// consumers of a new leader until a follower rejoined.
type LeaderState struct {
	self       string
	replicas   []string
	isr        []string
	adding     []string // proposed additions, counted in HW until committed or aborted
	inFlight   bool
	epoch      uint32
	epochStart uint64
	hw         uint64
	minISR     int
	leo        uint64
	durable    uint64
	followers  []*follower // replica order, self excluded
}

// NewLeaderState returns the state of self leading a partition with the
// given replicas (in replica order) and committed isr from leader epoch
// epoch, whose first offset is epochStart (the leader's LEO when it became
// leader). hw is the leader's high watermark as a follower (it only moves
// up from there); minISR is min.insync.replicas. now is the creation time:
// a follower that never fetches counts as caught up at now. The leader's
// own LEO starts at epochStart and its durable LEO at hw until SetLocal.
func NewLeaderState(self string, replicas, isr []string, epoch uint32, epochStart, hw uint64, minISR int, now time.Time) *LeaderState {
	l := &LeaderState{
		self:       self,
		replicas:   slices.Clone(replicas),
		isr:        slices.Clone(isr),
		epoch:      epoch,
		epochStart: epochStart,
		hw:         hw,
		minISR:     minISR,
		leo:        max(epochStart, hw),
		durable:    hw,
	}
	for _, id := range replicas {
		if id == self {
			continue
		}
		l.followers = append(l.followers, &follower{FollowerState: FollowerState{
			ID: id, LastCaughtUp: now, InISR: slices.Contains(isr, id),
		}})
	}
	return l
}

// Epoch returns the leader epoch the state is for.
func (l *LeaderState) Epoch() uint32 { return l.epoch }

// EpochStart returns the first offset of the leader's epoch.
func (l *LeaderState) EpochStart() uint64 { return l.epochStart }

// MinISR returns min.insync.replicas as last set.
func (l *LeaderState) MinISR() int { return l.minISR }

// HighWatermark returns the high watermark: the first offset not yet
// durable on every member of the maximal ISR.
func (l *LeaderState) HighWatermark() uint64 { return l.hw }

// ISR returns a copy of the committed in-sync set.
func (l *LeaderState) ISR() []string { return slices.Clone(l.isr) }

// Pending reports whether an ISR change returned by ISRChange awaits its
// commit (SetISR) or abort (AbortISRChange).
func (l *LeaderState) Pending() bool { return l.inFlight }

// Followers returns what the leader knows of each follower, in replica
// order.
func (l *LeaderState) Followers() []FollowerState {
	out := make([]FollowerState, len(l.followers))
	for i, f := range l.followers {
		out[i] = f.FollowerState
	}
	return out
}

func (l *LeaderState) follower(id string) *follower {
	for _, f := range l.followers {
		if f.ID == id {
			return f
		}
	}
	return nil
}

// SetLocal records the leader's own log end offset leo and durable log
// end offset durable (at most leo) and returns the high watermark and
// whether it advanced.
func (l *LeaderState) SetLocal(leo, durable uint64, now time.Time) (hw uint64, advanced bool) {
	l.leo = leo
	l.durable = min(durable, leo)
	return l.advance()
}

// UpdateFollower records a replica fetch of follower id: leo is its fetch
// offset (its log end offset) and durable its durable log end offset. It
// returns the high watermark and whether it advanced. A fetch from a node
// that is not a follower of the partition changes nothing. Callers pass
// only fetches they serve: of the leader's epoch, from a follower that
// truncated as TruncationOffset says, at an offset <= the leader's LEO.
//
// The follower's last caught-up time becomes now when leo reaches the
// leader's LEO, or the time of its previous fetch when leo reaches the
// leader's LEO as of that previous fetch: it had then everything the
// leader had (Kafka's Replica.updateFetchState; under a steady load a
// follower never catches the moving LEO, yet it is in sync).
func (l *LeaderState) UpdateFollower(id string, leo, durable uint64, now time.Time) (hw uint64, advanced bool) {
	f := l.follower(id)
	if f == nil {
		return l.hw, false
	}
	if leo >= l.leo {
		f.LastCaughtUp = latest(f.LastCaughtUp, now)
	} else if f.seen && leo >= f.fetchLEO {
		f.LastCaughtUp = latest(f.LastCaughtUp, f.LastFetch)
	}
	f.fetchLEO = l.leo
	f.LastFetch = now
	f.seen = true
	f.LEO = leo
	f.Durable = min(durable, leo)
	return l.advance()
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// SetISR records a committed in-sync set (from the metadata log) and
// min.insync.replicas, ends any ISR change in flight, and returns the high
// watermark and whether it advanced (a committed removal of a lagging
// follower lets it advance). Pass each committed ISR of the leader's
// epoch once, in commit order, never an older one delivered late: that
// would drop an addition in flight from the high watermark's set while
// the metadata already holds it in the ISR.
func (l *LeaderState) SetISR(isr []string, minISR int) (hw uint64, advanced bool) {
	l.isr = slices.Clone(isr)
	l.minISR = minISR
	l.adding = nil
	l.inFlight = false
	for _, f := range l.followers {
		f.InISR = slices.Contains(isr, f.ID)
	}
	return l.advance()
}

// AbortISRChange ends the ISR change in flight without a commit: the
// proposed additions stop counting in the high watermark, which does not
// move back, and ISRChange may propose again. Call it only when the
// proposal is known not to have committed (refused, or the leader lost
// its epoch): a proposal whose answer was lost may have committed, and
// aborting it would let the high watermark pass a member the committed
// ISR holds; resend it instead (the metadata answers with the committed
// ISR, which SetISR takes).
func (l *LeaderState) AbortISRChange() {
	l.adding = nil
	l.inFlight = false
}

// maximal returns the maximal ISR: the committed ISR, the additions in
// flight and the leader.
func (l *LeaderState) maximal() []string {
	set := slices.Clone(l.isr)
	for _, id := range append(slices.Clone(l.adding), l.self) {
		if !slices.Contains(set, id) {
			set = append(set, id)
		}
	}
	return set
}

// advance recomputes the high watermark from the maximal ISR.
func (l *LeaderState) advance() (uint64, bool) {
	set := l.maximal()
	hw := l.durable
	for _, id := range set {
		if id == l.self {
			continue
		}
		f := l.follower(id)
		if f == nil {
			// Not a replica: nothing durable is known of it.
			return l.hw, false
		}
		hw = min(hw, f.Durable)
	}
	if hw > l.hw {
		l.hw = hw
		return hw, true
	}
	return l.hw, false
}

// ISRChange returns the in-sync set the leader should propose now, and
// true, or nil and false when there is nothing to change or a change is
// already in flight (until SetISR or AbortISRChange). The proposal is the
// committed ISR, in replica order, with the leader itself (never removed),
// less each follower not caught up for more than lagMax (Kafka's
// replica.lag.time.max.ms: now - LastCaughtUp > lagMax), plus each follower
// outside it that has fetched, whose durable LEO is >= the high watermark
// and >= the start of the leader's epoch (Kafka's isFollowerInSync, which
// compares the LEO, as Kafka counts a record replicated without an
// fsync), and that is not lagging by the rule above (else the next call
// would remove it again, and while it is counted in the maximal ISR a
// follower cut off holds the high watermark at its LEO). The additions count in
// the high watermark from now on (KIP-497's maximal ISR).
//
// Both bounds matter, on the durable LEO: a member of the ISR may be
// elected, so it must hold every committed record durably when it joins.
// A new leader's high watermark may lag the old leader's; the epoch start
// (its LEO when elected) covers every record committed before. With the
// LEO instead, a follower that syncs at intervals could join holding the
// committed suffix in its page cache alone, become the only other ISR
// member after a shrink, lose that suffix in a crash, and be elected
// without acknowledged records (engine/replica/sim found both cases).
func (l *LeaderState) ISRChange(now time.Time, lagMax time.Duration) ([]string, bool) {
	if l.inFlight {
		return nil, false
	}
	var next, added []string
	changed := !slices.Contains(l.isr, l.self)
	for _, id := range l.isr {
		changed = changed || !slices.Contains(l.replicas, id) // not a replica: dropped
	}
	for _, id := range l.replicas {
		if id == l.self {
			next = append(next, id)
			continue
		}
		f := l.follower(id)
		lagging := now.Sub(f.LastCaughtUp) > lagMax
		switch in := slices.Contains(l.isr, id); {
		case in && lagging:
			changed = true
		case in:
			next = append(next, id)
		case !lagging && f.seen && f.Durable >= max(l.hw, l.epochStart):
			next = append(next, id)
			added = append(added, id)
			changed = true
		}
	}
	if !changed {
		return nil, false
	}
	l.inFlight = true
	l.adding = added
	return next, true
}
