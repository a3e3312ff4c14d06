package dataplane

import (
	"bytes"
	"testing"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
)

// batchEntry is one entry of a publishBatches request built by a test.
type batchEntry struct {
	topic     string
	partition uint32
	batch     []byte
	chained   bool
}

// publishBatchesReq builds a publishBatches request of entries; its tail
// is batchesTail(entries).
func publishBatchesReq(acks api.Acks, entries ...batchEntry) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewPublishBatchesRequest()
		if err != nil {
			return err
		}
		r.SetAcks(acks)
		l, err := r.NewEntries(int32(len(entries)))
		if err != nil {
			return err
		}
		for i, e := range entries {
			x := l.At(i)
			x.SetPartition(e.partition)
			x.SetRecordsLength(uint32(len(e.batch)))
			x.SetChained(e.chained)
			if err := x.SetTopic(e.topic); err != nil {
				return err
			}
		}
		return nil
	}
}

func batchesTail(entries []batchEntry) []byte {
	var tail []byte
	for _, e := range entries {
		tail = append(tail, e.batch...)
	}
	return tail
}

// publishBatches sends one publishBatches request and returns its response.
func (c *testClient) publishBatches(entries ...batchEntry) api.PublishBatchesResponse {
	c.t.Helper()
	r := c.call(publishBatchesReq(api.Acks_all, entries...), batchesTail(entries))
	expectWhich(c.t, r, api.Frame_Which_publishBatchesResponse)
	p, err := r.f.PublishBatchesResponse()
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// result is one entry's outcome: its code (0: stored) and base offset.
type result struct {
	code api.Code
	base uint64
}

func batchResults(t *testing.T, p api.PublishBatchesResponse, entries []batchEntry) []result {
	t.Helper()
	if err := api.FromWire(mustWire(p.Error())); err != nil {
		t.Fatalf("request refused: %v", err)
	}
	l, err := p.Results()
	if err != nil || l.Len() != len(entries) {
		t.Fatalf("%d results (%v), want %d", l.Len(), err, len(entries))
	}
	out := make([]result, l.Len())
	for i := range out {
		x := l.At(i)
		topic, _ := x.Topic()
		if topic != entries[i].topic || x.Partition() != entries[i].partition {
			t.Fatalf("result %d for %s/%d, want %s/%d", i, topic, x.Partition(), entries[i].topic, entries[i].partition)
		}
		out[i] = result{wireErr(x.Error()), x.BaseOffset()}
		if out[i].code == 0 && (x.RecordCount() != 1 || x.Durability() == api.Durability_none || x.Replicas() != 1) {
			t.Errorf("result %d: recordCount %d durability %v replicas %d", i, x.RecordCount(), x.Durability(), x.Replicas())
		}
	}
	return out
}

// TestPublishBatchesPerPartitionOutcomes: the entries of one request are
// each stored, or refused, as publishes of their own: a refused entry
// (unknown partition, corrupt batch, no tail) fails alone; two entries of
// one partition are appended in their order, and a chained one fails
// with its predecessor.
func TestPublishBatchesPerPartitionOutcomes(t *testing.T) {
	h := startServer(t, openEngine(t), Options{})
	c, hs := connect(t, h.addr)
	if hs.ProtocolVersion() != api.ProtocolVersion {
		t.Fatalf("negotiated version %d, want %d", hs.ProtocolVersion(), api.ProtocolVersion)
	}
	c.createTopic("a", 2)
	c.createTopic("b", 1)
	good := func(v string) []byte { return buildBatch(t, []byte(v)) }
	corrupt := []byte("not a batch, long enough to be parsed as one")
	entries := []batchEntry{
		{"a", 0, good("a0"), false},
		{"a", 1, good("a1"), false},
		{"a", 7, good("x"), false},    // no such partition
		{"b", 0, good("b0"), false},   // offset 0
		{"b", 0, good("b1"), true},    // chained behind it: offset 1
		{"a", 1, corrupt, false},      // fails alone
		{"a", 1, good("a1'"), true},   // chained behind the corrupt one
		{"nope", 0, good("y"), false}, // no such topic
		{"a", 0, nil, false},          // no tail
		{"a", 0, good("a0'"), false},  // after the refused one: offset 1
	}
	got := batchResults(t, c.publishBatches(entries...), entries)
	want := []result{
		{0, 0}, {0, 0}, {api.CodeUnknownPartition, 0}, {0, 0}, {0, 1},
		{api.CodeCorruptBatch, 0}, {api.CodeCorruptBatch, 0}, {api.CodeUnknownTopic, 0},
		{api.CodeInvalidRequest, 0}, {0, 1},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d (%s/%d): %+v, want %+v", i, entries[i].topic, entries[i].partition, got[i], want[i])
		}
	}
	// What is stored reads back in the order sent.
	for _, p := range []struct {
		topic     string
		partition uint32
		values    []string
	}{{"a", 0, []string{"a0", "a0'"}}, {"a", 1, []string{"a1"}}, {"b", 0, []string{"b0", "b1"}}} {
		_, tail := c.fetch(p.topic, p.partition, 0, 1<<20, 0)
		for _, v := range p.values {
			if !bytes.Contains(tail, []byte(v)) {
				t.Errorf("%s/%d: %q not read back", p.topic, p.partition, v)
			}
		}
	}
}

