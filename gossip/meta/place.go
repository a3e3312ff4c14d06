package meta

import (
	"slices"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// DefaultReplicationFactor is the replication factor of a topic created
// without one when the server sets no default: min(3, live nodes).
func DefaultReplicationFactor(liveNodes int) int { return min(3, liveNodes) }

// Place assigns replicas to partitions new partitions over nodes, which
// are sorted first (duplicates dropped). Each partition's leader (its
// first replica) is the node that leads the fewest partitions, counting
// leaderLoad (the current counts, as LeaderCounts; nil for none) and the
// partitions placed so far, ties going round-robin to the node after the
// previous leader in sorted order; the other rf-1 replicas are the nodes
// that follow the leader in sorted order. So 3 nodes and 6 partitions
// give each node 2 leaders and, at rf 2, 4 replicas. Errors
// (INVALID_CONFIG): partitions outside [1, engine.MaxPartitions], rf < 1
// or rf > the number of nodes. The result holds partitions slices of rf
// node ids.
func Place(nodes []string, partitions, rf int, leaderLoad map[string]int) ([][]string, error) {
	ids := slices.Clone(nodes)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	switch {
	case partitions < 1 || partitions > engine.MaxPartitions:
		return nil, api.NewError(api.CodeInvalidConfig, "partitions %d out of range [1, %d]", partitions, engine.MaxPartitions)
	case rf < 1:
		return nil, api.NewError(api.CodeInvalidConfig, "replication.factor %d: want at least 1", rf)
	case rf > len(ids):
		return nil, api.NewError(api.CodeInvalidConfig, "replication.factor %d is above the %d live nodes", rf, len(ids))
	}
	load := make([]int, len(ids))
	for i, id := range ids {
		load[i] = leaderLoad[id]
	}
	out := make([][]string, partitions)
	next := 0 // where the round-robin tie-break starts
	for p := range out {
		lead := next
		for k := 1; k < len(ids); k++ {
			if i := (next + k) % len(ids); load[i] < load[lead] {
				lead = i
			}
		}
		load[lead]++
		next = (lead + 1) % len(ids)
		replicas := make([]string, rf)
		for r := range replicas {
			replicas[r] = ids[(lead+r)%len(ids)]
		}
		out[p] = replicas
	}
	return out, nil
}

// newPartitions turns a placement into partitions led by their first
// replica, epoch 0, every replica in sync (none holds data yet).
func newPartitions(placement [][]string) []Partition {
	ps := make([]Partition, len(placement))
	for i, replicas := range placement {
		ps[i] = Partition{Replicas: replicas, Leader: replicas[0], ISR: slices.Clone(replicas)}
	}
	return ps
}

// registered returns the ids of nodes that are registered in s, sorted,
// without duplicates: a live member whose register-node is not committed
// yet takes no partition.
func (s *State) registered(nodes []string) []string {
	var out []string
	for _, id := range nodes {
		if _, ok := s.Nodes[id]; ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// PrepareCreate builds the create-topic command of topic name with id,
// partitions partitions and config cfg, created at now (Unix ms), placed
// by Place over nodes (the live nodes; those not registered in s are
// ignored) given s's leader counts. cfg is taken as resolved by the
// caller, except a ReplicationFactor of 0, which becomes
// DefaultReplicationFactor(len(nodes)). Errors: the topic-name rules
// (INVALID_TOPIC_NAME), TOPIC_EXISTS, a zero or used id
// (INVALID_REQUEST), and Place's INVALID_CONFIG.
func PrepareCreate(s *State, name string, id api.TopicID, partitions int, cfg engine.TopicConfig, nodes []string, now int64) (Command, error) {
	if err := engine.ValidateTopicName(name); err != nil {
		return Command{}, err
	}
	if _, ok := s.Topics[name]; ok {
		return Command{}, api.NewError(api.CodeTopicExists, "topic %q already exists", name)
	}
	if id.IsZero() || s.idInUse(id) {
		return Command{}, api.NewError(api.CodeInvalidRequest, "topic %q: id %q is zero or already used", name, id)
	}
	live := s.registered(nodes)
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = int32(DefaultReplicationFactor(len(live)))
	}
	placement, err := Place(live, partitions, int(cfg.ReplicationFactor), s.LeaderCounts())
	if err != nil {
		return Command{}, err
	}
	t := &Topic{Name: name, ID: id, Config: cfg, CreatedMs: now, Partitions: newPartitions(placement)}
	return Command{Op: OpCreateTopic, Topic: t}, nil
}

// PrepareCreatePartitions builds the create-partitions command that grows
// topic name to total partitions, the new ones placed by Place over nodes
// (the live nodes; unregistered ones ignored) at the topic's replication
// factor, given s's leader counts. Errors: UNKNOWN_TOPIC; INVALID_CONFIG
// when total is not above the current count or above
// engine.MaxPartitions, or from Place.
func PrepareCreatePartitions(s *State, name string, total int, nodes []string) (Command, error) {
	t, ok := s.Topics[name]
	if !ok {
		return Command{}, api.NewError(api.CodeUnknownTopic, "topic %q does not exist", name)
	}
	cur := len(t.Partitions)
	switch {
	case total <= cur:
		return Command{}, api.NewError(api.CodeInvalidConfig, "topic %q has %d partitions; the new total %d must be larger (partitions can be added, not removed)", name, cur, total)
	case total > engine.MaxPartitions:
		return Command{}, api.NewError(api.CodeInvalidConfig, "topic %q has %d partitions; the new total %d is above the maximum %d partitions of a topic", name, cur, total, engine.MaxPartitions)
	}
	placement, err := Place(s.registered(nodes), total-cur, int(t.Config.ReplicationFactor), s.LeaderCounts())
	if err != nil {
		return Command{}, err
	}
	return Command{Op: OpCreatePartitions, Name: name, ID: t.ID, NewPartitions: newPartitions(placement)}, nil
}
