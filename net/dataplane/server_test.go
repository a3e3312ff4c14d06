package dataplane

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
)

// brokerKind names a Broker implementation the protocol tests run against.
// The engine kind is added by engine_test.go.
type brokerKind struct {
	name string
	open func(t testing.TB) Broker
}

var brokerKinds = []brokerKind{
	{"mem", func(testing.TB) Broker { return newMemBroker() }},
}

// forEachBroker runs fn as a subtest per broker kind.
func forEachBroker(t *testing.T, fn func(t *testing.T, b Broker)) {
	for _, k := range brokerKinds {
		t.Run(k.name, func(t *testing.T) { fn(t, k.open(t)) })
	}
}

func TestHandshakeStatesLimits(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{MaxInFlightPerConn: 7, NodeID: "n7", ServerVersion: "v1.2.3"})
		_, hs := connect(t, h.addr)
		lim := b.Limits()
		if err := api.FromWire(mustWire(hs.Error())); err != nil {
			t.Fatalf("handshake error: %v", err)
		}
		sv, _ := hs.ServerVersion()
		node, _ := hs.NodeId()
		checks := []struct {
			name      string
			got, want any
		}{
			{"protocolVersion", hs.ProtocolVersion(), api.ProtocolVersion},
			{"maxRecordBytes", hs.MaxRecordBytes(), uint32(lim.MaxRecordBytes)},
			{"maxBatchBytes", hs.MaxBatchBytes(), uint32(lim.MaxBatchBytes)},
			{"maxFrameBytes", hs.MaxFrameBytes(), uint32(api.DefaultMaxFrameBytes)},
			{"maxInFlight", hs.MaxInFlight(), uint32(7)},
			{"serverVersion", sv, "v1.2.3"},
			{"nodeId", node, "n7"},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
			}
		}
	})
}

// mustWire adapts a (WireError, error) pair for api.FromWire.
func mustWire(w api.WireError, err error) api.WireError {
	if err != nil {
		return api.WireError{}
	}
	return w
}

func TestHandshakeRefusals(t *testing.T) {
	b := newMemBroker()
	h := startServer(t, b, Options{})
	t.Run("unsupported version", func(t *testing.T) {
		c := dialClient(t, h.addr)
		hs := c.handshake(api.ProtocolVersion + 1)
		if code := wireErr(hs.Error()); code != api.CodeUnsupportedVersion {
			t.Fatalf("error code %v, want UNSUPPORTED_VERSION", code)
		}
		if hs.ProtocolVersion() != api.ProtocolVersion {
			t.Errorf("protocolVersion %d, want %d", hs.ProtocolVersion(), api.ProtocolVersion)
		}
		c.expectClosed()
	})
	t.Run("first frame not a handshake", func(t *testing.T) {
		c := dialClient(t, h.addr)
		r := c.call(listTopicsReq, nil)
		expectWhich(t, r, api.Frame_Which_errorResponse)
		if code := wireErr(r.f.ErrorResponse()); code != api.CodeInvalidRequest {
			t.Fatalf("code %v, want INVALID_REQUEST", code)
		}
		c.expectClosed()
	})
	t.Run("second handshake", func(t *testing.T) {
		c, _ := connect(t, h.addr)
		r := c.call(func(f api.Frame) error {
			hr, err := f.NewHandshakeRequest()
			hr.SetProtocolVersion(api.ProtocolVersion)
			return err
		}, nil)
		expectWhich(t, r, api.Frame_Which_errorResponse)
		if code := wireErr(r.f.ErrorResponse()); code != api.CodeInvalidRequest {
			t.Fatalf("answered %v code %v, want errorResponse INVALID_REQUEST", r.f.Which(), code)
		}
		// The connection stays usable.
		if r := c.call(listTopicsReq, nil); r.f.Which() != api.Frame_Which_listTopicsResponse {
			t.Fatalf("answered with %v", r.f.Which())
		}
	})
}

