package sdk

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestIntegrationRealServer runs against a real sq-server when SQ_TEST_ADDR
// names its data-plane address (for example 127.0.0.1:6064); it is skipped
// otherwise. It creates a fresh topic, produces keyed records with headers
// in several batches, and reads them back with a consumer group.
func TestIntegrationRealServer(t *testing.T) {
	addr := os.Getenv("SQ_TEST_ADDR")
	if addr == "" {
		t.Skip("SQ_TEST_ADDR not set")
	}
	ctx := testCtx(t)
	topic := fmt.Sprintf("sdk-it-%d", time.Now().UnixNano())
	p, err := NewProducer(ctx, ProducerConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Client().CreateTopic(ctx, topic, 3, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	var msgs []ProducerMessage
	for i := range n {
		msgs = append(msgs, NewProducerMessage(topic, bytes.Repeat([]byte{byte(i)}, i%300)).
			WithKey(fmt.Appendf(nil, "key-%d", i%17)).
			WithHeaders(Header{Key: "i", Value: fmt.Appendf(nil, "%d", i)}))
	}
	acks, err := p.SendBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	byPos := map[string]int{}
	for i, a := range acks {
		byPos[fmt.Sprint(a.Partition, "/", a.Offset)] = i
	}
	c, err := NewConsumer(ctx, ConsumerConfig{Addr: addr, Topic: topic, ConsumerGroup: topic + "-g", MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := pollN(t, c, n)
	for _, m := range got {
		i, ok := byPos[fmt.Sprint(m.Partition, "/", m.Offset)]
		if !ok {
			t.Fatalf("unexpected record %d/%d", m.Partition, m.Offset)
		}
		if !bytes.Equal(m.Value, msgs[i].Value) || string(m.Key) != string(msgs[i].Key) || len(m.Headers) != 1 || string(m.Headers[0].Value) != fmt.Sprint(i) {
			t.Fatalf("record %d/%d differs from message %d", m.Partition, m.Offset, i)
		}
		delete(byPos, fmt.Sprint(m.Partition, "/", m.Offset))
	}
	if len(byPos) != 0 {
		t.Fatalf("%d records not read", len(byPos))
	}
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	offs, err := c.Client().FetchOffsets(ctx, topic+"-g", topic)
	if err != nil || len(offs) != 3 {
		t.Fatalf("FetchOffsets = %+v, %v", offs, err)
	}
}
