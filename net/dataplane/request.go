package dataplane

import (
	"fmt"
	"math"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// request is one frame decoded into Go values, so that the Cap'n Proto
// message can be released as soon as it has been read and the handler never
// touches the read buffer. Only the fields of kind are set.
type request struct {
	corrID uint64
	kind   api.Frame_Which

	// tailLen is the records tail that follows the frame on the stream:
	// recordsLength of a publish request, or of a tail-carrying frame the
	// server does not serve (read and dropped).
	tailLen uint32
	// tail is the publish batch, read into a pooled batch buffer that the
	// broker owns once it is queued; releaseTail gives it back once the
	// broker holds it no more (see queueLinked).
	tail []byte
	// sharedTail marks an entry of a publishBatches request, whose tail is
	// a part of the request's buffer: it is never given back on its own
	// (the request gives the whole buffer back: queueEntries).
	sharedTail bool
	// held is what the request holds of the server's budget
	// (Options.MaxInFlightRequestBytes): its frame, or for a publish its
	// tail, plus requestOverheadBytes. tailHeld is what its tail holds of
	// the connection's tail budget. Both are given back once the request
	// has been answered (conn.releaseRequest).
	held, tailHeld int64
	// prev and link order the publishes of one connection to one
	// partition: the request is queued in the engine once prev is queued,
	// and records in link how it was queued (see conn.chainPublish).
	prev, link *pubLink
	// chained is the publish request's chained flag: it fails with prev's
	// error if prev fails.
	chained bool
	// acks is the publish request's acks (api.Acks_all when unset), or a
	// publishBatches request's.
	acks api.Acks

	// publishBatchesRequest: its entries, in order, each served as a
	// publish of its own (publishbatches.go); entriesErr, when set,
	// refuses the whole request (INVALID_REQUEST), whose tail is read and
	// dropped.
	entries    []pubEntry
	entriesErr error

	// handshakeRequest
	clientID           string
	protocolVersion    uint16
	maxProtocolVersion uint16

	// metadataRequest
	topics []string

	// createTopicRequest, describeTopicRequest
	name       string
	partitions uint32
	config     engine.TopicConfig

	// publishRequest, fetchRequest
	topic string
	// topicID is a fetch's topic id (zero: by name); idErr is set when the
	// request carried a malformed id (any length but 0 or 16), answered
	// with INVALID_REQUEST. Commits keep their ids in commits.
	topicID   api.TopicID
	idErr     error
	partition uint32
	offset    uint64
	maxBytes  uint32
	maxWaitMs uint32

	// listOffsetsRequest (topic and partition above); deleteTopicRequest
	// uses name, createPartitionsRequest name and partitions.
	timestamp int64

	// commitOffsetsRequest, fetchOffsetsRequest (topic above)
	group      string
	memberID   string
	generation int32
	commits    []engine.OffsetCommit

	// ext holds the fields of group and subscribe frames (groups.go,
	// subscribe.go).
	ext any
}

// parseFrame decodes f into a request. An error means the frame cannot be
// parsed (a broken pointer, a traversal limit hit): the stream may be out
// of step with the client, so the connection is closed. A union member the
// server does not serve parses without error and is answered with
// INVALID_REQUEST by the handler.
func parseFrame(f api.Frame) (request, error) {
	req := request{corrID: f.CorrelationId(), kind: f.Which()}
	var err error
	switch req.kind {
	case api.Frame_Which_handshakeRequest:
		err = parseHandshake(f, &req)
	case api.Frame_Which_metadataRequest:
		err = parseMetadata(f, &req)
	case api.Frame_Which_createTopicRequest:
		err = parseCreateTopic(f, &req)
	case api.Frame_Which_describeTopicRequest:
		var r api.DescribeTopicRequest
		if r, err = f.DescribeTopicRequest(); err == nil {
			req.name, err = r.Name()
		}
	case api.Frame_Which_listTopicsRequest:
		_, err = f.ListTopicsRequest()
	case api.Frame_Which_publishRequest:
		var r api.PublishRequest
		if r, err = f.PublishRequest(); err == nil {
			req.partition = r.Partition()
			req.tailLen = r.RecordsLength()
			req.chained = r.Chained()
			req.acks = r.Acks()
			if req.topic, err = r.Topic(); err == nil {
				req.topic = boundTopic(req.topic)
			}
		}
	case api.Frame_Which_publishBatchesRequest:
		err = parsePublishBatches(f, &req)
	case api.Frame_Which_fetchRequest:
		var r api.FetchRequest
		if r, err = f.FetchRequest(); err == nil {
			req.partition = r.Partition()
			req.offset = r.Offset()
			req.maxBytes = r.MaxBytes()
			req.maxWaitMs = r.MaxWaitMs()
			req.topicID, req.idErr = topicIDField(r.HasTopicId(), r.TopicId)
			req.topic, err = r.Topic()
		}
	case api.Frame_Which_commitOffsetsRequest:
		err = parseCommitOffsets(f, &req)
	case api.Frame_Which_fetchOffsetsRequest:
		var r api.FetchOffsetsRequest
		if r, err = f.FetchOffsetsRequest(); err == nil {
			if req.group, err = r.Group(); err == nil {
				req.topic, err = r.Topic()
			}
		}
	case api.Frame_Which_deleteTopicRequest, api.Frame_Which_createPartitionsRequest, api.Frame_Which_listOffsetsRequest:
		err = parseStorageAdmin(f, &req)
	case api.Frame_Which_replicaFetchRequest, api.Frame_Which_offsetForLeaderEpochRequest, api.Frame_Which_initProducerIdRequest:
		err = parseRepl(f, &req)
	case api.Frame_Which_saslAuthenticateRequest:
		err = parseSASL(f, &req)
	default:
		var ok bool
		if ok, err = parseExt(f, &req); !ok {
			// Not a request this server serves (a response, or a member
			// added to the schema later), answered with INVALID_REQUEST; a
			// tail it carries is read and dropped to stay in step.
			req.tailLen = api.TailLength(f)
		}
	}
	if err != nil {
		return request{}, fmt.Errorf("dataplane: parse %v: %w", req.kind, err)
	}
	return req, nil
}

func parseHandshake(f api.Frame, req *request) error {
	r, err := f.HandshakeRequest()
	if err != nil {
		return err
	}
	req.protocolVersion = r.ProtocolVersion()
	req.maxProtocolVersion = r.MaxProtocolVersion()
	req.clientID, err = r.ClientId()
	return err
}

func parseMetadata(f api.Frame, req *request) error {
	r, err := f.MetadataRequest()
	if err != nil {
		return err
	}
	if !r.HasTopics() {
		return nil
	}
	l, err := r.Topics()
	if err != nil {
		return err
	}
	if err := checkListLen(capnp.List(l), 8); err != nil {
		return err
	}
	req.topics = make([]string, 0, l.Len())
	for i := 0; i < l.Len(); i++ {
		t, err := l.At(i)
		if err != nil {
			return err
		}
		req.topics = append(req.topics, t)
	}
	return nil
}

func parseCreateTopic(f api.Frame, req *request) error {
	r, err := f.CreateTopicRequest()
	if err != nil {
		return err
	}
	req.partitions = r.Partitions()
	if req.name, err = r.Name(); err != nil {
		return err
	}
	// Clamped to MaxInt32: more replicas than any cluster has nodes.
	req.config.ReplicationFactor = int32(min(r.ReplicationFactor(), math.MaxInt32))
	if !r.HasConfig() {
		return nil
	}
	c, err := r.Config()
	if err != nil {
		return err
	}
	req.config = engine.TopicConfig{
		ReplicationFactor: req.config.ReplicationFactor,
		SegmentBytes:      c.SegmentBytes(),
		RetentionBytes:    c.RetentionBytes(),
		RetentionMs:       c.RetentionMs(),
		MaxRecordBytes:    c.MaxRecordBytes(),
		SegmentMs:         c.SegmentMs(),
		// Negative: refused by the broker (INVALID_CONFIG).
		MinInsyncReplicas:     c.MinInsyncReplicas(),
		UncleanLeaderElection: c.UncleanLeaderElection(),
		// 0: the server default; checked by the engine.
		LocalRetentionMs:    c.LocalRetentionMs(),
		LocalRetentionBytes: c.LocalRetentionBytes(),
	}
	req.config.SyncPolicy, err = c.SyncPolicy()
	return err
}

func parseCommitOffsets(f api.Frame, req *request) error {
	r, err := f.CommitOffsetsRequest()
	if err != nil {
		return err
	}
	req.generation = r.Generation()
	if req.group, err = r.Group(); err != nil {
		return err
	}
	if req.memberID, err = r.MemberId(); err != nil {
		return err
	}
	if !r.HasOffsets() {
		return nil
	}
	l, err := r.Offsets()
	if err != nil {
		return err
	}
	if err := checkListLen(capnp.List(l), 8); err != nil {
		return err
	}
	req.commits = make([]engine.OffsetCommit, 0, l.Len())
	for i := 0; i < l.Len(); i++ {
		o := l.At(i)
		c := engine.OffsetCommit{Partition: int(o.Partition()), Offset: o.Offset()}
		if c.Topic, err = o.Topic(); err != nil {
			return err
		}
		if c.Metadata, err = o.Metadata(); err != nil {
			return err
		}
		var idErr error
		if c.TopicID, idErr = topicIDField(o.HasTopicId(), o.TopicId); idErr != nil && req.idErr == nil {
			req.idErr = idErr
		}
		req.commits = append(req.commits, c)
	}
	return nil
}

// topicIDField reads an optional topic id field: unset or empty is the zero
// id (a client that predates ids); a length other than 16 is
// INVALID_REQUEST.
func topicIDField(has bool, get func() ([]byte, error)) (api.TopicID, error) {
	if !has {
		return api.TopicID{}, nil
	}
	b, err := get()
	if err != nil {
		return api.TopicID{}, api.WrapError(api.CodeInvalidRequest, err, "topic id")
	}
	return api.TopicIDFromBytes(b)
}