func TestTopicAdmin(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		c, _ := connect(t, h.addr)

		ct := c.createTopic("orders", 3)
		if err := api.FromWire(mustWire(ct.Error())); err != nil {
			t.Fatalf("create: %v", err)
		}
		info, _ := ct.Topic()
		if name, _ := info.Name(); name != "orders" || info.Partitions() != 3 {
			t.Fatalf("created %q with %d partitions", name, info.Partitions())
		}
		if code := wireErr(c.createTopic("orders", 1).Error()); code != api.CodeTopicExists {
			t.Errorf("second create: code %v, want TOPIC_EXISTS", code)
		}

		r := c.call(describeTopicReq("orders"), nil)
		expectWhich(t, r, api.Frame_Which_describeTopicResponse)
		dt, err := r.f.DescribeTopicResponse()
		if err != nil {
			t.Fatalf("describe answered with %v", r.f.Which())
		}
		ti, _ := dt.Topic()
		pis, _ := ti.PartitionInfos()
		if pis.Len() != 3 {
			t.Fatalf("describe: %d partition infos, want 3", pis.Len())
		}
		for i := 0; i < pis.Len(); i++ {
			if p := pis.At(i); p.Partition() != uint32(i) || p.HighWatermark() != 0 {
				t.Errorf("partition info %d: partition %d hw %d", i, p.Partition(), p.HighWatermark())
			}
		}

		r = c.call(describeTopicReq("nope"), nil)
		expectWhich(t, r, api.Frame_Which_describeTopicResponse)
		dt, _ = r.f.DescribeTopicResponse()
		if code := wireErr(dt.Error()); code != api.CodeUnknownTopic {
			t.Errorf("describe unknown: code %v, want UNKNOWN_TOPIC", code)
		}

		c.createTopic("events", 1)
		r = c.call(listTopicsReq, nil)
		expectWhich(t, r, api.Frame_Which_listTopicsResponse)
		lt, _ := r.f.ListTopicsResponse()
		ts, _ := lt.Topics()
		names := map[string]bool{}
		for i := 0; i < ts.Len(); i++ {
			n, _ := ts.At(i).Name()
			names[n] = true
		}
		if len(names) != 2 || !names["orders"] || !names["events"] {
			t.Errorf("list: %v, want orders and events", names)
		}

		r = c.call(metadataReq(), nil)
		expectWhich(t, r, api.Frame_Which_metadataResponse)
		md, _ := r.f.MetadataResponse()
		mts, _ := md.Topics()
		node, _ := md.NodeId()
		addr, _ := md.DataAddress()
		if mts.Len() != 2 || node != "node-1" || addr != h.addr {
			t.Errorf("metadata: %d topics, node %q, address %q (want 2, node-1, %s)", mts.Len(), node, addr, h.addr)
		}
		r = c.call(metadataReq("events", "ghost"), nil)
		expectWhich(t, r, api.Frame_Which_metadataResponse)
		md, _ = r.f.MetadataResponse()
		mts, _ = md.Topics()
		if code := wireErr(md.Error()); mts.Len() != 1 || code != api.CodeUnknownTopic {
			t.Errorf("metadata events+ghost: %d topics, code %v; want 1 and UNKNOWN_TOPIC", mts.Len(), code)
		}
	})
}

