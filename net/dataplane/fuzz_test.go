package dataplane

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
)

// memConn is a net.Conn that reads a fixed byte stream and then io.EOF,
// and discards what is written. Deadlines are ignored.
type memConn struct {
	r       *bytes.Reader
	mu      sync.Mutex
	written int
}

func (c *memConn) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *memConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written += len(p)
	return len(p), nil
}
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{Port: 1} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// frameBytes encodes one request frame with its tail.
func frameBytes(t testing.TB, id uint64, build func(api.Frame) error, tail []byte) []byte {
	msg, f, err := api.NewFrameMessage(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := build(f); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := api.WriteFrame(&buf, msg, tail); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func handshakeReq(f api.Frame) error {
	h, err := f.NewHandshakeRequest()
	h.SetProtocolVersion(api.ProtocolVersion)
	return err
}

// FuzzServerFrame feeds a byte stream to one connection of a server (after
// a valid handshake when withHandshake) and checks that the connection ends
// without a panic, recovered or not, and without hanging once the stream
// has ended. With fix, data is read as chunks (see fixFrames) whose framing
// and records lengths are repaired, so that mutations reach the request
// handlers, subscriptions included, instead of stopping at the framing.
func FuzzServerFrame(f *testing.F) {
	bb := buildBatch(f, []byte("v"), []byte{})
	seeds := [][]chunk{
		{{listTopicsReq, nil}},
		{{metadataReq("t", "x"), nil}},
		{{createTopicReq("n", 2), nil}},
		{{describeTopicReq("t"), nil}},
		{{publishReq("t", 0, len(bb)), bb}},
		{{fetchReq("t", 0, 0, 100, 10), nil}},
		{{publishReq("t", 0, len(bb)), bb}, {fetchReq("t", 0, 0, 0, 0), nil}},
		{{publishReq("t", 0, len(bb)), bb}, {subscribeReq("t", 0, 0, 1<<10), nil}, {grantReq(1, 100), nil}},
		{{subscribeReq("t", 0, 0, 1), nil}, {publishReq("t", 0, len(bb)), bb}, {unsubscribeReq(0), nil}},
		{{subscribeReq("t", 0, 5, 0), nil}, {subscribeReq("t", 0, 0, 1<<20), nil}},
		{{handshakeReq, nil}},
		{{deleteTopicReq("t"), nil}, {listOffsetsReq("t", 0, -1), nil}},
		{{publishAcksReq("t", len(bb), api.Acks_leader), bb}, {replicaFetchReq("t", fuzzTopicID, 0, 5, 1<<10, 10), nil}},
		{{replicaFetchReq("t", fuzzTopicID, 0, 4, 0, 0), nil}, {offsetForLeaderEpochReq("t", fuzzTopicID, 5), nil}, {initProducerIDReq, nil}},
		{{offsetForLeaderEpochReq("t", api.TopicID{}, 1), nil}, {publishAcksReq("t", len(bb), 9), bb}},
		{{publishBatchesReq(api.Acks_all, batchEntry{"t", 0, bb, false}), bb}},
		{{publishBatchesReq(api.Acks_leader, batchEntry{"t", 0, bb, false}, batchEntry{"t", 0, bb, true}, batchEntry{"u", 2, nil, false}),
			batchesTail([]batchEntry{{"t", 0, bb, false}, {"t", 0, bb, true}})}, {fetchReq("t", 0, 0, 0, 0), nil}},
	}
	for _, s := range seeds {
		var raw, fixed []byte
		for i, c := range s {
			raw = append(raw, frameBytes(f, uint64(i), c.build, c.tail)...)
			fixed = append(fixed, chunkBytes(f, uint64(i), c.build, c.tail)...)
		}
		f.Add(raw, true, false)
		f.Add(raw, false, false)
		f.Add(fixed, true, true)
	}
	for _, s := range [][]byte{
		frameBytes(f, 7, publishReq("t", 0, 10), nil)[:40],
		bytes.Repeat([]byte{0xff}, 8),
		{0, 0, 0, 0, 0xff, 0xff, 0xff, 0x0f},
		{},
	} {
		f.Add(s, true, false)
		f.Add(s, false, false)
	}
	hs := frameBytes(f, 0, handshakeReq, nil)
	f.Fuzz(func(t *testing.T, data []byte, withHandshake, fix bool) {
		// A broker that also serves the replica frames and producer ids.
		b := newReplBroker()
		if _, err := b.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
			t.Fatal(err)
		}
		logs := &logBuffer{}
		srv, err := New(b, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		stream := data
		if fix {
			stream = fixFrames(data)
		}
		if withHandshake {
			stream = append(append([]byte{}, hs...), stream...)
		}
		c, _, _ := srv.newConn(&memConn{r: bytes.NewReader(stream)})
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer srv.connWG.Done()
			c.serve()
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("connection did not end after its stream did")
		}
		if out := logs.String(); strings.Contains(out, "panic") {
			t.Fatalf("server panicked:\n%s", out)
		}
	})
}

// fuzzTopicID is the topic id of newReplBroker's topics.
var fuzzTopicID = newReplBroker().id

func replicaFetchReq(topic string, id api.TopicID, offset uint64, epoch, maxBytes, maxWaitMs uint32) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewReplicaFetchRequest()
		if err != nil {
			return err
		}
		r.SetFetchOffset(offset)
		r.SetDurableOffset(offset)
		r.SetLeaderEpoch(epoch)
		r.SetMaxBytes(maxBytes)
		r.SetMaxWaitMs(maxWaitMs)
		if err := r.SetTopicId(id.Bytes()); err != nil {
			return err
		}
		if err := r.SetFollowerId("f1"); err != nil {
			return err
		}
		return r.SetTopic(topic)
	}
}

