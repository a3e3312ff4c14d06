package sdk

import (
	"fmt"
	"sync"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/quota"
)

// TestBatchProducerGathersPartitionsIntoOneRequest: against a server that
// speaks publishBatches, a BatchProducer sends the batches of many
// partitions in shared requests (one request in flight at a time here, so
// the batches that close meanwhile wait and go out together), every record
// is acknowledged once, and each partition's records are stored in the
// order they were sent.
func TestBatchProducerGathersPartitionsIntoOneRequest(t *testing.T) {
	n := startQuotaNode(t, quota.Table{})
	ctx := testCtx(t)
	const parts, records = 40, 2000
	var mu sync.Mutex
	got := map[uint32][]string{} // partition -> values in offset order
	next := map[uint32]uint64{}
	var failed []error
	bp, err := NewBatchProducer(ctx, BatchProducerConfig{
		ProducerConfig: ProducerConfig{Addr: n.capnpAddr},
		MaxInFlight:    1,
		OnAck: func(a BatchAck) {
			mu.Lock()
			defer mu.Unlock()
			if a.BaseOffset != next[a.Partition] {
				failed = append(failed, fmt.Errorf("partition %d: batch at %d, want %d", a.Partition, a.BaseOffset, next[a.Partition]))
			}
			next[a.Partition] = a.BaseOffset + uint64(len(a.Messages))
			for _, m := range a.Messages {
				got[a.Partition] = append(got[a.Partition], string(m.Value))
			}
		},
		OnError: func(e BatchError) {
			mu.Lock()
			failed = append(failed, e)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	if _, err := bp.Client().CreateTopic(ctx, "many", parts, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	for i := range records {
		key := fmt.Appendf(nil, "k%d", i%200)
		if err := bp.Send(ctx, "many", key, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) > 0 {
		t.Fatalf("failures: %v", failed)
	}
	total := 0
	for p, vs := range got {
		total += len(vs)
		last := -1
		for _, v := range vs {
			var i int
			if _, err := fmt.Sscan(v, &i); err != nil {
				t.Fatalf("partition %d: record %q: %v", p, v, err)
			}
			if i <= last {
				t.Fatalf("partition %d: record %d stored after %d", p, i, last)
			}
			last = i
		}
	}
	if total != records {
		t.Fatalf("%d records acknowledged, want %d", total, records)
	}
	cn := bp.Client().live()
	if cn == nil || cn.limits.ProtocolVersion != api.ProtocolVersion || cn.pubq == nil {
		t.Fatalf("connection does not speak publishBatches (version %v)", cn.limits.ProtocolVersion)
	}
	reqs, entries := cn.pubq.requests.Load(), cn.pubq.entries.Load()
	if entries < parts || reqs >= entries {
		t.Fatalf("%d batches in %d publishBatches requests: none shared a request", entries, reqs)
	}
}

// TestPipelineFallsBackToSinglePublishes: against a server of version 1
// (the fake, which predates publishBatches) the connection negotiates 1
// and the pipeline sends one publish per batch, as before.
func TestPipelineFallsBackToSinglePublishes(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 3)
	p := newTestProducer(t, s)
	var msgs []ProducerMessage
	for i := range 30 {
		msgs = append(msgs, NewProducerMessage("t", fmt.Appendf(nil, "%d", i)).WithKey(fmt.Appendf(nil, "k%d", i)))
	}
	acks, err := p.SendBatch(testCtx(t), msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range acks {
		if a.Err != nil {
			t.Fatalf("record %d: %v", i, a.Err)
		}
	}
	cn := p.client.live()
	if cn == nil || cn.limits.ProtocolVersion != api.MinProtocolVersion || cn.pubq != nil {
		t.Fatalf("connection to a version 1 server: version %d, publishBatches queue %v", cn.limits.ProtocolVersion, cn.pubq != nil)
	}
}