func TestPublishThenFetchReturnsExactBatches(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		c, _ := connect(t, h.addr)
		c.createTopic("t", 1)

		b1 := buildBatch(t, []byte("a"), []byte("bb"), []byte("ccc"))
		b2 := buildBatch(t, []byte("dddd"), []byte{})
		want := [][]byte{bytes.Clone(b1), bytes.Clone(b2)}
		for i, bb := range [][]byte{b1, b2} {
			p := c.publish("t", 0, bb)
			if err := api.FromWire(mustWire(p.Error())); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
			wantBase := []uint64{0, 3}[i]
			if p.BaseOffset() != wantBase || p.RecordCount() != uint32([]int{3, 2}[i]) {
				t.Fatalf("publish %d: base %d count %d", i, p.BaseOffset(), p.RecordCount())
			}
			if p.Durability() == api.Durability_none || p.LogAppendTime() == 0 {
				t.Errorf("publish %d: durability %v, logAppendTime %d", i, p.Durability(), p.LogAppendTime())
			}
			batch.SetBaseOffset(want[i], wantBase)
		}

		fr, tail := c.fetch("t", 0, 0, 1<<20, 0)
		if err := api.FromWire(mustWire(fr.Error())); err != nil {
			t.Fatalf("fetch: %v", err)
		}
		if fr.HighWatermark() != 5 || fr.LogStartOffset() != 0 {
			t.Errorf("fetch: hw %d logStart %d, want 5 and 0", fr.HighWatermark(), fr.LogStartOffset())
		}
		if int(fr.RecordsLength()) != len(tail) || !bytes.Equal(tail, append(bytes.Clone(want[0]), want[1]...)) {
			t.Fatalf("fetch tail of %d bytes differs from the published batches (%d + %d bytes)", len(tail), len(want[0]), len(want[1]))
		}

		// From offset 3 the second batch comes back, and its empty value is
		// an empty (not missing) value.
		_, tail = c.fetch("t", 0, 3, 1<<20, 0)
		if !bytes.Equal(tail, want[1]) {
			t.Fatalf("fetch from 3: %d bytes, want the second batch (%d bytes)", len(tail), len(want[1]))
		}
		it, err := batch.NewIter(tail)
		if err != nil {
			t.Fatal(err)
		}
		var got [][]byte
		for it.Next() {
			r := it.Record()
			if r.Value == nil {
				t.Errorf("record %d: nil value", r.Offset)
			}
			got = append(got, bytes.Clone(r.Value))
		}
		if err := it.Err(); err != nil || len(got) != 2 || string(got[0]) != "dddd" || len(got[1]) != 0 {
			t.Fatalf("records %q, err %v", got, err)
		}

		// At the high watermark, without a wait: an empty response.
		fr, tail = c.fetch("t", 0, 5, 1<<20, 0)
		if err := api.FromWire(mustWire(fr.Error())); err != nil || len(tail) != 0 || fr.RecordsLength() != 0 {
			t.Fatalf("fetch at hw: err %v, %d bytes", err, len(tail))
		}
	})
}

func TestRequestErrors(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		c, _ := connect(t, h.addr)
		c.createTopic("t", 1)
		lim := b.Limits()
		corrupt := buildBatch(t, []byte("x"))
		corrupt[len(corrupt)-1] ^= 0xff

		cases := []struct {
			name      string
			topic     string
			partition uint32
			batch     []byte
			want      api.Code
		}{
			{"unknown topic", "ghost", 0, buildBatch(t, []byte("x")), api.CodeUnknownTopic},
			{"unknown partition", "t", 9, buildBatch(t, []byte("x")), api.CodeUnknownPartition},
			{"record over the limit", "t", 0, buildBatch(t, make([]byte, lim.MaxRecordBytes+1)), api.CodeMessageTooLarge},
			{"corrupt batch", "t", 0, corrupt, api.CodeCorruptBatch},
			{"no tail", "t", 0, nil, api.CodeInvalidRequest},
		}
		for _, tc := range cases {
			p := c.publish(tc.topic, tc.partition, tc.batch)
			if code := wireErr(p.Error()); code != tc.want {
				e := api.FromWire(mustWire(p.Error()))
				t.Errorf("%s: code %v (%v), want %v", tc.name, code, e, tc.want)
			}
		}
		fr, _ := c.fetch("ghost", 0, 0, 0, 0)
		if code := wireErr(fr.Error()); code != api.CodeUnknownTopic {
			t.Errorf("fetch unknown topic: code %v", code)
		}
		fr, _ = c.fetch("t", 0, 1000, 0, 0)
		if code := wireErr(fr.Error()); code != api.CodeOffsetOutOfRange {
			t.Errorf("fetch beyond the end: code %v", code)
		}
		// After every error the connection still serves.
		if p := c.publish("t", 0, buildBatch(t, []byte("ok"))); wireErr(p.Error()) != api.CodeNone {
			t.Fatalf("publish after errors: %v", api.FromWire(mustWire(p.Error())))
		}
	})
}

