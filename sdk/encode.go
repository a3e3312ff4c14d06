package sdk

import (
	"github.com/seedqueue/sq/api/batch"
)

// batchOverhead is the size in bytes of a batch without records.
const batchOverhead = batch.Overhead

// recordEstimate is an upper bound in bytes of what message m adds to an
// encoded batch.
func recordEstimate(m *ProducerMessage) int {
	return batch.EncodedRecordBound(m.Key, m.Value, toBatchHeaders(m.Headers))
}

// encodeBatch encodes msgs[idx...] as one batch (docs/architecture.md §3.2).
func encodeBatch(msgs []ProducerMessage, idx []int) ([]byte, error) {
	var b batch.Builder
	for _, i := range idx {
		m := &msgs[i]
		b.Add(m.Key, m.Value, toBatchHeaders(m.Headers), m.Timestamp)
	}
	return b.Build()
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
