package sdk

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"testing"

	"github.com/seedqueue/sq/api"
)

func TestSendAssignsOffsets(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("orders", 1)
	p := newTestProducer(t, s)
	ctx := testCtx(t)
	for i := range 3 {
		ack, err := p.Send(ctx, "orders", nil, []byte(fmt.Sprint("hello", i)))
		if err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
		want := Ack{Topic: "orders", Partition: 0, Offset: uint64(i), Durability: DurabilitySynced, Replicas: 1}
		if ack != want {
			t.Fatalf("Send %d = %+v, want %+v", i, ack, want)
		}
	}
	got := s.records("orders", 0)
	if strings.Join(got, ",") != "0:=hello0,1:=hello1,2:=hello2" {
		t.Fatalf("stored %v", got)
	}
}

func TestSendBatchAcksPerPartitionInOrder(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 3)
	p := newTestProducer(t, s)
	var msgs []ProducerMessage
	for i := range 60 {
		msgs = append(msgs, NewProducerMessage("t", []byte(fmt.Sprint(i))).
			WithKey([]byte(fmt.Sprint("key", i%7))).
			WithHeaders(Header{Key: "h", Value: []byte("x")}))
	}
	acks, err := p.SendBatch(testCtx(t), msgs)
	if err != nil {
		t.Fatal(err)
	}
	next := map[uint32]uint64{}
	for i, a := range acks {
		if a.Err != nil || a.Topic != "t" {
			t.Fatalf("ack %d = %+v", i, a)
		}
		if a.Offset != next[a.Partition] {
			t.Fatalf("ack %d: partition %d offset %d, want %d (input order kept)", i, a.Partition, a.Offset, next[a.Partition])
		}
		next[a.Partition]++
		stored := s.records("t", a.Partition)[a.Offset]
		if want := fmt.Sprintf("%d:key%d=%d", a.Offset, i%7, i); stored != want {
			t.Fatalf("ack %d points at %q, want %q", i, stored, want)
		}
	}
	if len(next) < 2 {
		t.Fatalf("7 keys landed in %d partitions", len(next))
	}
	// One publish per partition: the batch stayed whole.
	if n := s.count(api.Frame_Which_publishRequest); n != len(next) {
		t.Fatalf("%d publish requests for %d partitions", n, len(next))
	}
}

func TestKeyedPartitionIsStable(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 5)
	ctx := testCtx(t)
	first := map[string]uint32{}
	for round := range 2 {
		p := newTestProducer(t, s) // a new producer must agree
		for i := range 20 {
			key := fmt.Sprint("user-", i)
			ack, err := p.Send(ctx, "t", []byte(key), []byte("v"))
			if err != nil {
				t.Fatal(err)
			}
			h := fnv.New32a()
			h.Write([]byte(key))
			if want := h.Sum32() % 5; ack.Partition != want {
				t.Fatalf("key %q -> partition %d, want FNV-1a %d", key, ack.Partition, want)
			}
			if round == 0 {
				first[key] = ack.Partition
			} else if first[key] != ack.Partition {
				t.Fatalf("key %q moved from %d to %d", key, first[key], ack.Partition)
			}
		}
	}
}

func TestKeylessSpreadsRoundRobin(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 3)
	p := newTestProducer(t, s)
	ctx := testCtx(t)
	seen := map[uint32]int{}
	for range 6 {
		ack, err := p.Send(ctx, "t", nil, []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		seen[ack.Partition]++
	}
	if len(seen) != 3 || seen[0] != 2 || seen[1] != 2 || seen[2] != 2 {
		t.Fatalf("keyless sends per partition = %v", seen)
	}
	// Keyless records of one SendBatch call stick to one partition.
	acks, err := p.SendBatch(ctx, []ProducerMessage{NewProducerMessage("t", []byte("a")), NewProducerMessage("t", []byte("b"))})
	if err != nil || acks[0].Partition != acks[1].Partition || acks[1].Offset != acks[0].Offset+1 {
		t.Fatalf("sticky batch = %+v, %v", acks, err)
	}
}

func TestRecordTooLargeRejectedClientSide(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	p := newTestProducer(t, s)
	big := bytes.Repeat([]byte("x"), int(s.limits.MaxRecordBytes)+1)
	_, err := p.Send(testCtx(t), "t", nil, big)
	if !errors.Is(err, api.ErrMessageTooLarge) {
		t.Fatalf("Send of %d bytes: %v, want MESSAGE_TOO_LARGE", len(big), err)
	}
	if n := s.count(api.Frame_Which_publishRequest); n != 0 {
		t.Fatalf("%d publish requests sent for a too-large record", n)
	}
}