func TestUnservedFrameMembersGetInvalidRequest(t *testing.T) {
	h := startServer(t, newMemBroker(), Options{})
	c, _ := connect(t, h.addr)
	cases := []struct {
		name  string
		build func(api.Frame) error
		tail  []byte
	}{
		{"publishResponse", func(f api.Frame) error { _, err := f.NewPublishResponse(); return err }, nil},
		{"errorResponse", func(f api.Frame) error { _, err := f.NewErrorResponse(); return err }, nil},
		{"fetchResponse with a tail", func(f api.Frame) error {
			r, err := f.NewFetchResponse()
			r.SetRecordsLength(5)
			return err
		}, []byte("12345")},
		{"empty frame", func(f api.Frame) error { return nil }, nil}, // union defaults to handshakeRequest
	}
	for _, tc := range cases {
		r := c.call(tc.build, tc.tail)
		expectWhich(t, r, api.Frame_Which_errorResponse)
		if code := wireErr(r.f.ErrorResponse()); code != api.CodeInvalidRequest {
			t.Errorf("%s: answered %v code %v, want errorResponse INVALID_REQUEST", tc.name, r.f.Which(), code)
		}
	}
	// The skipped tail kept the stream in step.
	if r := c.call(listTopicsReq, nil); r.f.Which() != api.Frame_Which_listTopicsResponse {
		t.Fatalf("answered with %v", r.f.Which())
	}
}

func TestCommitAndFetchOffsets(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		c, _ := connect(t, h.addr)
		c.createTopic("t", 2)
		c.publish("t", 0, buildBatch(t, []byte("a"), []byte("b")))
		r := c.call(func(f api.Frame) error {
			req, err := f.NewCommitOffsetsRequest()
			if err != nil {
				return err
			}
			req.SetGeneration(-1)
			if err := req.SetGroup("g"); err != nil {
				return err
			}
			l, err := req.NewOffsets(2)
			if err != nil {
				return err
			}
			_ = l.At(0).SetTopic("t")
			l.At(0).SetOffset(2)
			_ = l.At(0).SetMetadata("m")
			_ = l.At(1).SetTopic("ghost")
			return nil
		}, nil)
		expectWhich(t, r, api.Frame_Which_commitOffsetsResponse)
		co, err := r.f.CommitOffsetsResponse()
		if err != nil {
			t.Fatalf("commit answered with %v", r.f.Which())
		}
		offs, _ := co.Offsets()
		if offs.Len() != 2 || wireErr(offs.At(0).Error()) != api.CodeNone || wireErr(offs.At(1).Error()) == api.CodeNone {
			t.Fatalf("commit: %d entries, errors %v / %v", offs.Len(), wireErr(offs.At(0).Error()), wireErr(offs.At(1).Error()))
		}
		r = c.call(func(f api.Frame) error {
			req, err := f.NewFetchOffsetsRequest()
			if err != nil {
				return err
			}
			_ = req.SetTopic("t")
			return req.SetGroup("g")
		}, nil)
		expectWhich(t, r, api.Frame_Which_fetchOffsetsResponse)
		fo, err := r.f.FetchOffsetsResponse()
		if err != nil {
			t.Fatalf("fetchOffsets answered with %v", r.f.Which())
		}
		offs, _ = fo.Offsets()
		if offs.Len() != 1 || offs.At(0).Offset() != 2 || offs.At(0).Partition() != 0 {
			t.Fatalf("fetchOffsets: %d entries", offs.Len())
		}
		if md, _ := offs.At(0).Metadata(); md != "m" {
			t.Errorf("metadata %q, want m", md)
		}
	})
}

