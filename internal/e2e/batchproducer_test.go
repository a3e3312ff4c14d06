package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// TestBatchProducerAcrossServerRestart sends keyed records with a
// BatchProducer while the real server restarts, and checks that every
// record is stored once or more and each partition keeps the order of the
// Send calls (at-least-once: a retried batch may follow its first copy).
func TestBatchProducerAcrossServerRestart(t *testing.T) {
	_, flags := fixedAddrs(t)
	srv := startServer(t, t.TempDir(), flags...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateTopic(ctx, "bp", 2, sdk.TopicConfig{SyncPolicy: "every-batch"}); err != nil {
		t.Fatal(err)
	}
	admin.Close()

	errs := make(chan sdk.BatchError, 100)
	bp, err := sdk.NewBatchProducer(ctx, sdk.BatchProducerConfig{
		ProducerConfig: sdk.ProducerConfig{Addr: srv.addr, Retries: 100,
			RetryBackoff: 5 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond,
			ReconnectBackoff: 5 * time.Millisecond, ReconnectBackoffMax: 100 * time.Millisecond,
			Partitioner: sdk.PartitionerFunc(func(_ string, key []byte, _ uint32) uint32 { return uint32(key[1] - '0') })},
		BatchRecords: 50,
		Linger:       time.Millisecond,
		OnError:      func(e sdk.BatchError) { errs <- e },
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4000
	for i := range n {
		if i == n/2 {
			srv = srv.restart(t)
		}
		for k := range 2 {
			key := fmt.Sprintf("k%d", k)
			if err := bp.Send(ctx, "bp", []byte(key), fmt.Appendf(nil, "%s-%d", key, i)); err != nil {
				t.Fatalf("Send: %v", err)
			}
		}
	}
	if err := bp.Close(); err != nil {
		t.Fatal(err)
	}
	close(errs)
	for e := range errs {
		t.Errorf("batch failed: %v", e)
	}
	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for p := range uint32(2) {
		checkPartitionOrder(t, ctx, c, p, fmt.Sprintf("k%d", p), n)
	}
}

// checkPartitionOrder reads partition p of topic "bp" and checks that its
// distinct values are key-0 .. key-(n-1) in order.
func checkPartitionOrder(t *testing.T, ctx context.Context, c *sdk.Client, p uint32, key string, n int) {
	t.Helper()
	seen := map[string]bool{}
	next := 0
	dups := 0
	for off := uint64(0); next < n; {
		res, err := c.Fetch(ctx, sdk.FetchRequest{Topic: "bp", Partition: p, Offset: off})
		if err != nil {
			t.Fatalf("fetch %d at %d: %v", p, off, err)
		}
		if len(res.Messages) == 0 {
			t.Fatalf("partition %d: only %d of %d records stored", p, next, n)
		}
		for _, m := range res.Messages {
			v := string(m.Value)
			if seen[v] {
				dups++
				continue
			}
			seen[v] = true
			k, num, _ := strings.Cut(v, "-")
			i, _ := strconv.Atoi(num)
			if k != key || i != next {
				t.Fatalf("partition %d offset %d: %q, want %s-%d", p, m.Offset, v, key, next)
			}
			next++
		}
		off = res.NextOffset
	}
	t.Logf("partition %d: %d records in order, %d duplicates from retries", p, n, dups)
}