func offsetForLeaderEpochReq(topic string, id api.TopicID, epoch uint32) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewOffsetForLeaderEpochRequest()
		if err != nil {
			return err
		}
		r.SetLeaderEpoch(epoch)
		if err := r.SetTopicId(id.Bytes()); err != nil {
			return err
		}
		return r.SetTopic(topic)
	}
}

// chunk is one request of a fuzz seed: its frame and records tail.
type chunk struct {
	build func(api.Frame) error
	tail  []byte
}

func unsubscribeReq(id uint64) func(api.Frame) error {
	return func(f api.Frame) error {
		u, err := f.NewUnsubscribeRequest()
		u.SetSubscriptionId(id)
		return err
	}
}

// chunkBytes encodes one request in the chunk format of fixFrames.
func chunkBytes(t testing.TB, id uint64, build func(api.Frame) error, tail []byte) []byte {
	full := frameBytes(t, id, build, nil)
	body := full[8:] // single segment: the table is one word
	out := binary.LittleEndian.AppendUint16(nil, uint16(len(body)))
	out = append(out, body...)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(tail)))
	return append(out, tail...)
}

// fixFrames turns data, read as chunks of [u16 n][n bytes: the segment of
// a frame][u16 m][m bytes: its records tail] (lengths little-endian,
// clipped to what is left), into a stream of frames whose framing is
// right: n is rounded down to whole words and given a one-segment table;
// a frame that carries a tail gets recordsLength m, and a publish's tail
// gets its batch framing, batchLength and CRC repaired (fixBatch); a frame
// that carries none drops its tail, so that the stream stays in step.
func fixFrames(data []byte) []byte {
	var out []byte
	for len(data) >= 2 {
		n := min(int(binary.LittleEndian.Uint16(data)), len(data)-2) / 8 * 8
		seg := append([]byte(nil), data[2:2+n]...)
		data = data[2+n:]
		var tail []byte
		if len(data) >= 2 {
			m := min(int(binary.LittleEndian.Uint16(data)), len(data)-2)
			tail = append([]byte(nil), data[2:2+m]...)
			data = data[2+m:]
		}
		tail = fixRecordsLength(seg, tail)
		out = binary.LittleEndian.AppendUint32(out, 0)
		out = binary.LittleEndian.AppendUint32(out, uint32(n/8))
		out = append(out, seg...)
		out = append(out, tail...)
	}
	return out
}