func TestLongPollFetchWokenByPublish(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		consumer, _ := connect(t, h.addr)
		producer, _ := connect(t, h.addr)
		consumer.createTopic("t", 1)

		start := time.Now()
		id := consumer.send(fetchReq("t", 0, 0, 1<<20, 20_000), nil)
		waitFor(t, "fetch in flight", func() bool { return totalInFlight(h.srv) == 1 })
		bb := buildBatch(t, []byte("wake"))
		producer.publish("t", 0, bb)
		r := consumer.recv()
		if r.f.CorrelationId() != id {
			t.Fatalf("correlationId %d, want %d", r.f.CorrelationId(), id)
		}
		if elapsed := time.Since(start); elapsed > 10*time.Second {
			t.Fatalf("long poll answered after %v: not woken by the publish", elapsed)
		}
		if !bytes.Equal(r.tail, bb) {
			t.Fatalf("fetched %d bytes, want the published batch of %d", len(r.tail), len(bb))
		}
	})
}

func TestLongPollFetchTimesOutEmpty(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		c, _ := connect(t, h.addr)
		c.createTopic("t", 1)
		start := time.Now()
		fr, tail := c.fetch("t", 0, 0, 0, 50)
		if err := api.FromWire(mustWire(fr.Error())); err != nil || len(tail) != 0 {
			t.Fatalf("err %v, %d bytes", err, len(tail))
		}
		if elapsed := time.Since(start); elapsed < 40*time.Millisecond {
			t.Errorf("answered after %v, before maxWaitMs 50", elapsed)
		}
	})
}

// totalInFlight sums the requests in flight over the server's connections.
func totalInFlight(s *Server) int64 {
	var n int64
	for _, c := range s.snapshotConns() {
		n += c.inflight.Load()
	}
	return n
}

func TestPipelinedRequestsCompleteOutOfOrder(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		c, _ := connect(t, h.addr)
		c.createTopic("t", 2)

		// A long poll on the empty partition 1, then many publishes to
		// partition 0 pipelined behind it without reading a response.
		fetchID := c.send(fetchReq("t", 1, 0, 0, 20_000), nil)
		const n = 50
		order := map[uint64]uint64{} // correlation id -> send position
		for i := 0; i < n; i++ {
			bb := buildBatch(t, []byte(fmt.Sprint(i)))
			order[c.send(publishReq("t", 0, len(bb)), bb)] = uint64(i)
		}
		// Every publish is answered while the earlier fetch still waits,
		// and publishes to one partition from one connection are appended
		// in the order they were sent.
		for seen := 0; seen < n; seen++ {
			r := c.recv()
			id := r.f.CorrelationId()
			if id == fetchID {
				t.Fatalf("the long-poll fetch was answered before the later publishes")
			}
			pos, ok := order[id]
			if !ok {
				t.Fatalf("unexpected correlationId %d", id)
			}
			delete(order, id)
			expectWhich(t, r, api.Frame_Which_publishResponse)
			p, err := r.f.PublishResponse()
			if err != nil || wireErr(p.Error()) != api.CodeNone {
				t.Fatalf("publish %d answered with %v", pos, r.f.Which())
			}
			if p.BaseOffset() != pos {
				t.Errorf("publish sent %dth got offset %d", pos, p.BaseOffset())
			}
		}
		// A publish to partition 1 wakes the fetch; both answers arrive.
		wake := buildBatch(t, []byte("wake"))
		pubID := c.send(publishReq("t", 1, len(wake)), wake)
		got := map[uint64]reply{}
		for len(got) < 2 {
			r := c.recv()
			got[r.f.CorrelationId()] = r
		}
		if _, ok := got[pubID]; !ok {
			t.Fatal("no publish response")
		}
		fr, ok := got[fetchID]
		if !ok || !bytes.Equal(fr.tail, wake) {
			t.Fatalf("fetch response missing or wrong tail")
		}
	})
}

