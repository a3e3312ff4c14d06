// Command subscriber reads an SQ topic in a consumer group and prints each
// record: the subscribing half of the publish_subscribe example. Stop it
// with Ctrl-C; it commits its position on the way out.
//
//	go run ./examples/publish_subscribe/subscriber -addr 127.0.0.1:6064 -topic orders -group my-group
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/seedqueue/sq/sdk"
)

func main() {
	addr := flag.String("addr", sdk.DefaultAddr, "data-plane address of the SQ server")
	topic := flag.String("topic", "orders", "topic to read")
	group := flag.String("group", "my-group", "consumer group (empty: no committed offsets)")
	from := flag.String("from", "earliest", "where to start without a committed offset: earliest or latest")
	flag.Parse()

	start := sdk.StartEarliest
	if *from == "latest" {
		start = sdk.StartLatest
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	consumer, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{
		Addr:          *addr,
		ClientID:      "example-subscriber",
		Topic:         *topic,
		ConsumerGroup: *group,
		AutoCommit:    *group != "",
		StartFrom:     start,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		log.Fatalf("subscribe: %v", err)
	}
	defer func() {
		// A second Ctrl-C ends the process at once; Close itself is
		// bounded by the client's RequestTimeout (30 s by default).
		stop()
		if err := consumer.Close(); err != nil {
			log.Printf("final commit: %v", err)
		}
	}()

	for {
		messages, err := consumer.Poll(ctx)
		if errors.Is(err, context.Canceled) {
			return
		}
		if err != nil {
			log.Printf("poll: %v", err)
			return
		}
		for _, m := range messages {
			fmt.Printf("[%s] partition=%d offset=%d key=%q value=%q\n", m.Topic, m.Partition, m.Offset, m.Key, m.Value)
		}
	}
}
