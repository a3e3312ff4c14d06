package meta

import (
	"fmt"
	"slices"

	"github.com/seedqueue/sq/api"
)

// applyRemoveNode removes node c.NodeID: INVALID_REQUEST when it is not
// registered or when it leads a partition that holds data and the
// change of c.Leaders for it does not name a leader that may take it
// over (a member of its ISR other than the node, or with unclean leader
// election any other replica; see dataLeader): nothing changes then.
// Otherwise the node and its data directory id join State.Removed (the
// newest MaxRemovedNodes), and each partition it led takes the leader of
// its change in c.Leaders (see removeFrom), or none, with its epoch
// bumped, and the node leaves every replica and in-sync set. The
// consumer groups it coordinated lose their coordinator (the next use
// assigns another).
func (s *State) applyRemoveNode(c Command) Result {
	id := c.NodeID
	if _, ok := s.Nodes[id]; !ok {
		return refused(api.CodeInvalidRequest, "node %q is not a member of the cluster", id)
	}
	changes := make(map[string]LeaderChange, len(c.Leaders))
	for _, ch := range c.Leaders {
		changes[partitionKey(ch.Topic, ch.Partition)] = ch
	}
	change := func(t *Topic, i int) (LeaderChange, bool) {
		ch, ok := changes[partitionKey(t.Name, i)]
		return ch, ok && ch.ID == t.ID && ch.Epoch == t.Partitions[i].LeaderEpoch
	}
	var stuck []string
	for _, t := range s.sortedTopics() {
		for i, p := range t.Partitions {
			if p.Leader != id || !p.HasData {
				continue
			}
			if ch, ok := change(t, i); !ok || !dataLeader(t, p, id, ch.Leader) {
				stuck = append(stuck, partitionKey(t.Name, i))
			}
		}
	}
	if len(stuck) > 0 {
		return refused(api.CodeInvalidRequest, "node %q leads partitions that hold data and have no other alive in-sync replica to take over (removing it would lose their records): %s", id, partitionNames(stuck))
	}
	s.Removed = append(s.Removed, RemovedNode{ID: id, DataDirID: s.Nodes[id].DataDirID})
	if n := len(s.Removed); n > MaxRemovedNodes {
		s.Removed = slices.Clone(s.Removed[n-MaxRemovedNodes:])
	}
	delete(s.Nodes, id)
	s.unassignGroups(id)
	moved := 0
	for _, t := range s.Topics {
		for i := range t.Partitions {
			ch, ok := change(t, i)
			if s.removeFrom(&t.Partitions[i], id, ch, ok) {
				moved++
			}
		}
	}
	return Result{Moved: moved}
}

// dataLeader reports whether next may take over partition p of topic t,
// which holds data, from node id: a replica other than id that is in the
// ISR, or any other replica when t allows unclean leader election.
func dataLeader(t *Topic, p Partition, id, next string) bool {
	if next == "" || next == id || !slices.Contains(p.Replicas, next) {
		return false
	}
	return slices.Contains(p.ISR, next) || t.Config.UncleanLeaderElection
}

// removeFrom takes node id out of partition p and reports whether p's
// leader changed. When id led p, the change ch (usable when found: its
// epoch is p's) names the new leader. For a partition that holds data it
// is one dataLeader accepts (applyRemoveNode checked it): the ISR loses
// id and, after an unclean choice, is the new leader alone. For a
// partition without data it is used when its leader is "" or a
// registered node; a new leader that is not a replica takes id's place
// in the replica and in-sync sets (no copy is lost). Without a usable
// change p is left without a leader. Either way the epoch is bumped.
func (s *State) removeFrom(p *Partition, id string, ch LeaderChange, found bool) bool {
	if p.Leader != id {
		p.Replicas = without(p.Replicas, id)
		p.ISR = without(p.ISR, id)
		return false
	}
	if p.HasData {
		unclean := !slices.Contains(p.ISR, ch.Leader)
		p.Replicas = without(p.Replicas, id)
		p.ISR = without(p.ISR, id)
		changeLeader(p, ch.Leader, unclean)
		return true
	}
	next := ""
	if found && ch.Leader != id {
		if _, ok := s.Nodes[ch.Leader]; ok || ch.Leader == "" {
			next = ch.Leader
		}
	}
	if next != "" && !slices.Contains(p.Replicas, next) {
		p.Replicas = replace(p.Replicas, id, next)
		p.ISR = replace(p.ISR, id, next)
	} else {
		p.Replicas = without(p.Replicas, id)
		p.ISR = without(p.ISR, id)
	}
	if next != "" && !slices.Contains(p.ISR, next) {
		p.ISR = append(p.ISR, next)
	}
	p.Leader = next
	p.LeaderEpoch++
	return true
}

// partitionKey names partition p of topic as "topic-p".
func partitionKey(topic string, p int) string { return fmt.Sprintf("%s-%d", topic, p) }

// without returns s without v, as a new slice (nil when empty).
func without(s []string, v string) []string {
	var out []string
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// replace returns a copy of s with old replaced by v in place.
func replace(s []string, old, v string) []string {
	out := slices.Clone(s)
	for i, x := range out {
		if x == old {
			out[i] = v
		}
	}
	return cloneSlice(out)
}