func TestResponseOverFrameLimitIsRefused(t *testing.T) {
	b := newMemBroker()
	for i := 0; i < 100; i++ {
		if _, err := b.CreateTopic(fmt.Sprintf("a-rather-long-topic-name-%03d", i), 1, engine.TopicConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	h := startServer(t, b, Options{MaxFrameBytes: 4096})
	c, hs := connect(t, h.addr)
	if hs.MaxFrameBytes() != 4096 {
		t.Fatalf("maxFrameBytes %d", hs.MaxFrameBytes())
	}
	r := c.call(listTopicsReq, nil)
	expectWhich(t, r, api.Frame_Which_errorResponse)
	if code := wireErr(r.f.ErrorResponse()); code != api.CodeMessageTooLarge {
		t.Fatalf("code %v, want MESSAGE_TOO_LARGE", code)
	}
	// Smaller answers still go through on the same connection.
	r = c.call(describeTopicReq("a-rather-long-topic-name-007"), nil)
	expectWhich(t, r, api.Frame_Which_describeTopicResponse)
}

// TestManyClientsPipelining runs several producers pipelining publishes
// over the same partitions, then reads every partition back: no record is
// lost or duplicated, offsets are dense, and each producer's batches to a
// partition appear in the order it sent them.
func TestManyClientsPipelining(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		admin, _ := connect(t, h.addr)
		const producers, perProducer, partitions = 6, 40, 3
		admin.createTopic("t", partitions)

		done := make(chan error, producers)
		for p := 0; p < producers; p++ {
			c, _ := connect(t, h.addr)
			go func() {
				for i := 0; i < perProducer; i++ {
					var bb batch.Builder
					bb.Add([]byte(fmt.Sprint(p)), []byte(fmt.Sprint(i)), nil, 0)
					buf, err := bb.Build()
					if err != nil {
						done <- err
						return
					}
					msg, f, _ := api.NewFrameMessage(uint64(i + 1))
					if err := publishReq("t", uint32(i%partitions), len(buf))(f); err != nil {
						done <- err
						return
					}
					if err := api.WriteFrame(c.nc, msg, buf); err != nil {
						done <- err
						return
					}
				}
				for i := 0; i < perProducer; i++ {
					r, err := c.tryRecv()
					if err != nil {
						done <- err
						return
					}
					if r.f.Which() != api.Frame_Which_publishResponse {
						done <- fmt.Errorf("answered with %v", r.f.Which())
						return
					}
					if pr, _ := r.f.PublishResponse(); wireErr(pr.Error()) != api.CodeNone {
						done <- api.FromWire(mustWire(pr.Error()))
						return
					}
				}
				done <- nil
			}()
		}
		for p := 0; p < producers; p++ {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}

		total := 0
		for part := uint32(0); part < partitions; part++ {
			last := map[string]int{} // producer -> last sequence seen
			next := uint64(0)
			for {
				fr, tail := admin.fetch("t", part, next, 1<<20, 0)
				if len(tail) == 0 {
					if fr.HighWatermark() != next {
						t.Fatalf("partition %d: read to %d, high watermark %d", part, next, fr.HighWatermark())
					}
					break
				}
				for rest := tail; len(rest) > 0; {
					one, r, _, err := batch.Split(rest, 0)
					if err != nil {
						t.Fatal(err)
					}
					rest = r
					it, err := batch.NewIter(one)
					if err != nil {
						t.Fatal(err)
					}
					for it.Next() {
						rec := it.Record()
						if rec.Offset != next {
							t.Fatalf("partition %d: offset %d, want %d", part, rec.Offset, next)
						}
						next++
						total++
						var seq int
						_, _ = fmt.Sscan(string(rec.Value), &seq)
						if prev, ok := last[string(rec.Key)]; ok && seq <= prev {
							t.Fatalf("partition %d: producer %s sent %d after %d", part, rec.Key, seq, prev)
						}
						last[string(rec.Key)] = seq
					}
				}
			}
		}
		if total != producers*perProducer {
			t.Fatalf("read %d records, want %d", total, producers*perProducer)
		}
	})
}
