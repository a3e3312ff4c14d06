package dataplane

import (
	"context"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// ReplicaBroker is implemented by a Broker that leads replicated partitions
// (a clustered node): it serves the replicaFetch and offsetForLeaderEpoch
// frames of followers (docs/cluster.md). A Broker without it answers both
// with INVALID_REQUEST.
type ReplicaBroker interface {
	// FetchReplica reads whole batches from r.FetchOffset up to the
	// leader's log end offset (at least one when any exists, KIP-74),
	// waiting up to r.MaxWait for one, and records the follower's log end
	// and durable log end offsets. The result's HighWatermark,
	// LogStartOffset and LeaderEpoch are the leader's; its Bufs stay valid
	// until Release. Errors: NOT_LEADER, FENCED_LEADER_EPOCH,
	// UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_ID, OFFSET_OUT_OF_RANGE.
	FetchReplica(ctx context.Context, r engine.ReplicaFetch) (*engine.FetchResult, error)
	// EndOffsetForEpoch returns the largest epoch at or below epoch in the
	// partition's leader-epoch cache and the start offset of the next epoch
	// after it (the log end offset when it is the latest), KIP-279.
	// UNKNOWN_LEADER_EPOCH when the cache has no epoch at or below epoch.
	EndOffsetForEpoch(ctx context.Context, topic string, id api.TopicID, partition int, epoch uint32) (uint32, uint64, error)
}

// ProducerIDBroker is implemented by a Broker that grants idempotent
// producer ids (KIP-98); it serves the initProducerId frame. A Broker
// without it answers INVALID_REQUEST.
type ProducerIDBroker interface {
	// InitProducerID returns a producer id never granted before and its
	// epoch.
	InitProducerID(ctx context.Context) (id int64, epoch int16, err error)
}

// replReq holds the fields of replicaFetch and offsetForLeaderEpoch
// requests (request.ext).
type replReq struct {
	followerID    string
	leaderEpoch   uint32
	durableOffset uint64
}

// parseRepl decodes the replication frames (replica fetch, offset for
// leader epoch, init producer id) into req. A missing topic id
// is refused (idErr): a replica never reads a partition by name alone, so
// that a topic deleted and created again under the same name never mixes.
func parseRepl(f api.Frame, req *request) error {
	x := &replReq{}
	req.ext = x
	switch f.Which() {
	case api.Frame_Which_replicaFetchRequest:
		r, err := f.ReplicaFetchRequest()
		if err != nil {
			return err
		}
		req.partition = r.Partition()
		req.offset = r.FetchOffset()
		req.maxBytes = r.MaxBytes()
		req.maxWaitMs = r.MaxWaitMs()
		x.leaderEpoch = r.LeaderEpoch()
		x.durableOffset = r.DurableOffset()
		req.topicID, req.idErr = replicaTopicID(r.HasTopicId(), r.TopicId)
		if req.topic, err = r.Topic(); err != nil {
			return err
		}
		req.topic = boundTopic(req.topic)
		x.followerID, err = r.FollowerId()
		return err
	case api.Frame_Which_offsetForLeaderEpochRequest:
		r, err := f.OffsetForLeaderEpochRequest()
		if err != nil {
			return err
		}
		req.partition = r.Partition()
		x.leaderEpoch = r.LeaderEpoch()
		req.topicID, req.idErr = replicaTopicID(r.HasTopicId(), r.TopicId)
		if req.topic, err = r.Topic(); err != nil {
			return err
		}
		req.topic = boundTopic(req.topic)
		return nil
	default: // initProducerIdRequest
		_, err := f.InitProducerIdRequest()
		return err
	}
}

// replicaTopicID reads the topic id of a replica request: required, 16
// bytes.
func replicaTopicID(has bool, get func() ([]byte, error)) (api.TopicID, error) {
	id, err := topicIDField(has, get)
	if err == nil && id.IsZero() {
		err = api.NewError(api.CodeInvalidRequest, "replica request without a topic id")
	}
	return id, err
}

// dispatchRepl serves the replication frames of parseRepl.
func (c *conn) dispatchRepl(req request) (*response, error) {
	x, _ := req.ext.(*replReq)
	if x == nil {
		x = &replReq{}
	}
	switch req.kind {
	case api.Frame_Which_replicaFetchRequest:
		return c.replicaFetch(req, x)
	case api.Frame_Which_offsetForLeaderEpochRequest:
		return c.offsetForLeaderEpoch(req, x)
	default:
		return c.initProducerID(req)
	}
}

// errNoReplication answers a replica frame sent to a node that does not
// replicate partitions.
func errNoReplication(kind api.Frame_Which) error {
	return api.NewError(api.CodeInvalidRequest, "%v: this server does not replicate partitions (not a cluster node)", kind)
}

func (c *conn) replicaFetch(req request, x *replReq) (*response, error) {
	var res *engine.FetchResult
	berr := req.idErr
	rb, ok := c.srv.broker.(ReplicaBroker)
	if berr == nil && !ok {
		berr = errNoReplication(req.kind)
	}
	if berr == nil {
		maxBytes, maxWait := c.srv.fetchParams(req)
		// A long poll ends when the connection closes or Shutdown starts.
		ctx, cancel := context.WithCancel(c.pollCtx)
		stop := context.AfterFunc(c.srv.drainCtx, cancel)
		res, berr = rb.FetchReplica(ctx, engine.ReplicaFetch{
			Topic:         req.topic,
			TopicID:       req.topicID,
			Partition:     int(req.partition),
			FollowerID:    x.followerID,
			LeaderEpoch:   x.leaderEpoch,
			FetchOffset:   req.offset,
			DurableOffset: x.durableOffset,
			MaxBytes:      maxBytes,
			MaxWait:       maxWait,
		})
		stop()
		cancel()
	}
	res, berr = c.settleFetch(res, berr, "replica fetch")
	r, f, err := newResponse(req)
	if err != nil {
		if res != nil {
			res.Release()
		}
		return nil, err
	}
	// The writer sends res.Bufs, the mapped segments, as the records tail
	// and releases them after the write.
	r.fetch = res
	fr, err := f.NewReplicaFetchResponse()
	if err != nil {
		return r, err
	}
	if err := fr.SetTopic(req.topic); err != nil {
		return r, err
	}
	fr.SetPartition(req.partition)
	if berr == nil && res != nil {
		fr.SetHighWatermark(res.HighWatermark)
		fr.SetLogStartOffset(res.LogStartOffset)
		fr.SetLeaderEpoch(res.LeaderEpoch)
		fr.SetRecordsLength(uint32(res.Bytes()))
	}
	return r, setErr(berr, fr.NewError)
}

func (c *conn) offsetForLeaderEpoch(req request, x *replReq) (*response, error) {
	var epoch uint32
	var end uint64
	berr := req.idErr
	rb, ok := c.srv.broker.(ReplicaBroker)
	if berr == nil && !ok {
		berr = errNoReplication(req.kind)
	}
	if berr == nil {
		epoch, end, berr = rb.EndOffsetForEpoch(c.ctx, req.topic, req.topicID, int(req.partition), x.leaderEpoch)
	}
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	o, err := f.NewOffsetForLeaderEpochResponse()
	if err != nil {
		return r, err
	}
	if berr == nil {
		o.SetLeaderEpoch(epoch)
		o.SetEndOffset(end)
	}
	return r, setErr(berr, o.NewError)
}

// initProducerIDTimeout bounds the wait for a producer id (in a cluster, a
// metadata command's commit).
const initProducerIDTimeout = 30 * time.Second

func (c *conn) initProducerID(req request) (*response, error) {
	var id int64
	var epoch int16
	var berr error
	pb, ok := c.srv.broker.(ProducerIDBroker)
	if !ok {
		berr = api.NewError(api.CodeInvalidRequest, "initProducerId: this server does not grant producer ids")
	} else {
		ctx, cancel := context.WithTimeout(c.pollCtx, initProducerIDTimeout)
		stop := context.AfterFunc(c.srv.drainCtx, cancel)
		id, epoch, berr = pb.InitProducerID(ctx)
		stop()
		cancel()
		if berr != nil && isContextErr(berr) {
			if c.srv.shutting.Load() {
				berr = api.NewError(api.CodeShuttingDown, "server is shutting down")
			} else {
				// Retriable: in a cluster the grant is a metadata
				// command, waiting for a Raft majority.
				berr = api.WrapError(api.CodeNoQuorum, berr, "no producer id granted within %v", initProducerIDTimeout)
			}
		}
	}
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	p, err := f.NewInitProducerIdResponse()
	if err != nil {
		return r, err
	}
	if berr == nil {
		p.SetProducerId(id)
		p.SetProducerEpoch(epoch)
	}
	return r, setErr(berr, p.NewError)
}
