package sdk

import (
	"fmt"

	"github.com/seedqueue/sq/api/batch"
)

// batchOverhead is the size in bytes of a batch without records.
const batchOverhead = batch.Overhead

// recordEstimate is an upper bound in bytes of what message m adds to an
// encoded batch.
func recordEstimate(m *ProducerMessage) int {
	return batch.EncodedRecordBound(m.Key, m.Value, toBatchHeaders(m.Headers))
}

// encodeMessages encodes msgs as one batch (docs/architecture.md §3.2)
// with b, which it resets first, so one Builder serves batch after batch.
func encodeMessages(b *batch.Builder, msgs []ProducerMessage) ([]byte, error) {
	b.Reset()
	for i := range msgs {
		m := &msgs[i]
		b.Add(m.Key, m.Value, toBatchHeaders(m.Headers), m.Timestamp)
	}
	data, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("sdk: build batch: %w", err)
	}
	return data, nil
}

func toBatchHeaders(hs []Header) []batch.RecordHeader {
	if len(hs) == 0 {
		return nil
	}
	out := make([]batch.RecordHeader, len(hs))
	for i, h := range hs {
		out[i] = batch.RecordHeader{Key: h.Key, Value: h.Value}
	}
	return out
}
