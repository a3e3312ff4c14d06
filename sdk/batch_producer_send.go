package sdk

import (
	"errors"
	"fmt"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// builtBatch is a closed batch encoded by the sender, waiting for the
// partition's publisher.
type builtBatch struct {
	msgs []ProducerMessage
	data []byte
	err  error // the encoding failed
}

// sender is the goroutine of one partition: it closes the open batch when
// its linger ends and encodes the closed batches one at a time, in order,
// handing each to the partition's publisher goroutine, which sends them
// one at a time. Encoding batch n+1 while batch n is in flight takes the
// build (about a quarter of a 1 MiB batch's round trip) off the serial
// path; at most one encoded batch waits beside the one in flight. The
// sender ends when the producer's context is cancelled (after Close's
// flush).
func (bp *BatchProducer) sender(pp *bpPartition) {
	defer bp.wg.Done()
	built := make(chan builtBatch) // unbuffered: one waiting, one in flight
	published := make(chan struct{})
	go func() {
		defer close(published)
		for bb := range built {
			bp.publishBatch(pp, bb)
		}
	}()
	defer func() {
		close(built)
		<-published
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var b batch.Builder
	for {
		msgs, wait := bp.next(pp)
		if msgs != nil {
			data, err := encodeMessages(&b, msgs)
			built <- builtBatch{msgs: msgs, data: data, err: err}
			continue
		}
		var tc <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-pp.wake:
		case <-tc:
		case <-bp.ctx.Done():
			return
		}
		if tc != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// encodeMessages encodes msgs as one batch with b.
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

// next takes pp's next closed batch, closing the open one first when its
// linger has passed and no batch of pp is in flight. With nothing to send
// it returns how long the open batch may still linger, or -1 to wait for a
// wake-up.
func (bp *BatchProducer) next(pp *bpPartition) ([]ProducerMessage, time.Duration) {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	if len(pp.closed) == 0 && len(pp.open) > 0 {
		if pp.busy > 0 {
			// A batch is in flight: the open one keeps growing until it
			// is full or the publisher is done (which wakes the sender),
			// as a Kafka producer's ready batch waits for its in-flight
			// slot. Only full batches are encoded ahead.
			return nil, -1
		}
		if left := bp.cfg.Linger - time.Since(pp.first); left > 0 {
			return nil, left
		}
		bp.closeOpen(pp)
	}
	if len(pp.closed) == 0 {
		return nil, -1
	}
	msgs := pp.closed[0]
	pp.closed[0] = nil
	pp.closed = pp.closed[1:]
	pp.busy++
	return msgs, 0
}

// publishBatch publishes one encoded batch with retries, reports the
// outcome and frees the records' buffer space.
func (bp *BatchProducer) publishBatch(pp *bpPartition, bb builtBatch) {
	tp := pp.tp
	msgs, err := bb.msgs, bb.err
	var res PublishResult
	bp.sem <- struct{}{}
	if err == nil {
		res, err = bp.publish(tp, bb.data)
	}
	<-bp.sem
	bp.mu.Lock()
	bp.releaseBytes(msgs)
	pp.busy--
	signal(pp.wake) // the open batch may go now
	bp.mu.Unlock()
	switch {
	case err != nil && bp.cfg.OnError != nil:
		bp.cfg.OnError(BatchError{Topic: tp.topic, Partition: tp.partition, Messages: msgs, Err: err})
	case err != nil:
		bp.p.cfg.Logger.Error("sdk: batch failed", "topic", tp.topic, "partition", tp.partition, "records", len(msgs), "err", err)
	case bp.cfg.OnAck != nil:
		bp.cfg.OnAck(BatchAck{Topic: tp.topic, Partition: tp.partition, BaseOffset: res.BaseOffset, Durability: res.Durability, Messages: msgs})
	}
	bp.mu.Lock()
	bp.releaseRecords(len(msgs))
	bp.mu.Unlock()
}

// publish sends one encoded batch, retrying retriable failures as
// Producer does (Retries, exponential backoff with jitter).
func (bp *BatchProducer) publish(tp topicPartition, data []byte) (PublishResult, error) {
	ctx := bp.ctx
	for attempt := 1; ; attempt++ {
		res, err := bp.p.client.Publish(ctx, tp.topic, tp.partition, data)
		if err == nil {
			return res, nil
		}
		if errors.Is(err, api.ErrUnknownTopic) || errors.Is(err, api.ErrUnknownPartition) {
			bp.forgetTopic(tp.topic)
		}
		if !bp.p.retry(ctx, err, attempt, fmt.Sprintf("publish %s/%d", tp.topic, tp.partition)) {
			return PublishResult{}, err
		}
	}
}
