package sdk

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// A record the server would refuse (a negative timestamp, or a size over
// its topic's max.record.bytes below the server's limit) is refused on its
// own by every producer, before it is sent: the server refuses a whole
// batch holding one, so sent, it failed the valid records batched with it
// (and, for a SendBatch call, every later record of the call to its
// partition).
func TestRecordTheServerRefusesFailsAlone(t *testing.T) {
	b := startBroker(t)
	grpcAddr := serveGrpc(t, b)
	ctx := testCtx(t)
	cases := []struct {
		name string
		cfg  engine.TopicConfig
		bad  ProducerMessage
		want error
	}{
		{"timestamp -1", engine.TopicConfig{}, ProducerMessage{Value: []byte("bad"), Timestamp: -1}, api.ErrInvalidRequest},
		{"timestamp -2^62", engine.TopicConfig{}, ProducerMessage{Value: []byte("bad"), Timestamp: -1 << 62}, api.ErrInvalidRequest},
		{"value over the topic's limit", engine.TopicConfig{MaxRecordBytes: 100}, ProducerMessage{Value: make([]byte, 101)}, api.ErrMessageTooLarge},
		{"key and headers over the topic's limit", engine.TopicConfig{MaxRecordBytes: 100},
			ProducerMessage{Key: make([]byte, 50), Value: make([]byte, 40), Headers: []Header{{Key: "h", Value: make([]byte, 10)}}}, api.ErrMessageTooLarge},
	}
	for ci, tc := range cases {
		msgs := func(topic string) []ProducerMessage {
			bad := tc.bad
			bad.Topic = topic
			return []ProducerMessage{{Topic: topic, Value: []byte("a")}, bad, {Topic: topic, Value: []byte("b"), Timestamp: 1}}
		}
		check := func(plane string, acks []Ack, err error) {
			t.Helper()
			// GrpcProducer.SendBatch fails only when no record could be
			// placed; Producer.SendBatch whenever a record failed.
			if (plane == "Producer") != (err != nil) || len(acks) != 3 {
				t.Fatalf("%s, %s: SendBatch = %d acks, %v", plane, tc.name, len(acks), err)
			}
			if !errors.Is(acks[1].Err, tc.want) {
				t.Errorf("%s, %s: the record refused: %v, want %v", plane, tc.name, acks[1].Err, tc.want)
			}
			for _, i := range []int{0, 2} {
				if acks[i].Err != nil {
					t.Errorf("%s, %s: valid record %d failed: %v", plane, tc.name, i, acks[i].Err)
				}
			}
		}
		capnpTopic, grpcTopic, bpTopic := fmt.Sprint("c", ci), fmt.Sprint("g", ci), fmt.Sprint("b", ci)
		for _, topic := range []string{capnpTopic, grpcTopic, bpTopic} {
			if _, err := b.eng.CreateTopic(topic, 1, tc.cfg); err != nil {
				t.Fatal(err)
			}
		}

		p, err := NewProducer(ctx, ProducerConfig{Addr: b.addr})
		if err != nil {
			t.Fatal(err)
		}
		acks, err := p.SendBatch(ctx, msgs(capnpTopic))
		p.Close()
		check("Producer", acks, err)

		gp, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: grpcAddr}})
		if err != nil {
			t.Fatal(err)
		}
		acks, err = gp.SendBatch(ctx, msgs(grpcTopic))
		gp.Close()
		check("GrpcProducer", acks, err)

		var mu sync.Mutex
		var failed []BatchError
		bp, err := NewBatchProducer(ctx, BatchProducerConfig{ProducerConfig: ProducerConfig{Addr: b.addr}, Linger: LingerNone,
			OnError: func(e BatchError) { mu.Lock(); failed = append(failed, e); mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range msgs(bpTopic) {
			err := bp.SendMessage(ctx, m)
			if i == 1 && !errors.Is(err, tc.want) || i != 1 && err != nil {
				t.Errorf("BatchProducer, %s: SendMessage of record %d: %v", tc.name, i, err)
			}
		}
		if err := bp.Close(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		for _, e := range failed {
			t.Errorf("BatchProducer, %s: %v", tc.name, e)
		}
		mu.Unlock()

		for _, topic := range []string{capnpTopic, grpcTopic, bpTopic} {
			info, err := b.eng.DescribeTopic(topic)
			if err != nil {
				t.Fatal(err)
			}
			if hw := info.Partitions[0].HighWatermark; hw != 2 {
				t.Errorf("topic %s, %s: %d records stored, want the 2 valid ones", topic, tc.name, hw)
			}
		}
	}
}

// A topic name no topic can have (a '/', "..", the reserved "__" prefix,
// over 249 characters) fails with INVALID_TOPIC_NAME on both planes, not
// with UNKNOWN_TOPIC as if the topic might be created; a valid name of no
// topic is still UNKNOWN_TOPIC.
func TestInvalidTopicNameIsNotUnknown(t *testing.T) {
	b := startBroker(t)
	grpcAddr := serveGrpc(t, b)
	ctx := testCtx(t)
	b.topic(t, "t", 1)
	p, err := NewProducer(ctx, ProducerConfig{Addr: b.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	gp, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	bp, err := NewBatchProducer(ctx, BatchProducerConfig{ProducerConfig: ProducerConfig{Addr: b.addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	long := strings.Repeat("x", 250)
	for _, tc := range []struct {
		topic string
		want  error
	}{
		{"a/b", api.ErrInvalidTopicName}, {"..", api.ErrInvalidTopicName}, {"__internal", api.ErrInvalidTopicName},
		{long, api.ErrInvalidTopicName}, {"caf\u00e9", api.ErrInvalidTopicName}, {"no-such-topic", api.ErrUnknownTopic},
	} {
		name := tc.topic
		if len(name) > 20 {
			name = name[:20] + "..."
		}
		acks, _ := p.SendBatch(ctx, []ProducerMessage{{Topic: tc.topic, Value: []byte("x")}, {Topic: "t", Value: []byte("y")}})
		if !errors.Is(acks[0].Err, tc.want) || acks[1].Err != nil {
			t.Errorf("Producer, topic %q: acks %v / %v, want %v / stored", name, acks[0].Err, acks[1].Err, tc.want)
		}
		acks, _ = gp.SendBatch(ctx, []ProducerMessage{{Topic: tc.topic, Value: []byte("x")}, {Topic: "t", Value: []byte("y")}})
		if !errors.Is(acks[0].Err, tc.want) || acks[1].Err != nil {
			t.Errorf("GrpcProducer, topic %q: acks %v / %v, want %v / stored", name, acks[0].Err, acks[1].Err, tc.want)
		}
		if err := bp.Send(ctx, tc.topic, nil, []byte("x")); !errors.Is(err, tc.want) {
			t.Errorf("BatchProducer, topic %q: %v, want %v", name, err, tc.want)
		}
		if _, err := p.Client().Metadata(ctx, tc.topic); !errors.Is(err, tc.want) {
			t.Errorf("Client.Metadata(%q): %v, want %v", name, err, tc.want)
		}
	}
}

// When a topic's max.record.bytes is lowered while a producer holds its
// metadata, the first batch with a record over the new limit is refused
// whole by the server; that refusal makes the producer read the metadata
// again, so from the next call on such a record fails alone, on both
// planes, instead of for as long as MetadataMaxAge.
func TestLoweredRecordLimitIsLearnedFromTheRefusal(t *testing.T) {
	b := startBroker(t)
	grpcAddr := serveGrpc(t, b)
	ctx := testCtx(t)
	b.topic(t, "c", 1)
	b.topic(t, "g", 1)
	p, err := NewProducer(ctx, ProducerConfig{Addr: b.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	gp, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	msgs := func(topic string) []ProducerMessage {
		return []ProducerMessage{{Topic: topic, Value: []byte("a")}, {Topic: topic, Value: make([]byte, 200)}}
	}
	send := map[string]func([]ProducerMessage) []Ack{
		"c": func(m []ProducerMessage) []Ack { acks, _ := p.SendBatch(ctx, m); return acks },
		"g": func(m []ProducerMessage) []Ack { acks, _ := gp.SendBatch(ctx, m); return acks },
	}
	for topic, f := range send {
		if acks := f(msgs(topic)); acks[0].Err != nil || acks[1].Err != nil {
			t.Fatalf("topic %s: before the change: %v / %v", topic, acks[0].Err, acks[1].Err)
		}
		limit := int32(100)
		if _, err := b.eng.AlterTopicConfig(topic, engine.TopicConfigChange{MaxRecordBytes: &limit}); err != nil {
			t.Fatal(err)
		}
		// The cached limit still lets the big record into the batch.
		acks := f(msgs(topic))
		if !errors.Is(acks[1].Err, api.ErrMessageTooLarge) {
			t.Fatalf("topic %s: big record after the change: %v", topic, acks[1].Err)
		}
		acks = f(msgs(topic))
		if acks[0].Err != nil || !errors.Is(acks[1].Err, api.ErrMessageTooLarge) {
			t.Errorf("topic %s: after the refusal: %v / %v, want the small record stored and the big one refused", topic, acks[0].Err, acks[1].Err)
		}
	}
}
