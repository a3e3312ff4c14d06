package sdk

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/seedqueue/sq/api"
)

// A record with a negative timestamp is refused on its own by every
// producer, before it is sent: the server refuses a whole batch holding
// one, so sent, it failed the valid records batched with it (and, for a
// SendBatch call, every later record of the call to its partition).
func TestNegativeTimestampFailsAlone(t *testing.T) {
	b := startBroker(t)
	grpcAddr := serveGrpc(t, b)
	ctx := testCtx(t)
	for _, ts := range []int64{-1, -1 << 62} {
		msgs := func(topic string) []ProducerMessage {
			return []ProducerMessage{
				{Topic: topic, Value: []byte("a")},
				{Topic: topic, Value: []byte("bad"), Timestamp: ts},
				{Topic: topic, Value: []byte("b"), Timestamp: 1},
			}
		}
		check := func(plane string, acks []Ack, err error) {
			t.Helper()
			// GrpcProducer.SendBatch fails only when no record could be
			// placed; Producer.SendBatch whenever a record failed.
			if (plane == "Producer") != (err != nil) || len(acks) != 3 {
				t.Fatalf("%s, timestamp %d: SendBatch = %d acks, %v", plane, ts, len(acks), err)
			}
			if !errors.Is(acks[1].Err, api.ErrInvalidRequest) {
				t.Errorf("%s, timestamp %d: record with it: %v, want INVALID_REQUEST", plane, ts, acks[1].Err)
			}
			for _, i := range []int{0, 2} {
				if acks[i].Err != nil {
					t.Errorf("%s, timestamp %d: valid record %d failed: %v", plane, ts, i, acks[i].Err)
				}
			}
		}
		capnpTopic, grpcTopic, bpTopic := fmt.Sprint("c", -ts), fmt.Sprint("g", -ts), fmt.Sprint("b", -ts)
		for _, topic := range []string{capnpTopic, grpcTopic, bpTopic} {
			b.topic(t, topic, 1)
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
			if want := i == 1; want != errors.Is(err, api.ErrInvalidRequest) || (!want && err != nil) {
				t.Errorf("BatchProducer, timestamp %d: SendMessage of record %d: %v", ts, i, err)
			}
		}
		if err := bp.Close(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		for _, e := range failed {
			t.Errorf("BatchProducer, timestamp %d: %v", ts, e)
		}
		mu.Unlock()

		for _, topic := range []string{capnpTopic, grpcTopic, bpTopic} {
			info, err := b.eng.DescribeTopic(topic)
			if err != nil {
				t.Fatal(err)
			}
			if hw := info.Partitions[0].HighWatermark; hw != 2 {
				t.Errorf("topic %s, timestamp %d: %d records stored, want the 2 valid ones", topic, ts, hw)
			}
		}
	}
}
