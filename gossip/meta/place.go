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
// first replica) is chosen in three steps: the node that leads the fewest
// partitions of this topic (topicLoad, the topic's current counts as
// (*Topic).leaderCounts, nil for a new topic, plus the partitions placed
// so far), so a topic's leaders cover every node before any node leads
// two of them; among those, the node that leads the fewest partitions of
// the cluster (leaderLoad, as LeaderCounts; nil for none, plus the
// partitions placed so far); ties go round-robin to the node after the
// previous leader in sorted order. The other rf-1 replicas are the nodes
// that follow the leader in sorted order. So 3 nodes and 6 partitions
// give each node 2 leaders and, at rf 2, 4 replicas, whatever the other
// topics lead. Errors (INVALID_CONFIG): partitions outside [1,
// engine.MaxPartitions], rf < 1 or rf > the number of nodes. The result
// holds partitions slices of rf node ids.
func Place(nodes []string, partitions, rf int, topicLoad, leaderLoad map[string]int) ([][]string, error) {
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
	own := make([]int, len(ids))  // leaders of this topic per node
	load := make([]int, len(ids)) // leaders of the cluster per node
	for i, id := range ids {
		own[i] = topicLoad[id]
		load[i] = leaderLoad[id]
	}
	less := func(i, j int) bool {
		if own[i] != own[j] {
			return own[i] < own[j]
		}
		return load[i] < load[j]
	}
	out := make([][]string, partitions)
	next := 0 // where the round-robin tie-break starts
	for p := range out {
		lead := next
		for k := 1; k < len(ids); k++ {
			if i := (next + k) % len(ids); less(i, lead) {
				lead = i
			}
		}
		own[lead]++
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

// drainedLoad returns topicLoad (which it may modify; nil for none) with
// every drained node's count raised past any partition count, so that
// Place makes a drained node a leader only when every node is drained
// (its replicas still go on it).
func (s *State) drainedLoad(topicLoad map[string]int) map[string]int {
	if len(s.DrainedNodes) == 0 {
		return topicLoad
	}
	if topicLoad == nil {
		topicLoad = map[string]int{}
	}
	for id := range s.DrainedNodes {
		topicLoad[id] += 2 * engine.MaxPartitions
	}
	return topicLoad
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
// ignored) given s's leader counts; a drained node leads none of them
// unless every node is drained. cfg is taken as resolved by the
// caller, except a ReplicationFactor of 0, which becomes
// DefaultReplicationFactor(len(nodes)), and a MinInsyncReplicas of 0,
// which becomes DefaultMinInsync of the replication factor
// (ResolveMinInsync). Errors: the topic-name rules
// (INVALID_TOPIC_NAME), TOPIC_EXISTS, a zero or used id
// (INVALID_REQUEST), and Place's INVALID_CONFIG, prefixed with the
// topic and the partitions it could not place, or ResolveMinInsync's
// (a min.insync.replicas above the replication factor).
func PrepareCreate(s *State, name string, id api.TopicID, partitions int, cfg engine.TopicConfig, nodes []string, now int64) (Command, error) {
	if err := engine.ValidateStoredTopicName(name); err != nil {
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
	placement, err := Place(live, partitions, int(cfg.ReplicationFactor), s.drainedLoad(nil), s.LeaderCounts())
	if err != nil {
		return Command{}, api.WrapError(api.CodeInvalidConfig, err, "topic %q: cannot place its %d partitions", name, partitions)
	}
	if cfg, err = ResolveMinInsync(cfg); err != nil {
		return Command{}, api.WrapError(api.CodeInvalidConfig, err, "topic %q", name)
	}
	t := &Topic{Name: name, ID: id, Config: cfg, CreatedMs: now, Partitions: newPartitions(placement)}
	return Command{Op: OpCreateTopic, Topic: t}, nil
}

// PrepareCreatePartitions builds the create-partitions command that grows
// topic name to total partitions, the new ones placed by Place over nodes
// (the live nodes; unregistered ones ignored) at the topic's replication
// factor, given the topic's and s's leader counts. Errors: UNKNOWN_TOPIC; INVALID_CONFIG
// when total is not above the current count or above
// engine.MaxPartitions, or from Place, prefixed with the topic and the
// new partitions it could not place.
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
	placement, err := Place(s.registered(nodes), total-cur, int(t.Config.ReplicationFactor), s.drainedLoad(t.leaderCounts()), s.LeaderCounts())
	if err != nil {
		return Command{}, api.WrapError(api.CodeInvalidConfig, err, "topic %q: cannot place the %d new partitions (%d to %d)", name, total-cur, cur, total-1)
	}
	return Command{Op: OpCreatePartitions, Name: name, ID: t.ID, NewPartitions: newPartitions(placement)}, nil
}
