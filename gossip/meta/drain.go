package meta

import (
	"slices"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine/replica"
)

// Drain is the drained state of one node (State.Drained): a drained node
// is no candidate for leadership (LeadersForDrain moves its partitions
// away, and Place, LeadersAfterDeath and LeadersForRemoval choose it only
// when no other node may lead), as Kafka's controlled shutdown and
// Redpanda's maintenance mode.
type Drain struct {
	// Operator is set by `sq cluster drain` (drain-node without
	// Shutdown) and cleared only by undrain-node.
	Operator bool `json:"operator,omitempty"`
	// Shutdown is set by the node's own controlled shutdown (drain-node
	// with Shutdown): it also leaves the in-sync sets of the partitions
	// it follows, and no set-isr may add it back. Its next register-node
	// (its restart) clears it.
	Shutdown bool `json:"shutdown,omitempty"`
}

// Drained reports whether node id is drained (State.Drained lists it).
func (s *State) Drained(id string) bool {
	_, ok := s.DrainedNodes[id]
	return ok
}

// ShuttingDown reports whether node id is drained by its controlled
// shutdown: it must not join an in-sync set until it registers again.
func (s *State) ShuttingDown(id string) bool {
	return s.DrainedNodes[id].Shutdown
}

// LeadersForDrain decides where the partitions that node nodeID leads go
// when it is drained: to the first alive, undrained member of the ISR
// other than nodeID in replica order (replica.ChooseLeader, never an
// unclean choice: a drain must not lose a record); a partition that
// never held data to the least loaded alive, undrained replica. A
// partition without such a candidate stays (LeadersForDrain leaves it
// out; the caller reports it). Topics are visited in name order and
// partitions in order, so the result depends only on s and alive; each
// change carries the partition's epoch (Apply skips it if it moved).
func LeadersForDrain(s *State, nodeID string, alive func(nodeID string) bool) []LeaderChange {
	ok := func(id string) bool { return id != nodeID && alive(id) && !s.Drained(id) }
	load := aliveLoad(s, alive)
	var out []LeaderChange
	for _, t := range s.sortedTopics() {
		for i, p := range t.Partitions {
			if p.Leader != nodeID {
				continue
			}
			next := ""
			if p.HasData {
				next, _, _ = replica.ChooseLeader(p.Replicas, p.ISR, ok, false)
			} else {
				next = leastLoaded(p.Replicas, load, ok)
			}
			if next == "" {
				continue
			}
			load[next]++
			out = append(out, LeaderChange{Topic: t.Name, ID: t.ID, Partition: i, Leader: next, Epoch: p.LeaderEpoch})
		}
	}
	return out
}

// LeadersAwayFromDrained is LeadersForDrain for every alive drained node
// that still leads partitions, in node id order: the controller runs it
// periodically, so a partition whose follower rejoined the ISR after the
// drain moves too.
func LeadersAwayFromDrained(s *State, alive func(nodeID string) bool) []LeaderChange {
	ids := make([]string, 0, len(s.DrainedNodes))
	for id := range s.DrainedNodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []LeaderChange
	for _, id := range ids {
		if !alive(id) {
			continue // LeadersAfterDeath moves a dead node's partitions
		}
		out = append(out, LeadersForDrain(s, id, alive)...)
	}
	return out
}

// LedBy returns the partitions node id leads, as "topic-p" in topic name
// and partition order: after a drain, the ones that could not move.
func LedBy(s *State, id string) []string {
	var out []string
	for _, t := range s.sortedTopics() {
		for i, p := range t.Partitions {
			if p.Leader == id {
				out = append(out, partitionKey(t.Name, i))
			}
		}
	}
	return out
}

// applyDrainNode drains node c.NodeID, as OpDrainNode says.
func (s *State) applyDrainNode(c Command) Result {
	id := c.NodeID
	if _, ok := s.Nodes[id]; !ok {
		return refused(api.CodeInvalidRequest, "node %q is not a member of the cluster", id)
	}
	for _, ch := range c.Leaders {
		if err := s.validateChange(c.Op, ch); err != nil {
			return Result{Err: err}
		}
	}
	if s.DrainedNodes == nil {
		s.DrainedNodes = map[string]Drain{}
	}
	d := s.DrainedNodes[id]
	if c.Shutdown {
		d.Shutdown = true
	} else {
		d.Operator = true
	}
	s.DrainedNodes[id] = d
	moved := 0
	for _, ch := range c.Leaders {
		if s.Topics[ch.Topic].Partitions[ch.Partition].Leader != id {
			continue // a drain moves only the drained node's partitions
		}
		if s.setLeader(ch) {
			moved++
		}
	}
	if c.Shutdown {
		s.leaveFollowedISRs(id)
	}
	return Result{Moved: moved}
}

// leaveFollowedISRs takes node id out of the in-sync set of every
// partition it follows (Kafka's controlled shutdown does the same): a
// stopped follower in the ISR would hold the high watermark, and so every
// acks-all publish, back for replica.lag.time.max.ms. An ISR that holds
// only id, or no leader, is left as it is.
func (s *State) leaveFollowedISRs(id string) {
	for _, t := range s.Topics {
		for i := range t.Partitions {
			p := &t.Partitions[i]
			if p.Leader == id || p.Leader == "" || !slices.Contains(p.ISR, id) || len(p.ISR) < 2 {
				continue
			}
			p.ISR = without(p.ISR, id)
		}
	}
}

// applyUndrainNode ends the drain of node c.NodeID (both kinds); a node
// that is not drained is left as it is. INVALID_REQUEST for a node that
// is not registered.
func (s *State) applyUndrainNode(c Command) Result {
	if _, ok := s.Nodes[c.NodeID]; !ok {
		return refused(api.CodeInvalidRequest, "node %q is not a member of the cluster", c.NodeID)
	}
	s.clearDrain(c.NodeID, true)
	return Result{}
}

// clearDrain ends the shutdown drain of node id and, with operator, its
// operator drain too; the entry goes when neither is left.
func (s *State) clearDrain(id string, operator bool) {
	d, ok := s.DrainedNodes[id]
	if !ok {
		return
	}
	d.Shutdown = false
	if operator {
		d.Operator = false
	}
	if d.Operator {
		s.DrainedNodes[id] = d
		return
	}
	delete(s.DrainedNodes, id)
	if len(s.DrainedNodes) == 0 {
		s.DrainedNodes = nil
	}
}

// undrainedFirst returns an eligibility that prefers nodes that are not
// drained: eligible less the drained nodes when any replica of p passes
// it, else eligible itself (a drained node leads only when no other may).
func (s *State) undrainedFirst(p Partition, eligible func(string) bool) func(string) bool {
	if len(s.DrainedNodes) == 0 {
		return eligible
	}
	strict := func(id string) bool { return eligible(id) && !s.Drained(id) }
	candidates := p.Replicas
	if p.HasData {
		candidates = p.ISR
	}
	if slices.ContainsFunc(candidates, strict) {
		return strict
	}
	return eligible
}
