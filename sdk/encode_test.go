package sdk

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seedqueue/sq/api/batch"
)

// TestEncodeBatch checks the encoder, with one Builder reused from batch
// to batch as a partition goroutine does, against batch.Validate and the
// iterator, and that recordEstimate bounds the real size.
func TestEncodeBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var builder batch.Builder
	for round := range 200 {
		n := 1 + rng.IntN(20)
		var msgs []ProducerMessage
		est := batchOverhead
		for range n {
			m := ProducerMessage{Topic: "t", Value: bytes.Repeat([]byte("v"), rng.IntN(50)), Timestamp: int64(1000 + rng.IntN(100))}
			if rng.IntN(2) == 0 {
				m.Key = bytes.Repeat([]byte("k"), rng.IntN(20))
			}
			if round%2 == 1 {
				for h := range rng.IntN(4) {
					m.Headers = append(m.Headers, Header{Key: fmt.Sprint("h", h), Value: bytes.Repeat([]byte("x"), rng.IntN(30))})
				}
			}
			msgs = append(msgs, m)
			est += recordEstimate(&m)
		}
		b, err := encodeMessages(&builder, msgs)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(b) > est {
			t.Fatalf("round %d: batch of %d bytes over the estimate %d", round, len(b), est)
		}
		h, err := batch.Validate(b, batch.Limits{})
		if err != nil {
			t.Fatalf("round %d: Validate: %v", round, err)
		}
		if h.RecordCount != uint32(n) {
			t.Fatalf("round %d: %d records", round, h.RecordCount)
		}
		got, next, err := decodeBatches(b, "t", 0, 0)
		if err != nil || next != uint64(n) || len(got) != n {
			t.Fatalf("round %d: decode: %d messages, next %d, %v", round, len(got), next, err)
		}
		for i, m := range got {
			w := msgs[i]
			if !bytes.Equal(m.Key, w.Key) || (m.Key == nil) != (w.Key == nil) || !bytes.Equal(m.Value, w.Value) || m.Timestamp != w.Timestamp || len(m.Headers) != len(w.Headers) {
				t.Fatalf("round %d record %d = %+v, want %+v", round, i, m, w)
			}
			for j := range m.Headers {
				if m.Headers[j].Key != w.Headers[j].Key || !bytes.Equal(m.Headers[j].Value, w.Headers[j].Value) {
					t.Fatalf("round %d record %d header %d = %+v", round, i, j, m.Headers[j])
				}
			}
		}
	}
}
