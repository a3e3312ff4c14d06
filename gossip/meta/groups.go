package meta

import (
	"hash/fnv"
	"slices"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// applyAssignGroup makes c.NodeID the coordinator of group c.Name unless
// the group has one already: the first assign wins, and a later one
// changes nothing and answers the existing coordinator (not an error), so
// that nodes racing to assign a new group all learn the same owner.
// INVALID_REQUEST for an invalid group name or a node that is not
// registered.
func (s *State) applyAssignGroup(c Command) Result {
	if err := engine.ValidateGroupName(c.Name); err != nil {
		return Result{Err: api.AsError(err)}
	}
	if owner, ok := s.Groups[c.Name]; ok {
		return Result{Coordinator: owner}
	}
	if _, ok := s.Nodes[c.NodeID]; !ok {
		return refused(api.CodeInvalidRequest, "assign-group %q: node %q is not a member of the cluster", c.Name, c.NodeID)
	}
	if s.Groups == nil {
		s.Groups = map[string]string{}
	}
	s.Groups[c.Name] = c.NodeID
	return Result{Coordinator: c.NodeID}
}

// applyUnassignGroup removes group c.Name's coordinator if it is
// c.NodeID; otherwise (no coordinator, or another one, assigned after the
// delete) nothing changes. INVALID_REQUEST for an invalid group name.
func (s *State) applyUnassignGroup(c Command) Result {
	if err := engine.ValidateGroupName(c.Name); err != nil {
		return Result{Err: api.AsError(err)}
	}
	if owner, ok := s.Groups[c.Name]; ok && owner == c.NodeID {
		delete(s.Groups, c.Name)
		if len(s.Groups) == 0 {
			s.Groups = nil
		}
	}
	return Result{}
}

// unassignGroups removes node id as the coordinator of its groups; the
// map is dropped when it empties, so the encoding is that of a State that
// never had groups.
func (s *State) unassignGroups(id string) {
	for g, n := range s.Groups {
		if n == id {
			delete(s.Groups, g)
		}
	}
	if len(s.Groups) == 0 {
		s.Groups = nil
	}
}

// GroupCounts returns how many groups each registered node coordinates
// (0 for a node with none).
func (s *State) GroupCounts() map[string]int {
	counts := make(map[string]int, len(s.Nodes))
	for id := range s.Nodes {
		counts[id] = 0
	}
	for _, n := range s.Groups {
		if _, ok := counts[n]; ok {
			counts[n]++
		}
	}
	return counts
}

// ChooseCoordinator returns the node a new group should be assigned to:
// among the registered nodes for which alive is true (every registered
// node when alive is nil), one of those that coordinate the fewest groups,
// picked by the FNV-1a hash of the group's name over them in id order, so
// that nodes that see the same State choose alike and groups spread
// evenly. "" when no node qualifies. The group's current coordinator, if
// any, is not considered: assign-group keeps it.
func ChooseCoordinator(s *State, group string, alive func(nodeID string) bool) string {
	counts := s.GroupCounts()
	var best []string
	least := -1
	for id, n := range counts {
		if alive != nil && !alive(id) {
			continue
		}
		switch {
		case least < 0 || n < least:
			least, best = n, []string{id}
		case n == least:
			best = append(best, id)
		}
	}
	if len(best) == 0 {
		return ""
	}
	slices.Sort(best)
	h := fnv.New32a()
	h.Write([]byte(group))
	return best[h.Sum32()%uint32(len(best))]
}
