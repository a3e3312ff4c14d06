package meta

import (
	"fmt"
	"slices"

	"github.com/seedqueue/sq/api"
)

// applyRemoveNode removes node c.NodeID: INVALID_REQUEST when it is not
// registered or when it leads a partition that holds data (part 1 has no
// other copy; nothing changes). Otherwise the node and its data directory
// id join State.Removed (the newest MaxRemovedNodes), and each partition it led takes the
// leader of its change in c.Leaders (see removeFrom), or none, with its
// epoch bumped, and the node leaves every replica and in-sync set. The
// consumer groups it coordinated lose their coordinator (the next use
// assigns another).
func (s *State) applyRemoveNode(c Command) Result {
	id := c.NodeID
	if _, ok := s.Nodes[id]; !ok {
		return refused(api.CodeInvalidRequest, "node %q is not a member of the cluster", id)
	}
	if led := s.ledWithData(id); len(led) > 0 {
		return refused(api.CodeInvalidRequest, "node %q leads partitions that hold data and have no other copy: %s", id, partitionNames(led))
	}
	s.Removed = append(s.Removed, RemovedNode{ID: id, DataDirID: s.Nodes[id].DataDirID})
	if n := len(s.Removed); n > MaxRemovedNodes {
		s.Removed = slices.Clone(s.Removed[n-MaxRemovedNodes:])
	}
	delete(s.Nodes, id)
	s.unassignGroups(id)
	changes := make(map[string]LeaderChange, len(c.Leaders))
	for _, ch := range c.Leaders {
		changes[partitionKey(ch.Topic, ch.Partition)] = ch
	}
	moved := 0
	for _, t := range s.Topics {
		for i := range t.Partitions {
			ch, ok := changes[partitionKey(t.Name, i)]
			ok = ok && ch.ID == t.ID
			if s.removeFrom(&t.Partitions[i], id, ch, ok) {
				moved++
			}
		}
	}
	return Result{Moved: moved}
}

// removeFrom takes node id out of partition p and reports whether p's
// leader changed. When id led p, the change ch (if found) names the new
// leader: it is used when its epoch is p's and its leader is "" or a
// registered node; a new leader that is not a replica takes id's place in
// the replica and in-sync sets (p holds no data, so no copy is lost).
// Without a usable change p is left without a leader. Either way the
// epoch is bumped.
func (s *State) removeFrom(p *Partition, id string, ch LeaderChange, found bool) bool {
	if p.Leader != id {
		p.Replicas = without(p.Replicas, id)
		p.ISR = without(p.ISR, id)
		return false
	}
	next := ""
	if found && ch.Epoch == p.LeaderEpoch && ch.Leader != id {
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

// ledWithData lists, sorted, the partitions ("topic-p") that node id
// leads and that hold data.
func (s *State) ledWithData(id string) []string {
	var out []string
	for _, t := range s.sortedTopics() {
		for i, p := range t.Partitions {
			if p.Leader == id && p.HasData {
				out = append(out, partitionKey(t.Name, i))
			}
		}
	}
	return out
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
