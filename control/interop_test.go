package control_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/sdk"
)

// interopRecords covers keys (none, empty, binary), empty and binary
// values, and headers.
var interopRecords = []struct {
	key     []byte
	value   []byte
	headers []sdk.Header
}{
	{nil, []byte("no key"), nil},
	{[]byte{}, []byte("empty key"), nil},
	{[]byte{0, 1, 2, 255}, []byte{}, []sdk.Header{{Key: "h1", Value: []byte{9, 8}}, {Key: "h2", Value: []byte{}}}},
	{[]byte("k"), bytes.Repeat([]byte{0xa5}, 3000), []sdk.Header{{Key: "trace", Value: []byte("x")}}},
	// Header keys are bytes on both planes: invalid UTF-8 (a lone
	// continuation byte, a truncated sequence, an overlong encoding, a
	// surrogate), a NUL, an empty key and a long key cross unchanged.
	{[]byte("u"), []byte("header keys"), []sdk.Header{
		{Key: "\xff\xfe", Value: []byte("a")}, {Key: "caf\xc3", Value: []byte("b")}, {Key: "\xc0\xaf", Value: nil},
		{Key: "\xed\xa0\x80", Value: []byte("d")}, {Key: "nul\x00inside", Value: []byte("e")}, {Key: "", Value: []byte("f")},
		{Key: strings.Repeat("\x80", 1000), Value: []byte("g")}, {Key: "ünïcödé", Value: []byte("h")},
	}},
}

func TestGrpcPublishReadOverCapnp(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx := context.Background()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "g2c", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	req := &sqv1.PublishRequest{Topic: "g2c", Partition: 0}
	for i, r := range interopRecords {
		rec := &sqv1.Record{Key: r.key, Value: r.value, TimestampMs: int64(1000 + i)}
		for _, h := range r.headers {
			rec.Headers = append(rec.Headers, &sqv1.RecordHeader{Key: []byte(h.Key), Value: h.Value})
		}
		req.Records = append(req.Records, rec)
	}
	res, err := sqv1.NewMessagingClient(n.conn).Publish(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.BaseOffset != 0 || res.RecordCount != uint32(len(interopRecords)) || res.Durability != sqv1.Durability_DURABILITY_SYNCED {
		t.Fatalf("Publish = %v", res)
	}
	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fr, err := c.Fetch(ctx, sdk.FetchRequest{Topic: "g2c", Partition: 0, Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Messages) != len(interopRecords) {
		t.Fatalf("read %d records over Cap'n Proto, want %d", len(fr.Messages), len(interopRecords))
	}
	for i, m := range fr.Messages {
		w := interopRecords[i]
		if m.Offset != uint64(i) || m.Timestamp != int64(1000+i) || !sameKey(m.Key, w.key) || !bytes.Equal(m.Value, w.value) || !sameHeaders(m.Headers, w.headers) {
			t.Errorf("record %d = %+v, want key %v value %d bytes headers %v", i, m, w.key, len(w.value), w.headers)
		}
	}
}

func TestCapnpPublishReadOverGrpc(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx := context.Background()
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Client().CreateTopic(ctx, "c2g", 1, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var msgs []sdk.ProducerMessage
	for i, r := range interopRecords {
		msgs = append(msgs, sdk.ProducerMessage{Topic: "c2g", Key: r.key, Value: r.value, Headers: r.headers, Timestamp: int64(2000 + i)})
	}
	acks, err := p.SendBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acks {
		if a.Err != nil {
			t.Fatal(a.Err)
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := sqv1.NewMessagingClient(n.conn).Subscribe(sctx, &sqv1.SubscribeRequest{Topic: "c2g", Partition: 0})
	if err != nil {
		t.Fatal(err)
	}
	var got []*sqv1.ConsumedRecord
	for len(got) < len(interopRecords) {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Records...)
	}
	for i, m := range got {
		w := interopRecords[i]
		var hs []sdk.Header
		for _, h := range m.Headers {
			hs = append(hs, sdk.Header{Key: string(h.Key), Value: h.Value})
		}
		if m.Offset != uint64(i) || m.TimestampMs != int64(2000+i) || !sameKey(m.Key, w.key) || !bytes.Equal(m.Value, w.value) || !sameHeaders(hs, w.headers) {
			t.Errorf("record %d = %v, want key %v value %d bytes headers %v", i, m, w.key, len(w.value), w.headers)
		}
	}
}

// sameKey compares keys, telling "no key" (nil) from an empty key.
func sameKey(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func sameHeaders(a, b []sdk.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}
