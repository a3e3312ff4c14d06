package sdk

import (
	"fmt"
	"time"

	"github.com/seedqueue/sq/api/batch"
)

// builtBatch is a closed batch encoded by the sender, waiting for the
// partition's publisher.
type builtBatch struct {
	msgs     []ProducerMessage
	data     []byte
	err      error     // the encoding failed
	deadline time.Time // DeliveryTimeout after the first record was accepted
}

// sender is the goroutine of one partition: it closes the open batch when
// its linger ends and encodes the closed batches one at a time, in order,
// handing each to the partition's publisher goroutine (publisher), which
// keeps up to MaxInFlightPerPartition of them in flight. Encoding the next
// batch while earlier ones are in flight takes the build (about a quarter
// of a 1 MiB batch's round trip) off the serial path; at most one encoded
// batch waits beside those in flight. The sender ends when the producer's
// context is cancelled (after Close's flush).
func (bp *BatchProducer) sender(pp *bpPartition) {
	defer bp.wg.Done()
	built := make(chan builtBatch) // unbuffered: one waiting, one in flight
	published := make(chan struct{})
	go func() {
		defer close(published)
		bp.publisher(pp, built)
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
		nb, wait := bp.next(pp)
		if nb.msgs != nil {
			data, err := encodeMessages(&b, nb.msgs)
			built <- builtBatch{msgs: nb.msgs, data: data, err: err, deadline: nb.first.Add(bp.p.cfg.DeliveryTimeout)}
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
func (bp *BatchProducer) next(pp *bpPartition) (bpBatch, time.Duration) {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	if len(pp.closed) == 0 && len(pp.open) > 0 {
		if pp.busy >= bp.cfg.MaxInFlightPerPartition || (pp.busy > 0 && bp.cfg.Linger < 0) {
			// The window is full (or, without linger, a batch is in
			// flight: the open one gathers the records sent meanwhile
			// instead of going out as many tiny batches): the open batch
			// keeps growing until it is full or a batch is done (which
			// wakes the sender), as a Kafka producer's ready batch waits
			// for its in-flight slot. Only full batches are encoded ahead.
			return bpBatch{}, -1
		}
		if left := bp.cfg.Linger - time.Since(pp.first); left > 0 {
			return bpBatch{}, left
		}
		bp.closeOpen(pp)
	}
	if len(pp.closed) == 0 {
		return bpBatch{}, -1
	}
	b := pp.closed[0]
	pp.closed[0] = bpBatch{}
	pp.closed = pp.closed[1:]
	pp.busy++
	return b, 0
}