func TestSendBatchSplitsByMaxBatchBytes(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	p := newTestProducer(t, s)
	value := bytes.Repeat([]byte("v"), 900)
	var msgs []ProducerMessage
	for range 100 { // ~90 KiB for a 16 KiB batch limit
		msgs = append(msgs, NewProducerMessage("t", value))
	}
	acks, err := p.SendBatch(testCtx(t), msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range acks {
		if a.Offset != uint64(i) {
			t.Fatalf("ack %d offset %d", i, a.Offset)
		}
	}
	if n := s.count(api.Frame_Which_publishRequest); n < 6 {
		t.Fatalf("%d publish requests, want the batch split in at least 6", n)
	}
}

func TestSendBatchPartialFailure(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("good", 1)
	s.createTopic("failing", 1)
	s.failPublish("failing", 0, api.CodePartitionFailed)
	p := newTestProducer(t, s)
	big := bytes.Repeat([]byte("x"), int(s.limits.MaxRecordBytes)+1)
	msgs := []ProducerMessage{
		NewProducerMessage("good", []byte("a")),
		NewProducerMessage("good", big),
		NewProducerMessage("missing", []byte("b")),
		NewProducerMessage("failing", []byte("c")),
		NewProducerMessage("good", []byte("d")),
		{Value: []byte("no topic")},
	}
	acks, err := p.SendBatch(testCtx(t), msgs)
	if err == nil || !strings.Contains(err.Error(), "4 of 6 records failed") {
		t.Fatalf("SendBatch error = %v", err)
	}
	checks := []struct {
		wantErr error
		offset  uint64
	}{
		{nil, 0},
		{api.ErrMessageTooLarge, 0},
		{api.ErrUnknownTopic, 0},
		{api.ErrPartitionFailed, 0},
		{nil, 1},
		{api.ErrInvalidTopicName, 0},
	}
	for i, c := range checks {
		a := acks[i]
		if c.wantErr == nil && (a.Err != nil || a.Offset != c.offset) {
			t.Fatalf("ack %d = %+v, want offset %d", i, a, c.offset)
		}
		if c.wantErr != nil && !errors.Is(a.Err, c.wantErr) {
			t.Fatalf("ack %d err = %v, want %v", i, a.Err, c.wantErr)
		}
	}
	if got := s.records("good", 0); strings.Join(got, ",") != "0:=a,1:=d" {
		t.Fatalf("stored %v", got)
	}
}

func TestRetriableErrorsAreRetried(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.failPublish("t", 0, api.CodeDiskFull, api.CodeThrottled, api.CodeTooManyRequests)
	p := newTestProducer(t, s)
	ack, err := p.Send(testCtx(t), "t", nil, []byte("v"))
	if err != nil || ack.Offset != 0 {
		t.Fatalf("Send = %+v, %v", ack, err)
	}
	if n := s.count(api.Frame_Which_publishRequest); n != 4 {
		t.Fatalf("%d publish requests, want 4 (3 retries)", n)
	}
}

func TestRetriesExhausted(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.failPublish("t", 0, api.CodeDiskFull, api.CodeDiskFull, api.CodeDiskFull)
	p := newTestProducer(t, s, func(c *ProducerConfig) { c.Retries = 1 })
	if _, err := p.Send(testCtx(t), "t", nil, []byte("v")); !errors.Is(err, api.ErrDiskFull) {
		t.Fatalf("Send = %v, want DISK_FULL", err)
	}
	if n := s.count(api.Frame_Which_publishRequest); n != 2 {
		t.Fatalf("%d publish requests, want 2", n)
	}
}

// TestLaterBatchesFailAfterPartitionFailure checks that a partition's later
// batches are not sent after an earlier one failed for good.
func TestLaterBatchesFailAfterPartitionFailure(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.failPublish("t", 0, api.CodePartitionFailed)
	p := newTestProducer(t, s)
	value := bytes.Repeat([]byte("v"), 900)
	var msgs []ProducerMessage
	for range 40 {
		msgs = append(msgs, NewProducerMessage("t", value))
	}
	acks, err := p.SendBatch(testCtx(t), msgs)
	if err == nil {
		t.Fatal("SendBatch succeeded")
	}
	for i, a := range acks {
		if !errors.Is(a.Err, api.ErrPartitionFailed) {
			t.Fatalf("ack %d = %+v", i, a)
		}
	}
	if n := s.count(api.Frame_Which_publishRequest); n != 1 {
		t.Fatalf("%d publish requests, want 1", n)
	}
}

func TestProducerReconnectsAfterRestart(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	p := newTestProducer(t, s)
	ctx := testCtx(t)
	if _, err := p.Send(ctx, "t", nil, []byte("before")); err != nil {
		t.Fatal(err)
	}
	s.restart()
	ack, err := p.Send(ctx, "t", nil, []byte("after"))
	if err != nil || ack.Offset != 1 {
		t.Fatalf("Send after restart = %+v, %v", ack, err)
	}
	if got := s.records("t", 0); strings.Join(got, ",") != "0:=before,1:=after" {
		t.Fatalf("stored %v", got)
	}
}

func TestUnknownTopicRefreshesMetadata(t *testing.T) {
	s := newFakeServer(t)
	p := newTestProducer(t, s)
	ctx := testCtx(t)
	if _, err := p.Send(ctx, "later", nil, []byte("v")); !errors.Is(err, api.ErrUnknownTopic) {
		t.Fatalf("Send to a missing topic: %v", err)
	}
	s.createTopic("later", 2)
	if _, err := p.Send(ctx, "later", nil, []byte("v")); err != nil {
		t.Fatalf("Send after the topic was created: %v", err)
	}
}

func TestSendFailsWhileServerDownThenRecovers(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	p := newTestProducer(t, s, func(c *ProducerConfig) { c.Retries = 2 })
	ctx := testCtx(t)
	if _, err := p.Send(ctx, "t", nil, []byte("a")); err != nil {
		t.Fatal(err)
	}
	s.stop()
	if _, err := p.Send(ctx, "t", nil, []byte("lost")); !errors.Is(err, ErrConnection) {
		t.Fatalf("Send with the server down: %v, want ErrConnection", err)
	}
	s.start(s.addr)
	ack, err := p.Send(ctx, "t", nil, []byte("b"))
	if err != nil || ack.Offset != 1 {
		t.Fatalf("Send after the server came back = %+v, %v", ack, err)
	}
}

// TestConcurrentSendBatch checks that concurrent calls each keep their own
// records in order and that every record gets a distinct offset.
func TestConcurrentSendBatch(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	p := newTestProducer(t, s)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	results := make([][]Ack, 8)
	for g := range results {
		wg.Go(func() {
			var msgs []ProducerMessage
			for i := range 30 {
				msgs = append(msgs, NewProducerMessage("t", []byte(fmt.Sprint(g, "-", i))).WithKey([]byte(fmt.Sprint(i%2))))
			}
			acks, err := p.SendBatch(ctx, msgs)
			if err != nil {
				t.Error(err)
			}
			results[g] = acks
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, acks := range results {
		last := map[uint32]uint64{}
		for i, a := range acks {
			k := fmt.Sprint(a.Partition, "/", a.Offset)
			if seen[k] {
				t.Fatalf("offset %s acknowledged twice", k)
			}
			seen[k] = true
			if prev, ok := last[a.Partition]; ok && a.Offset <= prev {
				t.Fatalf("record %d of a call at %d after %d", i, a.Offset, prev)
			}
			last[a.Partition] = a.Offset
		}
	}
	if len(seen) != 8*30 {
		t.Fatalf("%d distinct offsets", len(seen))
	}
}

// TestUnknownPartitionRefreshesMetadata: the topic shrank under a cached
// partition count; the failed send drops the cache, the next one uses the
// new count.
func TestUnknownPartitionRefreshesMetadata(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 3)
	p := newTestProducer(t, s)
	ctx := testCtx(t)
	key := []byte("k")
	for (HashPartitioner{}).Partition("t", key, 3) == 0 {
		key = append(key, 'k')
	}
	if _, err := p.Send(ctx, "t", key, []byte("v")); err != nil {
		t.Fatal(err)
	}
	s.createTopic("t", 1) // recreated with one partition
	if _, err := p.Send(ctx, "t", key, []byte("v")); !errors.Is(err, api.ErrUnknownPartition) {
		t.Fatalf("Send with a stale partition count: %v, want UNKNOWN_PARTITION", err)
	}
	ack, err := p.Send(ctx, "t", key, []byte("v"))
	if err != nil || ack.Partition != 0 {
		t.Fatalf("Send after refresh = %+v, %v", ack, err)
	}
}

func TestPartitionerFunc(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 4)
	p := newTestProducer(t, s, func(c *ProducerConfig) {
		c.Partitioner = PartitionerFunc(func(_ string, key []byte, n uint32) uint32 { return uint32(len(key)) % n })
	})
	ack, err := p.Send(testCtx(t), "t", []byte("abc"), []byte("v"))
	if err != nil || ack.Partition != 3 {
		t.Fatalf("Send = %+v, %v", ack, err)
	}
}
