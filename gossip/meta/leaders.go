package meta

import (
	"slices"

	"github.com/seedqueue/sq/api"
)

// LeadersAfterDeath decides, for the controller, the leader changes after
// nodes died: every partition whose leader is not alive (or that has
// none) and that never held data (HasData false) moves to an alive
// replica, the one leading the fewest partitions (counting the changes
// decided so far), ties to the first in replica order. A partition that
// holds data keeps its leader (part 1 has no other copy: clients get
// LEADER_NOT_AVAILABLE until it returns), and one without an alive
// replica keeps its leader too. Topics are visited in name order and
// partitions in order, so the result depends only on s and alive; it is
// empty when nothing moves. Each change carries the partition's current
// epoch, so Apply skips it if the partition changed since.
func LeadersAfterDeath(s *State, alive func(nodeID string) bool) []LeaderChange {
	load := aliveLoad(s, alive)
	var out []LeaderChange
	for _, t := range s.sortedTopics() {
		for i, p := range t.Partitions {
			if p.HasData || p.Leader != "" && alive(p.Leader) {
				continue
			}
			next := leastLoaded(p.Replicas, load, func(id string) bool { return id != p.Leader && alive(id) })
			if next == "" {
				continue
			}
			load[next]++
			out = append(out, LeaderChange{Topic: t.Name, ID: t.ID, Partition: i, Leader: next, Epoch: p.LeaderEpoch})
		}
	}
	return out
}

// LeadersForRemoval decides the new leaders of the partitions that node
// nodeID leads, for its remove-node command: an alive replica other than
// nodeID, the least loaded; failing that (a single replica, or none
// alive) the least loaded alive registered node, which takes nodeID's
// place in the replica set; failing that no leader (Leader ""). Errors
// (INVALID_REQUEST): nodeID is not registered, or it leads partitions
// that hold data, all named in the message (part 1 has no other copy).
func LeadersForRemoval(s *State, nodeID string, alive func(nodeID string) bool) ([]LeaderChange, error) {
	if _, ok := s.Nodes[nodeID]; !ok {
		return nil, api.NewError(api.CodeInvalidRequest, "node %q is not a member of the cluster", nodeID)
	}
	if led := s.ledWithData(nodeID); len(led) > 0 {
		return nil, api.NewError(api.CodeInvalidRequest, "node %q leads partitions that hold data and have no other copy: %s", nodeID, partitionNames(led))
	}
	others := make([]string, 0, len(s.Nodes))
	for id := range s.Nodes {
		if id != nodeID && alive(id) {
			others = append(others, id)
		}
	}
	slices.Sort(others)
	load := aliveLoad(s, alive)
	delete(load, nodeID)
	var out []LeaderChange
	for _, t := range s.sortedTopics() {
		for i, p := range t.Partitions {
			if p.Leader != nodeID {
				continue
			}
			ok := func(id string) bool { return id != nodeID && alive(id) }
			next := leastLoaded(p.Replicas, load, ok)
			if next == "" {
				next = leastLoaded(others, load, func(string) bool { return true })
			}
			if next != "" {
				load[next]++
			}
			out = append(out, LeaderChange{Topic: t.Name, ID: t.ID, Partition: i, Leader: next, Epoch: p.LeaderEpoch})
		}
	}
	return out, nil
}

// aliveLoad counts the partitions each alive node leads.
func aliveLoad(s *State, alive func(string) bool) map[string]int {
	load := s.LeaderCounts()
	for id := range load {
		if !alive(id) {
			delete(load, id)
		}
	}
	return load
}

// leastLoaded returns the candidate accepted by ok with the lowest load,
// the first in candidates' order on a tie, or "" when none is accepted.
func leastLoaded(candidates []string, load map[string]int, ok func(string) bool) string {
	best := ""
	for _, c := range candidates {
		if ok(c) && (best == "" || load[c] < load[best]) {
			best = c
		}
	}
	return best
}
