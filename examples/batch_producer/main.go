// Command batch_producer publishes many records with sdk.BatchProducer:
// Send returns as soon as the record is buffered, batches are sent per
// partition by linger time, size and record count, and the outcome of
// each batch arrives through OnAck and OnError. Ctrl-C stops it: it then
// reports what was acknowledged and exits; a second Ctrl-C exits at once.
//
//	go run ./examples/batch_producer -addr 127.0.0.1:6064 -topic events -count 100000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/sdk"
)

func main() {
	addr := flag.String("addr", sdk.DefaultAddr, "data-plane address of the SQ server")
	topic := flag.String("topic", "events", "topic to publish to (created with 3 partitions if missing)")
	count := flag.Int("count", 100000, "records to publish")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var acked, failed atomic.Int64
	producer, err := sdk.NewBatchProducer(ctx, sdk.BatchProducerConfig{
		ProducerConfig: sdk.ProducerConfig{Addr: *addr, ClientID: "example-batch-producer"},
		Linger:         5 * time.Millisecond, // wait up to 5 ms to fill a batch
		BatchBytes:     1 << 20,              // close a batch at 1 MiB
		BufferBytes:    32 << 20,             // Send blocks beyond 32 MiB buffered
		OnAck:          func(a sdk.BatchAck) { acked.Add(int64(len(a.Messages))) },
		OnError: func(e sdk.BatchError) {
			failed.Add(int64(len(e.Messages)))
			log.Printf("%d records to %s/%d failed: %v", len(e.Messages), e.Topic, e.Partition, e.Err)
		},
	})
	if err != nil {
		log.Fatalf("connect: %v", err)
	}
	_, err = producer.Client().CreateTopic(ctx, *topic, 3, sdk.TopicConfig{})
	if err != nil && !errors.Is(err, api.ErrTopicExists) {
		log.Fatalf("create topic %s: %v", *topic, err)
	}

	start := time.Now()
	for i := range *count {
		key := fmt.Appendf(nil, "user-%d", i%16) // one key keeps its order
		// Send blocks while the buffer is full; after Ctrl-C (ctx done) it
		// returns ctx's error, buffer space or not.
		if err := producer.Send(ctx, *topic, key, fmt.Appendf(nil, "event-%d", i)); err != nil {
			if ctx.Err() == nil {
				log.Printf("send: %v", err)
			}
			break
		}
	}
	interrupted := ctx.Err() != nil
	// From here a second Ctrl-C ends the process at once (the default
	// action of the signal).
	stop()
	// Close flushes: it returns once every buffered record is acknowledged
	// or reported to OnError. Without a server that happens within the
	// producer's DeliveryTimeout (30 s by default); CloseContext bounds
	// the wait further, then reports the records left with
	// context.Canceled. After a Ctrl-C nothing more is waited for.
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if interrupted {
		cancel()
	}
	if err := producer.CloseContext(closeCtx); err != nil {
		log.Printf("close: %v", err)
	}
	elapsed := time.Since(start)
	fmt.Printf("%d acknowledged, %d failed in %v (%.0f records/s)\n",
		acked.Load(), failed.Load(), elapsed.Round(time.Millisecond), float64(acked.Load())/elapsed.Seconds())
}