// TestPublishBatchesRefusedWhole: a request without entries or with more
// than api.MaxPublishEntries is answered INVALID_REQUEST as a whole, its
// tail read and dropped: the connection goes on.
func TestPublishBatchesRefusedWhole(t *testing.T) {
	h := startServer(t, openEngine(t), Options{})
	c, _ := connect(t, h.addr)
	c.createTopic("t", 1)
	b := buildBatch(t, []byte("v"))
	many := make([]batchEntry, api.MaxPublishEntries+1)
	for i := range many {
		many[i] = batchEntry{"t", 0, b[:1], false}
	}
	for _, entries := range [][]batchEntry{nil, many} {
		r := c.call(publishBatchesReq(api.Acks_all, entries...), batchesTail(entries))
		expectWhich(t, r, api.Frame_Which_publishBatchesResponse)
		p, _ := r.f.PublishBatchesResponse()
		if code := wireErr(p.Error()); code != api.CodeInvalidRequest {
			t.Errorf("%d entries: code %v, want INVALID_REQUEST", len(entries), code)
		}
	}
	if p := c.publish("t", 0, b); wireErr(p.Error()) != 0 || p.BaseOffset() != 0 {
		t.Fatalf("publish after the refused requests: %v at %d", api.FromWire(mustWire(p.Error())), p.BaseOffset())
	}
}

// TestPublishBatchesChainsWithPublishes: a publishBatches entry is chained
// behind a single publish of the same partition read before it on the
// connection, and the other way round.
func TestPublishBatchesChainsWithPublishes(t *testing.T) {
	h := startServer(t, openEngine(t), Options{})
	c, _ := connect(t, h.addr)
	c.createTopic("t", 1)
	corrupt := []byte("not a batch, long enough to be parsed as one")
	c.send(publishReq("t", 0, len(corrupt)), corrupt)
	entries := []batchEntry{{"t", 0, buildBatch(t, []byte("v")), true}}
	id := c.send(publishBatchesReq(api.Acks_all, entries...), batchesTail(entries))
	for range 2 {
		r := c.recv()
		if r.f.CorrelationId() != id {
			continue
		}
		p, _ := r.f.PublishBatchesResponse()
		if got := batchResults(t, p, entries); got[0].code != api.CodeCorruptBatch {
			t.Fatalf("chained entry: %+v, want CORRUPT_BATCH", got[0])
		}
	}
}

