package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// TestConsumerAcrossDeleteRestartRecreate: an SDK group consumer with
// AutoCommit reads a topic; the topic is deleted, the server restarted on
// the same address, and the topic created again and published to. The
// consumer starts over on the new topic, reads exactly its records, and
// Close commits them without reporting the old topic's positions as lost
// (nothing could store or re-read them). With and without the restart.
func TestConsumerAcrossDeleteRestartRecreate(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprint("restart=", restart), func(t *testing.T) {
			dir := t.TempDir()
			// Later starts keep the address the consumer reconnects to.
			_, flags := fixedAddrs(t)
			srv := startServer(t, dir, flags...)
			defer func() { srv.stop() }()
			sqOK(t, srv.addr, []byte(nil), "topic", "create", "rc", "--partitions", "2")
			sqOK(t, srv.addr, []byte(strings.Repeat("old\n", 10)), "produce", "--topic", "rc")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: srv.addr, Topic: "rc", ConsumerGroup: "g",
				AutoCommit: true, AutoCommitInterval: time.Hour, MaxWait: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseWithoutCommit()
			poll := func(want string, n int) {
				t.Helper()
				got := 0
				for got < n {
					msgs, err := c.Poll(ctx)
					if ctx.Err() != nil {
						t.Fatalf("read %d of %d %q records: %v", got, n, want, err)
					}
					for _, m := range msgs {
						if string(m.Value) != want {
							t.Fatalf("record %d/%d = %q, want %q", m.Partition, m.Offset, m.Value, want)
						}
						got++
					}
				}
			}
			poll("old", 10)
			sqOK(t, srv.addr, nil, "topic", "delete", "rc")
			if restart {
				srv = srv.restart(t)
			}
			sqOK(t, srv.addr, nil, "topic", "create", "rc", "--partitions", "3")
			sqOK(t, srv.addr, []byte(strings.Repeat("new\n", 7)), "produce", "--topic", "rc")
			poll("new", 7)
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: srv.addr})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			offs, err := cl.FetchOffsets(ctx, "g", "rc")
			total := uint64(0)
			for _, o := range offs {
				total += o.Offset
			}
			if err != nil || total != 7 {
				t.Fatalf("committed offsets of the new topic after Close: %+v %v, want 7 in all", offs, err)
			}
		})
	}
}
