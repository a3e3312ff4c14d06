package sdk

import (
	"errors"
	"fmt"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// sender is the goroutine of one partition: it closes the open batch when
// its linger ends and sends the closed batches one at a time, in order.
// It ends when the producer's context is cancelled (after Close's flush).
func (bp *BatchProducer) sender(pp *bpPartition) {
	defer bp.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var b batch.Builder
	for {
		msgs, wait := bp.next(pp)
		if msgs != nil {
			bp.sendBatch(pp.tp, msgs, &b)
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

// next takes pp's next closed batch, closing the open one first when its
// linger has passed. With nothing to send it returns how long the open
// batch may still linger, or -1 when there is no open batch.
func (bp *BatchProducer) next(pp *bpPartition) ([]ProducerMessage, time.Duration) {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	if len(pp.closed) == 0 && len(pp.open) > 0 {
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
	return msgs, 0
}

// sendBatch encodes msgs as one batch, publishes it with retries, reports
// the outcome and frees the records' buffer space.
func (bp *BatchProducer) sendBatch(tp topicPartition, msgs []ProducerMessage, b *batch.Builder) {
	bp.sem <- struct{}{}
	b.Reset()
	for i := range msgs {
		m := &msgs[i]
		b.Add(m.Key, m.Value, toBatchHeaders(m.Headers), m.Timestamp)
	}
	data, err := b.Build()
	var res PublishResult
	if err != nil {
		err = fmt.Errorf("sdk: build batch: %w", err)
	} else {
		res, err = bp.publish(tp, data)
	}
	<-bp.sem
	bp.mu.Lock()
	bp.releaseBytes(msgs)
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
