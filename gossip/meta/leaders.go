package meta

import (
	"slices"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine/replica"
)

// LeadersAfterDeath decides, for the controller, the leader changes after
// nodes died: every partition whose leader is not alive (or that has
// none) gets a new leader when one may be chosen (electLeader): for a
// partition that holds data, the first alive member of its ISR in
// replica order (replica.ChooseLeader), or, with the topic's
// unclean.leader.election.enable, any alive replica; for one that never
// held data, the alive replica leading the fewest partitions (counting
// the changes decided so far), ties to the first in replica order. A
// partition without such a candidate keeps its leader (clients get
// LEADER_NOT_AVAILABLE until it returns). A drained node
// (State.DrainedNodes) is chosen only when no other node may lead.
// Topics are visited in name
// order and partitions in order, so the result depends only on s and
// alive; it is empty when nothing moves. Each change carries the
// partition's current epoch, so Apply skips it if the partition changed
// since.
func LeadersAfterDeath(s *State, alive func(nodeID string) bool) []LeaderChange {
	load := aliveLoad(s, alive)
	var out []LeaderChange
	for _, t := range s.sortedTopics() {
		for i, p := range t.Partitions {
			if p.Leader != "" && alive(p.Leader) {
				continue
			}
			eligible := s.undrainedFirst(p, func(id string) bool { return id != p.Leader && alive(id) })
			next := electLeader(t, p, load, eligible)
			if next == "" {
				continue
			}
			load[next]++
			out = append(out, LeaderChange{Topic: t.Name, ID: t.ID, Partition: i, Leader: next, Epoch: p.LeaderEpoch})
		}
	}
	return out
}

// electLeader chooses the next leader of partition p of topic t among the
// replicas that eligible accepts, or "" when none may lead: for a
// partition that holds data, replica.ChooseLeader over its ISR (unclean
// only when t allows it); for one that never held data, the least loaded
// eligible replica.
func electLeader(t *Topic, p Partition, load map[string]int, eligible func(string) bool) string {
	if !p.HasData {
		return leastLoaded(p.Replicas, load, eligible)
	}
	leader, _, ok := replica.ChooseLeader(p.Replicas, p.ISR, eligible, t.Config.UncleanLeaderElection)
	if !ok {
		return ""
	}
	return leader
}

// LeadersForRemoval decides the new leaders of the partitions that node
// nodeID leads, for its remove-node command. A partition that holds data
// takes the leader electLeader chooses among its replicas other than
// nodeID that are alive (a member of its ISR, or with unclean election
// any replica). One that never held data takes the least loaded alive
// replica other than nodeID; failing that (a single replica, or none
// alive) the least loaded alive registered node, which takes nodeID's
// place in the replica set; failing that no leader (Leader ""). A
// drained node is chosen only when no other replica may lead. Errors
// (INVALID_REQUEST): nodeID is not registered, or it leads partitions
// that hold data and have no other replica that may lead them, all named
// in the message (removing the node would lose their records).
func LeadersForRemoval(s *State, nodeID string, alive func(nodeID string) bool) ([]LeaderChange, error) {
	if _, ok := s.Nodes[nodeID]; !ok {
		return nil, api.NewError(api.CodeInvalidRequest, "node %q is not a member of the cluster", nodeID)
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
	var stuck []string
	for _, t := range s.sortedTopics() {
		for i, p := range t.Partitions {
			if p.Leader != nodeID {
				continue
			}
			ok := s.undrainedFirst(p, func(id string) bool { return id != nodeID && alive(id) })
			next := electLeader(t, p, load, ok)
			switch {
			case next == "" && p.HasData:
				stuck = append(stuck, partitionKey(t.Name, i))
				continue
			case next == "":
				next = leastLoaded(others, load, func(string) bool { return true })
			}
			if next != "" {
				load[next]++
			}
			out = append(out, LeaderChange{Topic: t.Name, ID: t.ID, Partition: i, Leader: next, Epoch: p.LeaderEpoch})
		}
	}
	if len(stuck) > 0 {
		return nil, api.NewError(api.CodeInvalidRequest, "node %q leads partitions that hold data and have no other alive in-sync replica to take over (removing it would lose their records): %s", nodeID, partitionNames(stuck))
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
