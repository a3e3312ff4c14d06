package gossip

import (
	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

// topicRestorer is the part of the node's storage that restores a topic
// from its remote log (*engine.Engine).
type topicRestorer interface {
	RestoreTopic(spec engine.TopicSpec, starts []uint64) (engine.TopicInfo, error)
}

// RestoreTopic serves a topic's history from tiered storage in a cluster
// of this node alone (docs/tiering.md): the storage creates the topic
// with spec's id and partitions, partition i's log starting at starts[i]
// (engine.Engine.RestoreTopic), then the metadata gets the topic with
// that id (create-topic with a given id), this node its only replica and
// leader. Followers added later copy it from there. Errors:
// INVALID_REQUEST when the cluster has other nodes or the storage cannot
// restore, TOPIC_EXISTS, those of the storage and of the metadata log
// (after which the local topic is deleted again).
func (b *Broker) RestoreTopic(spec engine.TopicSpec, starts []uint64) (engine.TopicInfo, error) {
	s := b.c.State()
	if s == nil {
		return engine.TopicInfo{}, api.NewError(api.CodeNoQuorum, "this node has not applied the cluster metadata yet")
	}
	if n := len(s.Nodes); n > 1 {
		return engine.TopicInfo{}, api.NewError(api.CodeInvalidRequest,
			"restore a topic on a node that is a cluster of its own (this cluster has %d nodes), then add nodes: its partitions are copied to them", n)
	}
	if _, ok := s.Topics[spec.Name]; ok {
		return engine.TopicInfo{}, api.NewError(api.CodeTopicExists, "topic %q exists in the cluster", spec.Name)
	}
	rs, ok := b.Storage.(topicRestorer)
	if !ok {
		return engine.TopicInfo{}, api.NewError(api.CodeInvalidRequest, "this node's storage cannot restore topics")
	}
	cfg, err := b.Storage.ResolveConfig(spec.Config)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	spec.Config = cfg
	if _, err := rs.RestoreTopic(spec, starts); err != nil {
		return engine.TopicInfo{}, err
	}
	t := &meta.Topic{Name: spec.Name, ID: spec.ID, Config: cfg, Partitions: make([]meta.Partition, spec.Partitions)}
	if _, err := b.propose(meta.Command{Op: meta.OpCreateTopic, Topic: t}); err != nil {
		if derr := b.Storage.DeleteTopic(spec.Name); derr != nil {
			b.log.Warn("restore: the metadata refused the topic and its local copy could not be deleted", "topic", spec.Name, "err", derr)
		}
		return engine.TopicInfo{}, err
	}
	b.log.Info("topic restored from tiered storage", "topic", spec.Name, "topic_id", spec.ID, "partitions", spec.Partitions, "starts", starts)
	return b.DescribeTopic(spec.Name)
}
