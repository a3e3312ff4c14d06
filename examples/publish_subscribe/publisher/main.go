// Command publisher sends records to an SQ topic, creating the topic if it
// does not exist: the publishing half of the publish_subscribe example.
//
//	go run ./examples/publish_subscribe/publisher -addr 127.0.0.1:6064 -topic orders -count 10
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/sdk"
)

func main() {
	addr := flag.String("addr", sdk.DefaultAddr, "data-plane address of the SQ server")
	topic := flag.String("topic", "orders", "topic to publish to")
	partitions := flag.Uint("partitions", 3, "partition count when the topic is created")
	count := flag.Int("count", 10, "records to publish")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	producer, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: *addr, ClientID: "example-publisher"})
	if err != nil {
		log.Fatalf("connect: %v", err)
	}
	defer producer.Close()

	_, err = producer.Client().CreateTopic(ctx, *topic, uint32(*partitions), sdk.TopicConfig{})
	if err != nil && !errors.Is(err, api.ErrTopicExists) {
		log.Fatalf("create topic %s: %v", *topic, err)
	}

	// One record at a time.
	ack, err := producer.Send(ctx, *topic, nil, []byte("hello"))
	if err != nil {
		log.Fatalf("send: %v", err)
	}
	fmt.Printf("sent hello to %s/%d at offset %d (%s)\n", ack.Topic, ack.Partition, ack.Offset, ack.Durability)

	// Or a batch: one Ack per record, each with its own Err.
	batch := make([]sdk.ProducerMessage, 0, *count)
	for i := range *count {
		batch = append(batch, sdk.NewProducerMessage(*topic, fmt.Appendf(nil, "msg-%d", i)).
			WithKey(fmt.Appendf(nil, "user-%d", i%4)))
	}
	acks, err := producer.SendBatch(ctx, batch)
	for i, a := range acks {
		if a.Err != nil {
			fmt.Printf("msg-%d failed: %v\n", i, a.Err)
			continue
		}
		fmt.Printf("msg-%d -> %s/%d offset %d\n", i, a.Topic, a.Partition, a.Offset)
	}
	if err != nil {
		log.Fatal(err)
	}
}