// TestPublishBatchesAuthorizedPerTopic: an entry for a topic the principal
// may not write fails with AUTHORIZATION_FAILED; the others are stored.
func TestPublishBatchesAuthorizedPerTopic(t *testing.T) {
	e := startAuthzServer(t)
	adm := e.client("admin")
	adm.createTopic("ok", 1)
	adm.createTopic("no", 1)
	e.authz.SetBindings(bindingsOf(t, "User:CN=alice allow write topic:ok"))
	c := e.client("alice")
	b := buildBatch(t, []byte("v"))
	entries := []batchEntry{{"no", 0, b, false}, {"ok", 0, b, false}}
	got := batchResults(t, c.publishBatches(entries...), entries)
	if got[0].code != api.CodeAuthorizationFailed || got[1].code != 0 {
		t.Fatalf("results %+v, want AUTHORIZATION_FAILED then stored", got)
	}
}

// TestHandshakeNegotiatesVersion: the server answers the highest version
// both sides speak; a client of version 1 alone (one that predates
// maxProtocolVersion) gets 1 and is served as before.
func TestHandshakeNegotiatesVersion(t *testing.T) {
	h := startServer(t, openEngine(t), Options{})
	for _, tc := range []struct {
		lo, hi uint16
		want   uint16 // 0: refused
	}{
		{1, 0, 1}, {1, 1, 1}, {1, 2, 2}, {1, 9, api.ProtocolVersion}, {2, 0, 2}, {0, 2, 0}, {api.ProtocolVersion + 1, 0, 0},
	} {
		c := dialClient(t, h.addr)
		r := c.call(func(f api.Frame) error {
			hr, err := f.NewHandshakeRequest()
			if err != nil {
				return err
			}
			hr.SetProtocolVersion(tc.lo)
			hr.SetMaxProtocolVersion(tc.hi)
			return nil
		}, nil)
		hs, _ := r.f.HandshakeResponse()
		refused := api.FromWire(mustWire(hs.Error())) != nil
		switch {
		case tc.want == 0 && !refused:
			t.Errorf("versions %d to %d: accepted (%d), want UNSUPPORTED_VERSION", tc.lo, tc.hi, hs.ProtocolVersion())
		case tc.want != 0 && (refused || hs.ProtocolVersion() != tc.want):
			t.Errorf("versions %d to %d: version %d refused %v, want %d", tc.lo, tc.hi, hs.ProtocolVersion(), refused, tc.want)
		}
		if tc.want == 1 {
			// A version 1 client publishes as it always did.
			c.createTopic("v1", 1)
			if p := c.publish("v1", 0, buildBatch(t, []byte("v"))); wireErr(p.Error()) != 0 {
				t.Errorf("publish on a version 1 connection: %v", api.FromWire(mustWire(p.Error())))
			}
		}
		c.nc.Close()
	}
}

// FuzzPublishBatchesDecode decodes arbitrary bytes as the segment of a
// publishBatches frame: parsing never panics, and a request that parses
// without a refusal has between 1 and api.MaxPublishEntries entries whose
// lengths add up to its records tail.
func FuzzPublishBatchesDecode(f *testing.F) {
	b := []byte("0123456789")
	for _, entries := range [][]batchEntry{
		{{"t", 0, b, false}},
		{{"t", 0, b, false}, {"t", 0, b, true}, {"u", 3, b[:2], false}},
		{{"", 1 << 31, nil, true}},
		nil,
	} {
		full := frameBytes(f, 1, publishBatchesReq(api.Acks_leader, entries...), nil)
		f.Add(full[8:])
	}
	f.Fuzz(func(t *testing.T, seg []byte) {
		seg = seg[:len(seg)/8*8]
		msg := &capnp.Message{Arena: capnp.SingleSegment(seg)}
		msg.ResetReadLimit(uint64(len(seg)) * 8)
		fr, err := api.ReadRootFrame(msg)
		if err != nil || fr.Which() != api.Frame_Which_publishBatchesRequest {
			return
		}
		req, err := parseFrame(fr)
		if err != nil || req.entriesErr != nil {
			return
		}
		if n := len(req.entries); n == 0 || n > api.MaxPublishEntries {
			t.Fatalf("%d entries parsed without a refusal", n)
		}
		var sum uint64
		for _, e := range req.entries {
			sum += uint64(e.length)
		}
		if want := min(sum, uint64(^uint32(0))); uint64(req.tailLen) != want {
			t.Fatalf("tail %d, entries add up to %d", req.tailLen, sum)
		}
	})
}
