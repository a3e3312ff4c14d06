// Command subscriber reads an SQ topic in a consumer group and prints each
// record: the subscribing half of the publish_subscribe example. Stop it
// with Ctrl-C; it commits its position on the way out, within -close-timeout
// even when the server no longer answers (a second Ctrl-C ends it at once).
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
	closeTimeout := flag.Duration("close-timeout", sdk.DefaultCloseTimeout, "bound of the final commit and leaving the group at exit")
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
		CloseTimeout:  *closeTimeout,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		log.Fatalf("subscribe: %v", err)
	}
	defer func() {
		// After the first Ctrl-C, a second one ends the process at once
		// (stop restores the default handling). Close commits and leaves
		// the group within CloseTimeout; a commit that could not be
		// stored in time is reported with the partitions whose records
		// will be read again.
		stop()
		err := consumer.Close()
		var notStored *sdk.CloseCommitError
		switch {
		case errors.As(err, &notStored):
			log.Printf("final commit: %d partitions not committed, their records will be read again: %v", len(notStored.Positions), err)
		case err != nil:
			log.Printf("close: %v", err)
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
