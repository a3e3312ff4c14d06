package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/quota"
)

// handle serves one request on its own goroutine and queues its response.
// A panic is logged with its stack, answered with UNKNOWN and ends the
// connection once the requests in flight are answered.
func (c *conn) handle(req request) {
	defer c.handlers.Done()
	defer c.releaseRequest(&req)
	sent := false // exactly one answer per request
	defer func() {
		if p := recover(); p != nil {
			c.srv.opts.Logger.Error("dataplane: panic serving a request", "remote", c.remote,
				"request", req.kind.String(), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if !sent {
				c.send(c.buildError(req, api.NewError(api.CodeUnknown, "internal error")))
			}
			// Close after the answers in flight, as after a protocol error.
			c.stopReading(fmt.Errorf("panic serving %v: %v", req.kind, p), slog.LevelError)
		}
	}()
	if quotaKind(req.kind) {
		c.waitMuted()
	}
	r, err := c.dispatch(req)
	if err != nil {
		// Building the response failed (an allocation in the Cap'n Proto
		// arena): say so in an error response instead.
		c.srv.opts.Logger.Error("dataplane: build response", "remote", c.remote, "request", req.kind.String(), "err", err)
		if r != nil {
			r.release()
		}
		r = c.buildError(req, api.WrapError(api.CodeUnknown, err, "build response"))
	}
	r = c.checkFrameSize(req, r)
	sent = true
	c.send(r)
}

// checkFrameSize replaces a response whose Cap'n Proto part exceeds
// MaxFrameBytes, which the client's reader would refuse (and then drop the
// connection), with MESSAGE_TOO_LARGE. Only listings of very many topics
// or offsets (or of very many groups) get there.
func (c *conn) checkFrameSize(req request, r *response) *response {
	if r.msg == nil {
		return r
	}
	size, err := r.msg.TotalSize()
	limit := uint64(c.srv.opts.MaxFrameBytes)
	if err != nil || size <= limit {
		return r
	}
	r.release()
	return c.buildError(req, api.NewError(api.CodeMessageTooLarge,
		"response of %d bytes over the frame limit of %d (--max-frame-bytes): ask for fewer topics, or raise the limit of the server and the client", size, limit))
}

// dispatch runs the request and builds its response. An error means the
// response could not be encoded; broker errors travel inside the response.
func (c *conn) dispatch(req request) (*response, error) {
	// A publish is checked in its chain (queuePublish), so that the
	// publishes chained behind a refused one fail too; so is each entry
	// of a publishBatches request.
	if req.kind != api.Frame_Which_publishRequest && req.kind != api.Frame_Which_publishBatchesRequest {
		if err := c.authorize(req); err != nil {
			c.auditRefusal(req, err)
			return c.buildError(req, err), nil
		}
	}
	switch req.kind {
	case api.Frame_Which_metadataRequest:
		return c.metadata(req)
	case api.Frame_Which_createTopicRequest:
		return c.createTopic(req)
	case api.Frame_Which_describeTopicRequest:
		return c.describeTopic(req)
	case api.Frame_Which_listTopicsRequest:
		return c.listTopics(req)
	case api.Frame_Which_publishRequest:
		return c.publish(req)
	case api.Frame_Which_publishBatchesRequest:
		return c.publishBatches(req)
	case api.Frame_Which_fetchRequest:
		return c.fetch(req)
	case api.Frame_Which_commitOffsetsRequest:
		return c.commitOffsets(req)
	case api.Frame_Which_fetchOffsetsRequest:
		return c.fetchOffsets(req)
	case api.Frame_Which_deleteTopicRequest:
		return c.deleteTopic(req)
	case api.Frame_Which_createPartitionsRequest:
		return c.createPartitions(req)
	case api.Frame_Which_listOffsetsRequest:
		return c.listOffsets(req)
	case api.Frame_Which_handshakeRequest:
		return c.buildError(req, api.NewError(api.CodeInvalidRequest, "handshake already done on this connection")), nil
	case api.Frame_Which_replicaFetchRequest, api.Frame_Which_offsetForLeaderEpochRequest, api.Frame_Which_initProducerIdRequest:
		return c.dispatchRepl(req)
	default:
		if r, ok, err := c.dispatchExt(req); ok {
			return r, err
		}
		return c.buildError(req, api.NewError(api.CodeInvalidRequest, "frame member %v is not a request this server serves", req.kind)), nil
	}
}

// newResponse starts a response frame carrying req's correlation id.
func newResponse(req request) (*response, api.Frame, error) {
	msg, f, err := api.NewFrameMessage(req.corrID)
	if err != nil {
		return nil, api.Frame{}, err
	}
	return &response{msg: msg}, f, nil
}

// buildError answers req with an errorResponse frame carrying err. When
// even that cannot be built, the response writes nothing (the slot is
// still returned) and the connection is closed.
func (c *conn) buildError(req request, err error) *response {
	r, f, berr := newResponse(req)
	if berr == nil {
		var w api.WireError
		if w, berr = f.NewErrorResponse(); berr == nil {
			berr = api.ToWire(w, err)
		}
	}
	if berr != nil {
		if r != nil {
			r.release()
		}
		c.forceClose(fmt.Errorf("build error response: %w", berr))
		return &response{}
	}
	return r
}

// setErr fills the error field of a response struct when err is non-nil.
func setErr(err error, newErr func() (api.WireError, error)) error {
	if err == nil {
		return nil
	}
	w, werr := newErr()
	if werr != nil {
		return werr
	}
	return api.ToWire(w, err)
}

// clampU32 converts a non-negative limit to a u32, saturating.
func clampU32(n int) uint32 {
	switch {
	case n <= 0:
		return 0
	case uint64(n) >= math.MaxUint32:
		return math.MaxUint32
	default:
		return uint32(n)
	}
}

// buildHandshake answers a handshake request with the server's limits.
// refusal is non-nil when the connection must close after the reply: an
// unsupported protocol version, or a server shutting down.
func (c *conn) buildHandshake(req request) (resp *response, refusal error) {
	r, f, err := newResponse(req)
	if err == nil {
		refusal, err = c.fillHandshake(req, f)
	}
	if err != nil {
		if r != nil {
			r.release()
		}
		err = fmt.Errorf("build handshake response: %w", err)
		return c.buildError(req, api.WrapError(api.CodeUnknown, err, "")), err
	}
	return r, refusal
}

func (c *conn) fillHandshake(req request, f api.Frame) (refusal error, err error) {
	h, err := f.NewHandshakeResponse()
	if err != nil {
		return nil, err
	}
	o := &c.srv.opts
	version, ok := negotiateVersion(req.protocolVersion, req.maxProtocolVersion)
	h.SetProtocolVersion(version)
	h.SetMaxRecordBytes(clampU32(c.srv.broker.Limits().MaxRecordBytes))
	h.SetMaxBatchBytes(c.srv.maxBatchBytes)
	h.SetMaxFrameBytes(o.MaxFrameBytes)
	h.SetMaxInFlight(uint32(o.MaxInFlightPerConn))
	if err := h.SetServerVersion(o.ServerVersion); err != nil {
		return nil, err
	}
	if err := h.SetNodeId(o.NodeID); err != nil {
		return nil, err
	}
	switch {
	case !ok:
		refusal = api.NewError(api.CodeUnsupportedVersion,
			"protocol version %d not supported; this server speaks %d to %d", req.protocolVersion, api.MinProtocolVersion, api.ProtocolVersion)
	case c.srv.shutting.Load():
		refusal = api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	return refusal, setErr(refusal, h.NewError)
}

// negotiateVersion returns the protocol version of a connection whose
// client speaks versions lo to hi (hi 0: lo alone, a client that predates
// maxProtocolVersion): the highest one both sides speak. ok is false when
// lo is outside [api.MinProtocolVersion, api.ProtocolVersion]; the
// version returned is then api.ProtocolVersion, the server's, for the
// refusal.
func negotiateVersion(lo, hi uint16) (version uint16, ok bool) {
	if lo < api.MinProtocolVersion || lo > api.ProtocolVersion {
		return api.ProtocolVersion, false
	}
	return max(lo, min(hi, api.ProtocolVersion)), true
}

func (c *conn) metadata(req request) (*response, error) {
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	m, err := f.NewMetadataResponse()
	if err != nil {
		return nil, err
	}
	var topics []engine.TopicInfo
	var missing []string
	var invalid error // the first name that cannot be a topic's
	if len(req.topics) == 0 {
		topics = c.describableTopics(c.srv.broker.ListTopics())
	} else {
		for _, name := range req.topics {
			if err := engine.ValidateTopicName(name); err != nil {
				// Not merely unknown: no topic can have this name, as the
				// gRPC plane's DescribeTopic says.
				if invalid == nil {
					invalid = err
				}
				continue
			}
			info, err := c.srv.broker.DescribeTopic(name)
			if err != nil {
				missing = append(missing, name)
				continue
			}
			topics = append(topics, info)
		}
	}
	if err := m.SetNodeId(c.srv.opts.NodeID); err != nil {
		return nil, err
	}
	if err := m.SetDataAddress(c.srv.dataAddress()); err != nil {
		return nil, err
	}
	l, err := m.NewTopics(int32(len(topics)))
	if err != nil {
		return nil, err
	}
	for i, t := range topics {
		if err := c.srv.encodeMetadataTopic(l.At(i), t); err != nil {
			return nil, err
		}
	}
	if err := c.srv.encodeBrokers(m); err != nil {
		return nil, err
	}
	switch {
	case invalid != nil:
		if err := setErr(invalid, m.NewError); err != nil {
			return nil, err
		}
	case len(missing) > 0:
		merr := api.NewError(api.CodeUnknownTopic, "unknown topics: %s", strings.Join(missing, ", "))
		if err := setErr(merr, m.NewError); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// dataAddress is the address clients should use for this node.
func (s *Server) dataAddress() string {
	if s.opts.AdvertisedAddr != "" {
		return s.opts.AdvertisedAddr
	}
	if a := s.Addr(); a != nil {
		return a.String()
	}
	return s.opts.Addr
}

func (c *conn) createTopic(req request) (*response, error) {
	var info engine.TopicInfo
	berr := c.srv.checkReplicationFactor(req.config.ReplicationFactor)
	if berr == nil {
		berr = c.srv.checkMinInsync(req.config.MinInsyncReplicas)
	}
	if berr == nil {
		info, berr = c.srv.broker.CreateTopic(req.name, int(req.partitions), req.config)
	}
	c.audit("topic.create", req.name, berr)
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	ct, err := f.NewCreateTopicResponse()
	if err != nil {
		return nil, err
	}
	if berr == nil {
		t, err := ct.NewTopic()
		if err != nil {
			return nil, err
		}
		if err := c.srv.encodeTopic(t, info, true); err != nil {
			return nil, err
		}
	}
	return r, setErr(berr, ct.NewError)
}

func (c *conn) describeTopic(req request) (*response, error) {
	info, berr := c.srv.broker.DescribeTopic(req.name)
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	dt, err := f.NewDescribeTopicResponse()
	if err != nil {
		return nil, err
	}
	if berr == nil {
		t, err := dt.NewTopic()
		if err != nil {
			return nil, err
		}
		if err := c.srv.encodeTopic(t, info, true); err != nil {
			return nil, err
		}
	}
	return r, setErr(berr, dt.NewError)
}

func (c *conn) listTopics(req request) (*response, error) {
	topics := c.describableTopics(c.srv.broker.ListTopics())
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	lt, err := f.NewListTopicsResponse()
	if err != nil {
		return nil, err
	}
	l, err := lt.NewTopics(int32(len(topics)))
	if err != nil {
		return nil, err
	}
	for i, t := range topics {
		if err := c.srv.encodeTopic(l.At(i), t, false); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// encodeTopic fills t from info (the replication factor of a bare engine,
// 0, reads as 1); partitionInfos, with their placement, only when
// withPartitions.
func (s *Server) encodeTopic(t api.TopicInfo, info engine.TopicInfo, withPartitions bool) error {
	if err := t.SetName(info.Name); err != nil {
		return err
	}
	t.SetPartitions(clampU32(info.PartitionCount))
	if err := t.SetTopicId(info.ID.Bytes()); err != nil {
		return err
	}
	cfg, err := t.NewConfig()
	if err != nil {
		return err
	}
	if err := cfg.SetSyncPolicy(info.Config.SyncPolicy); err != nil {
		return err
	}
	cfg.SetSegmentBytes(info.Config.SegmentBytes)
	cfg.SetRetentionBytes(info.Config.RetentionBytes)
	cfg.SetRetentionMs(info.Config.RetentionMs)
	cfg.SetMaxRecordBytes(info.Config.MaxRecordBytes)
	cfg.SetSegmentMs(info.Config.SegmentMs)
	cfg.SetMinInsyncReplicas(info.Config.MinInsyncReplicas)
	cfg.SetUncleanLeaderElection(info.Config.UncleanLeaderElection)
	cfg.SetLocalRetentionMs(info.Config.LocalRetentionMs)
	cfg.SetLocalRetentionBytes(info.Config.LocalRetentionBytes)
	t.SetReplicationFactor(uint32(max(info.Config.ReplicationFactor, 1)))
	if !withPartitions || len(info.Partitions) == 0 {
		return nil
	}
	l, err := t.NewPartitionInfos(int32(len(info.Partitions)))
	if err != nil {
		return err
	}
	for i, p := range info.Partitions {
		pi := l.At(i)
		pi.SetPartition(uint32(p.Partition))
		pi.SetLogStartOffset(p.LogStartOffset)
		pi.SetHighWatermark(p.HighWatermark)
		pi.SetLogEndOffset(p.LogEndOffset)
		pi.SetSizeBytes(p.SizeBytes)
		pi.SetSegmentCount(clampU32(p.SegmentCount))
		if err := s.encodePlacement(pi, p); err != nil {
			return err
		}
		if err := encodeRemote(pi, p.Remote); err != nil {
			return err
		}
		if err := setErr(p.Err, pi.NewError); err != nil {
			return err
		}
	}
	return nil
}

// encodeRemote sets pi's remote log stats; nil (tiered storage off) sets
// nothing.
func encodeRemote(pi api.PartitionInfo, r *engine.RemoteStats) error {
	if r == nil {
		return nil
	}
	w, err := pi.NewRemote()
	if err != nil {
		return err
	}
	w.SetLogStartOffset(r.LogStartOffset)
	w.SetEndOffset(r.EndOffset)
	w.SetSegments(clampU32(r.Segments))
	w.SetBytes(r.Bytes)
	w.SetLagSegments(clampU32(r.LagSegments))
	w.SetLagBytes(r.LagBytes)
	return nil
}

func (c *conn) publish(req request) (*response, error) {
	res, berr := c.appendInOrder(req)
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	p, err := f.NewPublishResponse()
	if err != nil {
		return nil, err
	}
	if err := p.SetTopic(req.topic); err != nil {
		return nil, err
	}
	p.SetPartition(req.partition)
	if berr == nil {
		p.SetBaseOffset(res.BaseOffset)
		p.SetRecordCount(res.RecordCount)
		p.SetLogAppendTime(res.LogAppendTime)
		p.SetDurability(api.Durability(res.Durability))
		// A broker that predates replication leaves Replicas 0: the
		// leader alone holds the batch.
		p.SetReplicas(uint32(max(res.Replicas, 1)))
	}
	p.SetThrottleTimeMs(throttleMs(c.recordQuota(quota.Produce, len(req.tail))))
	return r, setErr(berr, p.NewError)
}

// appendInOrder queues the publish's batch in the engine once the
// publishes read before it on this connection for the same partition are
// queued, then waits for its commit. A chained publish (PublishRequest
// chained) whose predecessor failed fails with the same error, unwritten:
// either here, when the predecessor was refused before it was queued, or
// in the engine's commit (engine.AppendAsync's after).
func (c *conn) appendInOrder(req request) (res engine.AppendResult, err error) {
	if req.link != nil {
		defer func() { c.unchainPublish(req, err) }()
	}
	pd, res, err := c.queueLinked(req)
	if err != nil || pd == nil {
		return res, err
	}
	res, err = pd.Wait(c.ctx)
	if !req.sharedTail {
		c.releaseTailAfter(pd, req.tail)
	}
	return res, err
}

// queueLinked queues the publish (or, with a synchronous broker, appends
// it and returns the result) and then releases the next publish of the
// chain, even on a panic.
func (c *conn) queueLinked(req request) (pd *engine.Pending, res engine.AppendResult, err error) {
	if req.link != nil {
		defer func() {
			if p := recover(); p != nil {
				err = api.NewError(api.CodeUnknown, "internal error")
				req.link.err = err
				close(req.link.queued)
				panic(p)
			}
			req.link.pending, req.link.err = pd, err
			close(req.link.queued)
		}()
	}
	pd, err = c.queuePublish(req)
	switch {
	case err == nil && pd == nil:
		// A synchronous broker: the next publish waits for this one. Its
		// tail is left to the garbage collector: Append may hold it past
		// a wait cut short.
		res, err = c.srv.broker.Append(c.appendCtx(req), req.topic, int(req.partition), req.tail)
	case err != nil && !req.sharedTail:
		c.releaseTail(req.tail) // refused before the broker kept it
	}
	return pd, res, err
}

// queuePublish waits until the previous publish of the chain is queued and
// queues this one behind it. A nil Pending with a nil error means the
// broker cannot queue without waiting: the caller appends synchronously.
func (c *conn) queuePublish(req request) (*engine.Pending, error) {
	var after *engine.Pending
	if req.prev != nil {
		select {
		case <-req.prev.queued:
		case <-c.ctx.Done():
			return nil, api.NewError(api.CodeShuttingDown, "connection closing")
		}
		if req.chained {
			if req.prev.err != nil {
				return nil, req.prev.err
			}
			after = req.prev.pending
		}
	}
	if len(req.tail) == 0 {
		return nil, api.NewError(api.CodeInvalidRequest, "publish without a records tail (recordsLength 0)")
	}
	if req.acks != api.Acks_all && req.acks != api.Acks_leader {
		return nil, api.NewError(api.CodeInvalidRequest, "publish acks %d: want all (0) or leader (1)", uint16(req.acks))
	}
	if err := c.authorize(req); err != nil {
		return nil, err
	}
	ab, ok := c.srv.broker.(AsyncAppender)
	if !ok {
		return nil, nil
	}
	return ab.AppendAsync(c.appendCtx(req), req.topic, int(req.partition), req.tail, after)
}

// appendCtx is the context of a publish's append: the connection's,
// carrying the request's acks (engine.WithAcks; checked by queuePublish).
func (c *conn) appendCtx(req request) context.Context {
	acks := engine.AcksAll
	if req.acks == api.Acks_leader {
		acks = engine.AcksLeader
	}
	return engine.WithAcks(c.ctx, acks)
}

// fetchParams returns the bytes and long-poll wait of a fetch: maxBytes 0
// or over the batch limit becomes the batch limit, so a response tail never
// exceeds what the client's reader accepts (one batch may still exceed a
// smaller maxBytes, KIP-74); maxWaitMs is capped at MaxFetchWait.
func (s *Server) fetchParams(req request) (maxBytes int, maxWait time.Duration) {
	maxBytes = int(req.maxBytes)
	if req.maxBytes == 0 || req.maxBytes > s.maxBatchBytes {
		maxBytes = int(s.maxBatchBytes)
	}
	maxWait = min(time.Duration(req.maxWaitMs)*time.Millisecond, s.opts.MaxFetchWait)
	return maxBytes, maxWait
}

func (c *conn) fetch(req request) (*response, error) {
	maxBytes, maxWait := c.srv.fetchParams(req)
	// A long poll ends when the connection closes or Shutdown starts.
	ctx, cancel := context.WithCancel(c.pollCtx)
	stop := context.AfterFunc(c.srv.drainCtx, cancel)
	var res *engine.FetchResult
	berr := req.idErr
	if berr == nil {
		res, berr = c.srv.broker.FetchID(ctx, req.topic, req.topicID, int(req.partition), req.offset, maxBytes, maxWait)
	}
	stop()
	cancel()
	res, berr = c.settleFetch(res, berr, "fetch")
	r, f, err := newResponse(req)
	if err != nil {
		if res != nil {
			res.Release()
		}
		return nil, err
	}
	r.fetch = res
	fr, err := f.NewFetchResponse()
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
		fr.SetRecordsLength(uint32(res.Bytes()))
		fr.SetThrottleTimeMs(throttleMs(c.recordQuota(quota.Fetch, res.Bytes())))
	}
	return r, setErr(berr, fr.NewError)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (c *conn) commitOffsets(req request) (*response, error) {
	var out []engine.OffsetCommit
	berr := req.idErr
	if berr == nil {
		out, berr = c.srv.broker.CommitOffsets(req.group, req.memberID, req.generation, req.commits)
	}
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	co, err := f.NewCommitOffsetsResponse()
	if err != nil {
		return nil, err
	}
	if err := encodeOffsets(out, co.NewOffsets); err != nil {
		return nil, err
	}
	return r, setErr(berr, co.NewError)
}

func (c *conn) fetchOffsets(req request) (*response, error) {
	out, berr := c.srv.broker.FetchOffsets(req.group, req.topic)
	out = c.describableOffsets(out)
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	fo, err := f.NewFetchOffsetsResponse()
	if err != nil {
		return nil, err
	}
	if err := encodeOffsets(out, fo.NewOffsets); err != nil {
		return nil, err
	}
	return r, setErr(berr, fo.NewError)
}

func encodeOffsets(offsets []engine.OffsetCommit, newList func(int32) (api.OffsetCommit_List, error)) error {
	l, err := newList(int32(len(offsets)))
	if err != nil {
		return err
	}
	for i, o := range offsets {
		w := l.At(i)
		if err := w.SetTopic(o.Topic); err != nil {
			return err
		}
		w.SetPartition(uint32(o.Partition))
		w.SetOffset(o.Offset)
		if err := w.SetMetadata(o.Metadata); err != nil {
			return err
		}
		if err := w.SetTopicId(o.TopicID.Bytes()); err != nil {
			return err
		}
		if err := setErr(o.Err, w.NewError); err != nil {
			return err
		}
	}
	return nil
}

// settleFetch is the common end of a fetch and a replica fetch before the
// answer is built: a context error while the server shuts down becomes
// SHUTTING_DOWN, a result that came with an error is released, and a
// result whose bytes do not fit the records tail's u32 length is released
// and refused (UNKNOWN, naming what).
func (c *conn) settleFetch(res *engine.FetchResult, berr error, what string) (*engine.FetchResult, error) {
	if berr != nil && c.srv.shutting.Load() && isContextErr(berr) {
		berr = api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	if berr != nil && res != nil {
		res.Release()
		res = nil
	}
	if berr == nil && res != nil && uint64(res.Bytes()) > math.MaxUint32 {
		res.Release()
		return nil, api.NewError(api.CodeUnknown, "%s result over 4 GiB", what)
	}
	return res, berr
}
