package engine

import (
	"github.com/seedqueue/sq/api"
)

// TopicSpec is a topic as another authority decided it (the cluster's
// metadata log, docs/cluster.md): CreateTopicSpec creates it with exactly
// this id, creation time and config, so that every node of a cluster holds
// the same topic.
type TopicSpec struct {
	Name string
	// ID is the topic's id (KIP-516); it must not be zero.
	ID         api.TopicID
	Partitions int
	// Config is the resolved config (from ResolveConfig on the node that
	// proposed the topic). Zero fields take this engine's defaults. Values
	// are checked for range but not against this server's batch and record
	// limits, which may differ from the proposing node's.
	Config TopicConfig
	// CreatedMs is the creation time, Unix ms; 0 or less means now.
	CreatedMs int64
}

// CreateTopicSpec creates the topic spec describes. It is CreateTopic with
// the id, creation time and config given rather than made here. Errors:
// INVALID_TOPIC_NAME, INVALID_REQUEST (zero id), INVALID_CONFIG,
// TOPIC_EXISTS, SHUTTING_DOWN, STORAGE_ERROR.
func (e *Engine) CreateTopicSpec(spec TopicSpec) (TopicInfo, error) {
	return e.createTopicSpec(spec, nil)
}

// RestoreTopic creates the topic spec describes, as CreateTopicSpec does,
// with the log of partition i starting at starts[i] rather than 0: a
// topic whose history is in a remote log (tiered storage, docs/tiering.md)
// served again on a node without it, new records continuing after the
// remote log's end. The partitions start there before the topic's
// metadata is written (the create's commit point), so a crash leaves no
// topic whose log overlaps its remote log. In a cluster the caller then
// makes the metadata's topic of it (gossip.Broker.RestoreTopic). Errors:
// those of CreateTopicSpec; INVALID_REQUEST when len(starts) is not the
// partition count.
func (e *Engine) RestoreTopic(spec TopicSpec, starts []uint64) (TopicInfo, error) {
	if len(starts) != spec.Partitions {
		return TopicInfo{}, api.NewError(api.CodeInvalidRequest, "topic %q: %d start offsets for %d partitions", spec.Name, len(starts), spec.Partitions)
	}
	return e.createTopicSpec(spec, starts)
}

// createTopicSpec is CreateTopicSpec with the partitions' start offsets
// (nil: 0).
func (e *Engine) createTopicSpec(spec TopicSpec, starts []uint64) (TopicInfo, error) {
	if err := ValidateStoredTopicName(spec.Name); err != nil {
		return TopicInfo{}, err
	}
	if spec.Partitions < 1 || spec.Partitions > MaxPartitions {
		return TopicInfo{}, api.NewError(api.CodeInvalidConfig, "partitions %d out of range [1, %d]", spec.Partitions, MaxPartitions)
	}
	if spec.ID.IsZero() {
		return TopicInfo{}, api.NewError(api.CodeInvalidRequest, "topic %q: a topic spec needs a topic id", spec.Name)
	}
	// The config as its own previous value: its fields were checked
	// against the limits of the node that resolved them.
	cfg, err := e.resolveConfig(spec.Config, &spec.Config)
	if err != nil {
		return TopicInfo{}, err
	}
	created := spec.CreatedMs
	if created <= 0 {
		created = e.opts.Now().UnixMilli()
	}
	return e.createTopicAt(topicMeta{Name: spec.Name, Partitions: spec.Partitions, Config: cfg, CreatedMs: created, ID: spec.ID}, starts)
}

// ResolveConfig returns cfg as CreateTopic would store it: zero fields
// take the server defaults and every field is checked. Errors:
// INVALID_CONFIG naming the first bad field.
func (e *Engine) ResolveConfig(cfg TopicConfig) (TopicConfig, error) {
	return e.resolveConfig(cfg, nil)
}

// SetCommitCheck sets which partitions CommitOffsets checks a committed
// offset against the high watermark for: those for which leads(topic,
// partition) is true. In a cluster a node holds the log of the partitions
// it leads only, so the cluster layer passes "this node leads it"; the
// offsets of the others, committed at a group's coordinator that does not
// lead them, are stored unchecked (docs/cluster.md). nil, the default,
// checks every partition. leads must be cheap and safe for concurrent use.
func (e *Engine) SetCommitCheck(leads func(topic string, partition int) bool) {
	if leads == nil {
		e.commitCheck.Store(nil)
		return
	}
	e.commitCheck.Store(&leads)
}

// checksHighWatermark reports whether a commit to topic/partition is
// checked against its high watermark (SetCommitCheck).
func (e *Engine) checksHighWatermark(topic string, partition int) bool {
	f := e.commitCheck.Load()
	return f == nil || (*f)(topic, partition)
}
