package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api/batch"
)

// TestProducePartitionIsIdempotent: `sq produce -p N` stamps the batches
// it builds with a producer id from the server and consecutive sequences
// from 0 (one batch per chunk of 4096 records here), so a retried batch
// would be recognised; each run is a new producer id.
func TestProducePartitionIsIdempotent(t *testing.T) {
	addr, ce := startData(t, false)
	var in strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&in, "r%d\n", i)
	}
	for range 2 {
		if _, errOut, err := runSQInput(t, in.String(), "--server", addr, "produce", "-t", "orders", "-p", "1"); err != nil {
			t.Fatalf("produce -p 1: %v\n%s", err, errOut)
		}
	}
	r, err := ce.Engine.Fetch(context.Background(), "orders", 1, 0, 64<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var hs []batch.Header
	for _, buf := range r.Bufs {
		for len(buf) > 0 {
			_, rest, h, err := batch.Split(buf, 0)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
			buf = rest
		}
	}
	if len(hs) != 4 {
		t.Fatalf("%d batches stored, want 4 (2 runs of 4096 + 904 records)", len(hs))
	}
	for i, h := range hs {
		run, first := i/2, i%2 == 0
		wantSeq := int32(4096)
		if first {
			wantSeq = 0
		}
		if h.ProducerID < 0 || h.ProducerEpoch != 0 || h.BaseSequence != wantSeq || (!first && h.ProducerID != hs[i-1].ProducerID) || (first && run > 0 && h.ProducerID == hs[0].ProducerID) {
			t.Errorf("batch %d: producer %d epoch %d sequence %d; want run %d's own producer id, epoch 0, sequence %d",
				i, h.ProducerID, h.ProducerEpoch, h.BaseSequence, run, wantSeq)
		}
	}
}
