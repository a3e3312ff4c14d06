package sdk

import (
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// handle answers one request; a nil message sends nothing.
// link, for a publish, orders it behind the connection's previous publish to
// the partition and receives its outcome.
func (s *fakeServer) handle(req api.Frame, tail []byte, stopped chan struct{}, link *fakeLink) (*capnp.Message, [][]byte) {
	msg, f := newResponse(req)
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	s.mu.Lock()
	errResp := s.errorResponseFor
	s.mu.Unlock()
	if errResp != api.Frame_Which_handshakeRequest && req.Which() == errResp {
		w, _ := f.NewErrorResponse()
		must(api.ToWire(w, api.NewError(api.CodeInvalidRequest, "cannot parse")))
		return msg, nil
	}
	switch req.Which() {
	case api.Frame_Which_handshakeRequest:
		r, _ := f.NewHandshakeResponse()
		// The fake speaks version 1 alone, as a server that predates
		// publishBatches: the SDK's produce pipeline sends one publish
		// per batch to it.
		r.SetProtocolVersion(s.limits.ProtocolVersion)
		must(r.SetServerVersion(s.limits.ServerVersion))
		must(r.SetNodeId(s.limits.NodeID))
		r.SetMaxRecordBytes(s.limits.MaxRecordBytes)
		r.SetMaxBatchBytes(s.limits.MaxBatchBytes)
		r.SetMaxFrameBytes(s.limits.MaxFrameBytes)
		r.SetMaxInFlight(s.limits.MaxInFlight)
		hr, _ := req.HandshakeRequest()
		s.mu.Lock()
		reject := s.rejectHandshake
		s.mu.Unlock()
		if reject != 0 {
			setErr(r.NewError, api.NewError(reject, "rejected"))
		} else if hr.ProtocolVersion() != api.MinProtocolVersion {
			setErr(r.NewError, api.NewError(api.CodeUnsupportedVersion, "version %d", hr.ProtocolVersion()))
		}
	case api.Frame_Which_publishRequest:
		pr, _ := req.PublishRequest()
		topic, _ := pr.Topic()
		r, _ := f.NewPublishResponse()
		must(r.SetTopic(topic))
		r.SetPartition(pr.Partition())
		var base uint64
		err := link.chainErr
		if err == nil {
			err = s.cluster.gate(s, topic, pr.Partition())
		}
		if err == nil {
			base, err = s.appendBatch(topic, pr.Partition(), tail)
		}
		link.err = err
		if err == nil {
			h, _ := batch.ParseHeader(tail)
			r.SetBaseOffset(base)
			r.SetRecordCount(h.RecordCount)
			r.SetLogAppendTime(time.Now().UnixMilli())
			r.SetDurability(api.Durability_synced)
			s.mu.Lock()
			if n := s.idem.replicas; n > 0 && pr.Acks() == api.Acks_all {
				r.SetDurability(api.Durability_replicated)
				r.SetReplicas(n)
			} else if n > 0 {
				r.SetReplicas(1)
			}
			s.mu.Unlock()
			if s.takeDrop(topicPartition{topic, pr.Partition()}) {
				return nil, nil
			}
		}
		setErr(r.NewError, err)
	case api.Frame_Which_fetchRequest:
		fr, _ := req.FetchRequest()
		topic, _ := fr.Topic()
		var hw, ls uint64
		var batches [][]byte
		err := s.cluster.gate(s, topic, fr.Partition())
		if err == nil {
			hw, ls, batches, err = s.fetch(topic, fr.Partition(), fr.Offset(), fr.MaxBytes(), time.Duration(fr.MaxWaitMs())*time.Millisecond, stopped)
		}
		r, _ := f.NewFetchResponse()
		must(r.SetTopic(topic))
		r.SetPartition(fr.Partition())
		r.SetHighWatermark(hw)
		r.SetLogStartOffset(ls)
		n := 0
		for _, b := range batches {
			n += len(b)
		}
		r.SetRecordsLength(uint32(n))
		setErr(r.NewError, err)
		return msg, batches
	case api.Frame_Which_metadataRequest:
		mr, _ := req.MetadataRequest()
		names, _ := mr.Topics()
		var want []string
		for i := 0; i < names.Len(); i++ {
			n, _ := names.At(i)
			want = append(want, n)
		}
		r, _ := f.NewMetadataResponse()
		must(r.SetNodeId(s.limits.NodeID))
		s.mu.Lock()
		if s.leader != (leaderAddr{}) {
			must(r.SetNodeId(s.leader.nodeID))
			must(r.SetDataAddress(s.leader.addr))
		}
		s.mu.Unlock()
		infos := s.topicInfos(want, false)
		s.cluster.describe(r, infos)
		list, _ := r.NewTopics(int32(len(infos)))
		for i, ti := range infos {
			fillTopic(list.At(i), ti)
		}
	case api.Frame_Which_listTopicsRequest:
		r, _ := f.NewListTopicsResponse()
		infos := s.topicInfos(nil, false)
		list, _ := r.NewTopics(int32(len(infos)))
		for i, ti := range infos {
			fillTopic(list.At(i), ti)
		}
	case api.Frame_Which_describeTopicRequest:
		dr, _ := req.DescribeTopicRequest()
		name, _ := dr.Name()
		r, _ := f.NewDescribeTopicResponse()
		infos := s.topicInfos([]string{name}, true)
		if len(infos) == 0 {
			setErr(r.NewError, api.NewError(api.CodeUnknownTopic, "no topic %q", name))
			break
		}
		t, _ := r.NewTopic()
		fillTopic(t, infos[0])
	case api.Frame_Which_createTopicRequest:
		cr, _ := req.CreateTopicRequest()
		name, _ := cr.Name()
		r, _ := f.NewCreateTopicResponse()
		s.mu.Lock()
		_, exists := s.topics[name]
		s.mu.Unlock()
		switch {
		case exists:
			setErr(r.NewError, api.NewError(api.CodeTopicExists, "topic %q exists", name))
		case name == "" || cr.Partitions() == 0:
			setErr(r.NewError, api.NewError(api.CodeInvalidRequest, "bad topic"))
		default:
			s.createTopic(name, int(cr.Partitions()))
			wc, _ := cr.Config()
			s.mu.Lock()
			if sp, _ := wc.SyncPolicy(); sp != "" {
				s.topics[name].cfg.SyncPolicy = sp
			}
			if wc.RetentionMs() != 0 {
				s.topics[name].cfg.RetentionMs = wc.RetentionMs()
			}
			s.mu.Unlock()
			t, _ := r.NewTopic()
			fillTopic(t, s.topicInfos([]string{name}, true)[0])
		}
	case api.Frame_Which_commitOffsetsRequest:
		s.commitOffsets(req, f)
	case api.Frame_Which_initProducerIdRequest:
		s.initProducerID(f)
	case api.Frame_Which_fetchOffsetsRequest:
		fo, _ := req.FetchOffsetsRequest()
		group, _ := fo.Group()
		topic, _ := fo.Topic()
		r, _ := f.NewFetchOffsetsResponse()
		s.mu.Lock()
		var offs []OffsetCommit
		for tp, off := range s.groups[group] {
			if topic == "" || tp.topic == topic {
				offs = append(offs, OffsetCommit{Topic: tp.topic, Partition: tp.partition, Offset: off})
			}
		}
		s.mu.Unlock()
		list, _ := r.NewOffsets(int32(len(offs)))
		for i, o := range offs {
			must(list.At(i).SetTopic(o.Topic))
			list.At(i).SetPartition(o.Partition)
			list.At(i).SetOffset(o.Offset)
		}
	case api.Frame_Which_subscribeRequest:
		s.mu.Lock()
		end := s.endSubscriptions
		s.mu.Unlock()
		if !end {
			w, _ := f.NewErrorResponse()
			must(api.ToWire(w, api.NewError(api.CodeInvalidRequest, "unsupported request %v", req.Which())))
			break
		}
		// A push without records and without error: the subscription ended.
		sr, _ := req.SubscribeRequest()
		topic, _ := sr.Topic()
		p, _ := f.NewPushBatches()
		must(p.SetTopic(topic))
		p.SetPartition(sr.Partition())
	default:
		w, _ := f.NewErrorResponse()
		must(api.ToWire(w, api.NewError(api.CodeInvalidRequest, "unsupported request %v", req.Which())))
	}
	return msg, nil
}

func (s *fakeServer) commitOffsets(req, f api.Frame) {
	cr, _ := req.CommitOffsetsRequest()
	group, _ := cr.Group()
	in, _ := cr.Offsets()
	r, _ := f.NewCommitOffsetsResponse()
	out, _ := r.NewOffsets(int32(in.Len()))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups[group] == nil {
		s.groups[group] = map[topicPartition]uint64{}
	}
	for i := 0; i < in.Len(); i++ {
		o := in.At(i)
		topic, _ := o.Topic()
		_ = out.At(i).SetTopic(topic)
		out.At(i).SetPartition(o.Partition())
		out.At(i).SetOffset(o.Offset())
		t, ok := s.topics[topic]
		switch {
		case !ok:
			setErr(out.At(i).NewError, api.NewError(api.CodeUnknownTopic, "no topic %q", topic))
		case int(o.Partition()) >= len(t.parts):
			setErr(out.At(i).NewError, api.NewError(api.CodeUnknownPartition, "no partition"))
		case o.Offset() > t.parts[o.Partition()].next:
			p := t.parts[o.Partition()]
			setErr(out.At(i).NewError, api.NewRangeError(api.CodeOffsetOutOfRange, p.logStart, p.next, "beyond the high watermark"))
		default:
			s.groups[group][topicPartition{topic, o.Partition()}] = o.Offset()
		}
	}
}

// topicInfos describes the named topics (all when names is empty) that
// exist.
func (s *fakeServer) topicInfos(names []string, partitions bool) []TopicInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(names) == 0 {
		for n := range s.topics {
			names = append(names, n)
		}
	}
	var out []TopicInfo
	for _, n := range names {
		t, ok := s.topics[n]
		if !ok {
			continue
		}
		ti := TopicInfo{Name: n, Partitions: uint32(len(t.parts)), Config: t.cfg}
		if partitions {
			for i, p := range t.parts {
				size := 0
				for _, b := range p.batches {
					size += len(b)
				}
				ti.PartitionInfos = append(ti.PartitionInfos, PartitionInfo{
					Partition: uint32(i), LogStartOffset: p.logStart, HighWatermark: p.next,
					LogEndOffset: p.next, SizeBytes: int64(size), SegmentCount: 1,
				})
			}
		}
		out = append(out, ti)
	}
	return out
}

func fillTopic(w api.TopicInfo, ti TopicInfo) {
	_ = w.SetName(ti.Name)
	w.SetPartitions(ti.Partitions)
	wc, _ := w.NewConfig()
	_ = topicConfigToWire(wc, ti.Config)
	if len(ti.PartitionInfos) == 0 {
		return
	}
	pl, _ := w.NewPartitionInfos(int32(len(ti.PartitionInfos)))
	for i, pi := range ti.PartitionInfos {
		p := pl.At(i)
		p.SetPartition(pi.Partition)
		p.SetLogStartOffset(pi.LogStartOffset)
		p.SetHighWatermark(pi.HighWatermark)
		p.SetLogEndOffset(pi.LogEndOffset)
		p.SetSizeBytes(pi.SizeBytes)
		p.SetSegmentCount(pi.SegmentCount)
		_ = p.SetLeader(pi.Leader)
		p.SetLeaderEpoch(pi.LeaderEpoch)
	}
}