// fixRecordsLength sets the recordsLength of the frame in seg (in place)
// to len(tail) when the frame carries a tail, and returns the tail to
// send: nil for a frame that carries none or cannot be read.
func fixRecordsLength(seg, tail []byte) []byte {
	msg := &capnp.Message{Arena: capnp.SingleSegment(seg)}
	fr, err := api.ReadRootFrame(msg)
	if err != nil {
		return nil
	}
	// Each struct holds recordsLength at byte 4 of its data section; a
	// struct too short for it (from an older schema) reads it as 0.
	var st capnp.Struct
	switch fr.Which() {
	case api.Frame_Which_publishRequest:
		r, err := fr.PublishRequest()
		if err != nil {
			return nil
		}
		st, tail = capnp.Struct(r), fixBatch(tail)
	case api.Frame_Which_publishBatchesRequest:
		// The first entry gets the whole tail as its batch, the others
		// none (each refused on its own).
		r, err := fr.PublishBatchesRequest()
		if err != nil {
			return nil
		}
		l, err := r.Entries()
		if err != nil || l.Len() == 0 {
			return nil
		}
		for i := 0; i < l.Len(); i++ {
			if capnp.Struct(l.At(i)).Size().DataSize < 8 {
				return nil
			}
			l.At(i).SetRecordsLength(0)
		}
		tail = fixBatch(tail)
		l.At(0).SetRecordsLength(uint32(len(tail)))
		return tail
	case api.Frame_Which_fetchResponse:
		r, err := fr.FetchResponse()
		if err != nil {
			return nil
		}
		st = capnp.Struct(r)
	case api.Frame_Which_pushBatches:
		r, err := fr.PushBatches()
		if err != nil {
			return nil
		}
		st = capnp.Struct(r)
	case api.Frame_Which_replicaFetchResponse:
		// recordsLength at byte 24.
		r, err := fr.ReplicaFetchResponse()
		if err != nil || capnp.Struct(r).Size().DataSize < 32 {
			return nil
		}
		r.SetRecordsLength(uint32(len(tail)))
		return tail
	default:
		return nil
	}
	if st.Size().DataSize < 8 {
		return nil
	}
	st.SetUint32(4, uint32(len(tail)))
	return tail
}

// fixBatch repairs what Validate checks before it walks the records of the
// batch b (see api/batch's fuzz targets): the record list's one-segment
// framing, batchLength, magic, recordCount and lastOffsetDelta from the
// list, and the CRC. A tail too short for a header is returned as is.
func fixBatch(b []byte) []byte {
	if len(b) < batch.HeaderSize+8 {
		return b
	}
	le := binary.LittleEndian
	b = b[:batch.HeaderSize+8+(len(b)-batch.HeaderSize-8)/8*8]
	le.PutUint32(b[8:], uint32(len(b)-batch.LengthFieldEnd)) // batchLength
	b[16] = batch.Magic
	body := b[batch.HeaderSize:]
	le.PutUint32(body, 0)
	le.PutUint32(body[4:], uint32((len(body)-8)/8))
	msg := &capnp.Message{Arena: capnp.SingleSegment(body[8:])}
	if rs, err := api.ReadRootRecordSet(msg); err == nil {
		if l, err := rs.Records(); err == nil && l.Len() > 0 {
			le.PutUint32(b[57:], uint32(l.Len()))   // recordCount
			le.PutUint32(b[23:], uint32(l.Len()-1)) // lastOffsetDelta
		}
	}
	le.PutUint32(b[17:], batch.Checksum(b))
	return b
}

// fixFrames leaves a well-formed stream as it is, and repairs the framing
// and lengths of a mutated one so that it reads as frames again.
func TestFixFrames(t *testing.T) {
	bb := buildBatch(t, []byte("v"), []byte{})
	var raw, chunks []byte
	for i, c := range []chunk{{publishReq("t", 0, len(bb)), bb}, {subscribeReq("t", 0, 0, 10), nil}, {listTopicsReq, nil}} {
		raw = append(raw, frameBytes(t, uint64(i), c.build, c.tail)...)
		chunks = append(chunks, chunkBytes(t, uint64(i), c.build, c.tail)...)
	}
	if got := fixFrames(chunks); !bytes.Equal(got, raw) {
		t.Fatalf("well-formed stream changed:\n got %x\nwant %x", got, raw)
	}
	// Mutate the tail's length prefix, a record byte and the frame's
	// length prefix: every frame still reads, the batch still validates.
	bad := append([]byte(nil), chunkBytes(t, 1, publishReq("t", 0, 3), bb)...)
	n := int(binary.LittleEndian.Uint16(bad))
	binary.LittleEndian.PutUint16(bad[2+n:], uint16(len(bb)+5))
	bad = append(bad, 1, 2, 3, 4, 5)
	bad[2+n+2+batch.HeaderSize+20] ^= 0x01
	binary.LittleEndian.PutUint16(bad, uint16(n+3))
	fr := api.NewFrameReader(bytes.NewReader(fixFrames(bad)), 1<<20, 1<<20)
	msg, f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	defer msg.Release()
	tail, err := fr.ReadTail(api.TailLength(f), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := batch.CheckHeader(tail); err != nil {
		t.Fatalf("repaired batch: %v", err)
	}
}
