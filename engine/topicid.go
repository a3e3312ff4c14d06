package engine

import (
	"fmt"

	"github.com/seedqueue/sq/api"
)

// Topic ids (KIP-516; docs/architecture.md §7): every topic has a random
// 16-byte id made at creation and kept in its metadata file. Requests that
// carry an id (fetch, subscribe, commit) are served only by the topic that
// has it, so a topic deleted and created again under the same name is never
// taken for the old one; committed offsets are stored with the id.

// assignTopicIDs gives every topic loaded without an id (a metadata file
// written before ids existed) a new one and persists it, so the id is the
// same after every later restart.
func (e *Engine) assignTopicIDs(metas []topicMeta) error {
	for i := range metas {
		if !metas[i].ID.IsZero() {
			continue
		}
		metas[i].ID = api.NewTopicID()
		if err := e.writeTopicMeta(metas[i]); err != nil {
			return fmt.Errorf("engine: topic %s: persist its new topic id: %w", metas[i].Name, err)
		}
		e.log.Info("topic had no id; assigned one", "topic", metas[i].Name, "topic_id", metas[i].ID)
	}
	return nil
}

// currentTopicID returns the id of the topic now named name.
func (e *Engine) currentTopicID(name string) (api.TopicID, bool) {
	e.mu.RLock()
	t, ok := e.topics[name]
	e.mu.RUnlock()
	if !ok {
		return api.TopicID{}, false
	}
	return t.meta().ID, true
}

// unknownTopicID is the UNKNOWN_TOPIC_ID error of a request for topic name
// with an id that is not its current one.
func unknownTopicID(name string, id api.TopicID) error {
	return api.NewError(api.CodeUnknownTopicID, "topic id %s is not the id of topic %q (deleted or created again): read its metadata again", id, name)
}

// goneTopic is the error of a request for a topic deleted while it was
// served: UNKNOWN_TOPIC_ID when the request named the topic by id,
// UNKNOWN_TOPIC otherwise.
func goneTopic(name string, id api.TopicID) error {
	if id.IsZero() {
		return unknownTopic(name)
	}
	return unknownTopicID(name, id)
}

// partitionID is partition for a request that may carry a topic id: a set
// id that is not the topic's current one is UNKNOWN_TOPIC_ID, also when
// no topic has the name any more (the client's topic was deleted).
func (e *Engine) partitionID(name string, id api.TopicID, p int) (*topic, *partition, error) {
	if id.IsZero() {
		return e.partition(name, p)
	}
	// The id is checked before the partition number: a partition of the
	// old topic that the new one lacks is UNKNOWN_TOPIC_ID (start over),
	// not UNKNOWN_PARTITION (a permanent error).
	t, err := e.topic(name)
	if err != nil {
		if api.AsError(err).Code == api.CodeUnknownTopic {
			return nil, nil, unknownTopicID(name, id)
		}
		return nil, nil, err
	}
	if t.meta().ID != id {
		return nil, nil, unknownTopicID(name, id)
	}
	if p < 0 || p >= len(t.parts()) {
		return nil, nil, api.NewError(api.CodeUnknownPartition, "topic %q has partitions 0..%d, not %d", name, len(t.parts())-1, p)
	}
	return t, t.parts()[p], nil
}

// topicRef names a topic by name and id.
type topicRef struct {
	Name string
	ID   api.TopicID
}

// dropStale removes from rec the entries whose topic id is set and is not
// the current id of their topic, and returns their topics. Called with
// s.mu held: DeleteTopic takes the topic out of the map before it drops
// the topic's offsets under s.mu, and CreateTopic drops them before the
// new topic enters the map, so an entry checked against the old topic
// never outlives it.
func (s *offsetStore) dropStale(rec offsetRecord) (offsetRecord, map[topicRef]bool) {
	if s.current == nil {
		return rec, nil
	}
	var stale map[topicRef]bool
	kept := rec.Offsets[:0:0]
	for _, o := range rec.Offsets {
		if cur, ok := s.current(o.Topic); !o.ID.IsZero() && (!ok || cur != o.ID) {
			if stale == nil {
				stale = map[topicRef]bool{}
			}
			stale[topicRef{o.Topic, o.ID}] = true
			continue
		}
		kept = append(kept, o)
	}
	rec.Offsets = kept
	return rec, stale
}

// adoptOffsets runs at open, once topics and offsets are loaded: offsets
// stored before topic ids existed take the id of the topic now under their
// name, and offsets stored with an id that is not the current id of their
// topic (the topic was deleted or created again and a crash came before
// its offsets were dropped) are dropped with a log line. Offsets of a
// topic that is not loaded are kept as they are.
func (e *Engine) adoptOffsets() {
	s := e.offsets
	s.mu.Lock()
	defer s.mu.Unlock()
	for g, m := range s.groups {
		for k, c := range m {
			t, ok := e.topics[k.Topic]
			if !ok {
				continue
			}
			switch id := t.meta().ID; {
			case c.TopicID.IsZero():
				c.TopicID = id
				m[k] = c
			case c.TopicID != id:
				e.log.Warn("dropping committed offset of an earlier topic of the same name",
					"group", g, "topic", k.Topic, "partition", k.Partition, "old_topic_id", c.TopicID, "topic_id", id)
				delete(m, k)
			}
		}
	}
}
