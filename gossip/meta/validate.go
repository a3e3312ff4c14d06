package meta

import (
	"slices"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// refused returns the Result of a refused command: an *api.Error with
// code c and a formatted message.
func refused(c api.Code, format string, args ...any) Result {
	return Result{Err: api.NewError(c, format, args...)}
}

// lookup finds topic name with id for a command of op: UNKNOWN_TOPIC when
// no topic has that name, UNKNOWN_TOPIC_ID when the topic's id is not id
// (deleted and created again), INVALID_REQUEST when the command carries
// no id at all.
func (s *State) lookup(op Op, name string, id api.TopicID) (*Topic, *api.Error) {
	if id.IsZero() {
		return nil, api.NewError(api.CodeInvalidRequest, "%s of topic %q carries no topic id", op, name)
	}
	t, ok := s.Topics[name]
	if !ok {
		return nil, api.NewError(api.CodeUnknownTopic, "topic %q does not exist", name)
	}
	if t.ID != id {
		return nil, api.NewError(api.CodeUnknownTopicID, "topic %q has id %s, not %s", name, t.ID, id)
	}
	return t, nil
}

// idInUse reports whether id is the id of a topic of s or of a deleted
// topic still listed in DeletedIDs: ids are never reused (KIP-516).
func (s *State) idInUse(id api.TopicID) bool {
	if slices.Contains(s.DeletedIDs, id) {
		return true
	}
	for _, t := range s.Topics {
		if t.ID == id {
			return true
		}
	}
	return false
}

// validateTopic checks a topic that a create-topic or import adds: a
// valid name (INVALID_TOPIC_NAME), an unused non-zero id (INVALID_REQUEST),
// 1 to engine.MaxPartitions partitions, a replication factor of at
// least 1 and a min.insync.replicas of at most that (0 reads as the
// default) (INVALID_CONFIG), and every partition as validatePartition.
func (s *State) validateTopic(t *Topic) *api.Error {
	if err := engine.ValidateStoredTopicName(t.Name); err != nil {
		if e := api.AsError(err); e != nil {
			return e
		}
		return api.NewError(api.CodeInvalidTopicName, "%v", err)
	}
	if t.ID.IsZero() {
		return api.NewError(api.CodeInvalidRequest, "topic %q has no id", t.Name)
	}
	if s.idInUse(t.ID) {
		return api.NewError(api.CodeInvalidRequest, "topic %q: id %s is already used by a topic", t.Name, t.ID)
	}
	if n := len(t.Partitions); n < 1 || n > engine.MaxPartitions {
		return api.NewError(api.CodeInvalidConfig, "topic %q: partitions %d out of range [1, %d]", t.Name, n, engine.MaxPartitions)
	}
	rf := int(t.Config.ReplicationFactor)
	if rf < 1 {
		return api.NewError(api.CodeInvalidConfig, "topic %q: replication.factor %d: want at least 1", t.Name, rf)
	}
	if err := checkMinInsync(t.Name, t.Config); err != nil {
		return err
	}
	for i, p := range t.Partitions {
		if err := s.validatePartition(t.Name, i, p, rf); err != nil {
			return err
		}
	}
	return nil
}

// validatePartition checks a new partition's placement (INVALID_REQUEST):
// exactly rf distinct replicas, each a registered node; a leader that is
// one of them (or none); an in-sync set of distinct replicas.
func (s *State) validatePartition(topic string, i int, p Partition, rf int) *api.Error {
	if len(p.Replicas) != rf {
		return api.NewError(api.CodeInvalidRequest, "partition %s-%d has %d replicas, want replication.factor %d", topic, i, len(p.Replicas), rf)
	}
	for j, r := range p.Replicas {
		if _, ok := s.Nodes[r]; !ok {
			return api.NewError(api.CodeInvalidRequest, "partition %s-%d: replica %q is not a registered node", topic, i, r)
		}
		if slices.Contains(p.Replicas[:j], r) {
			return api.NewError(api.CodeInvalidRequest, "partition %s-%d: replica %q is listed twice", topic, i, r)
		}
	}
	if p.Leader != "" && !slices.Contains(p.Replicas, p.Leader) {
		return api.NewError(api.CodeInvalidRequest, "partition %s-%d: leader %q is not a replica", topic, i, p.Leader)
	}
	for j, r := range p.ISR {
		if !slices.Contains(p.Replicas, r) || slices.Contains(p.ISR[:j], r) {
			return api.NewError(api.CodeInvalidRequest, "partition %s-%d: in-sync replica %q is not a replica or is listed twice", topic, i, r)
		}
	}
	return nil
}

// validateChange checks that a leader change names a topic with its
// current id and a partition in range.
func (s *State) validateChange(op Op, ch LeaderChange) *api.Error {
	t, err := s.lookup(op, ch.Topic, ch.ID)
	if err != nil {
		return err
	}
	if ch.Partition < 0 || ch.Partition >= len(t.Partitions) {
		return api.NewError(api.CodeInvalidRequest, "topic %q has no partition %d", ch.Topic, ch.Partition)
	}
	return nil
}
