package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// Shape of the kill loop (case i): killRounds SIGKILLs, each after a
// random number of acknowledged records in [killMin, killMin+killSpread),
// sent killBatch at a time by killProducers goroutines to killPartitions
// partitions under every-batch.
const (
	killRounds     = 20
	killMin        = 1000
	killSpread     = 4000
	killBatch      = 100
	killProducers  = 2
	killPartitions = 2
	killTopic      = "kill"
)

// killValue is record id's value; killID parses it back.
func killValue(id int) []byte {
	return fmt.Appendf(nil, "kill-%08d-%s", id, strings.Repeat("k", id%50))
}

func killID(v []byte) (int, bool) {
	s := string(v)
	if len(s) < 13 || !strings.HasPrefix(s, "kill-") {
		return 0, false
	}
	id, err := strconv.Atoi(s[5:13])
	return id, err == nil && s == string(killValue(id))
}

// killLedger records where each acknowledged record was stored.
type killLedger struct {
	mu    sync.Mutex
	acked map[int]ackedAt
	next  int // next record id
}

// TestKillLoop (case i) SIGKILLs sq-server under load 20 times in a row on
// the same data directory. After each restart every record acknowledged
// so far must be stored where its acknowledgement said, with dense
// offsets, and nothing but records the test sent.
func TestKillLoop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	led := &killLedger{acked: map[int]ackedAt{}}
	for round := 0; round <= killRounds; round++ {
		srv := startServer(t, dir, "--sync-policy", "every-batch")
		c := dialT(ctx, t, srv.addr)
		if round == 0 {
			if _, err := c.CreateTopic(ctx, killTopic, killPartitions, sdk.TopicConfig{SyncPolicy: "every-batch"}); err != nil {
				t.Fatal(err)
			}
		}
		verifyKillLog(ctx, t, c, led, round)
		c.Close()
		if round == killRounds {
			break
		}
		killUnderLoad(ctx, t, srv, led, killMin+rng.IntN(killSpread))
	}
	t.Logf("%d records acknowledged over %d SIGKILLs", len(led.acked), killRounds)
}

// killUnderLoad sends records until threshold more are acknowledged, then
// SIGKILLs srv and waits for the senders to stop.
func killUnderLoad(ctx context.Context, t *testing.T, srv *server, led *killLedger, threshold int) {
	t.Helper()
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: srv.addr, Retries: sdk.RetriesNone, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var count atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	for range killProducers {
		wg.Go(func() {
			for {
				led.mu.Lock()
				first := led.next
				led.next += killBatch
				led.mu.Unlock()
				msgs := make([]sdk.ProducerMessage, killBatch)
				for i := range msgs {
					msgs[i] = sdk.NewProducerMessage(killTopic, killValue(first+i))
				}
				acks, err := p.SendBatch(ctx, msgs)
				led.mu.Lock()
				for i, a := range acks {
					if a.Err == nil {
						led.acked[first+i] = ackedAt{ok: true, partition: a.Partition, offset: a.Offset}
					}
				}
				led.mu.Unlock()
				for _, a := range acks {
					if a.Err == nil && count.Add(1) == int64(threshold) {
						once.Do(srv.kill)
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	once.Do(srv.kill) // the load failed before the threshold: still a SIGKILL
}

// verifyKillLog reads every partition and checks it against led.
func verifyKillLog(ctx context.Context, t *testing.T, c *sdk.Client, led *killLedger, round int) {
	t.Helper()
	led.mu.Lock()
	defer led.mu.Unlock()
	stored := make([]map[uint64]int, killPartitions)
	for p := range killPartitions {
		stored[p] = map[uint64]int{}
		for off, v := range fetchValues(ctx, t, c, killTopic, uint32(p)) {
			id, ok := killID([]byte(v))
			if !ok || id >= led.next {
				t.Fatalf("round %d: partition %d offset %d holds %q, not a record the test sent", round, p, off, v)
			}
			stored[p][uint64(off)] = id
		}
	}
	for id, a := range led.acked {
		got, ok := stored[a.partition][a.offset]
		if !ok || got != id {
			t.Fatalf("round %d: record %d acknowledged at partition %d offset %d is missing (found %d, %v)", round, id, a.partition, a.offset, got, ok)
		}
	}
}
