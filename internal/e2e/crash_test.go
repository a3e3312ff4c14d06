package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// Shape of the crash test: crashTotal records of crashValueBytes bytes,
// sent crashBatch at a time by crashProducers goroutines; the server is
// SIGKILLed once crashKillAfter records are acknowledged.
const (
	crashTotal      = 200_000
	crashValueBytes = 100
	crashBatch      = 1_000
	crashProducers  = 4
	crashKillAfter  = 50_000
	crashPartitions = 4
	crashTopic      = "crash"
)

// crashValue is record id's value: "id=<9 digits>;" padded to
// crashValueBytes. It does not depend on the partition.
func crashValue(id int) []byte {
	v := make([]byte, crashValueBytes)
	n := copy(v, fmt.Sprintf("id=%09d;", id))
	for i := n; i < len(v); i++ {
		v[i] = byte('a' + (id+i)%26)
	}
	return v
}

// crashID parses a value written by crashValue and checks every byte.
func crashID(v []byte) (int, bool) {
	if len(v) != crashValueBytes || !bytes.HasPrefix(v, []byte("id=")) || v[12] != ';' {
		return 0, false
	}
	id, err := strconv.Atoi(string(v[3:12]))
	if err != nil || id < 0 || id >= crashTotal {
		return 0, false
	}
	return id, bytes.Equal(v, crashValue(id))
}

// ackedAt is where an acknowledged record was stored.
type ackedAt struct {
	ok        bool
	partition uint32
	offset    uint64
}

// crashLoad sends the records ids (in batches of crashBatch) from
// crashProducers goroutines and stores each acknowledgement in acked. It
// stops at the first failed batch of each goroutine. When killAfter > 0,
// onThreshold runs once killAfter records are acknowledged.
type crashLoad struct {
	p           *sdk.Producer
	ids         []int
	acked       []ackedAt
	ackedCount  atomic.Int64
	killAfter   int64
	onThreshold func()
	once        sync.Once
	errMu       sync.Mutex
	errs        []error // the error of each failed batch
}

func (l *crashLoad) run(ctx context.Context) (failedBatches int64) {
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range crashProducers {
		wg.Go(func() {
			msgs := make([]sdk.ProducerMessage, 0, crashBatch)
			for {
				start := int(next.Add(crashBatch)) - crashBatch
				if start >= len(l.ids) {
					return
				}
				ids := l.ids[start:min(start+crashBatch, len(l.ids))]
				msgs = msgs[:0]
				for _, id := range ids {
					msgs = append(msgs, sdk.NewProducerMessage(crashTopic, crashValue(id)))
				}
				acks, err := l.p.SendBatch(ctx, msgs)
				for i, a := range acks {
					if a.Err == nil {
						l.acked[ids[i]] = ackedAt{ok: true, partition: a.Partition, offset: a.Offset}
						if l.ackedCount.Add(1) == l.killAfter && l.onThreshold != nil {
							l.once.Do(l.onThreshold)
						}
					}
				}
				if err != nil {
					failed.Add(1)
					l.errMu.Lock()
					l.errs = append(l.errs, err)
					l.errMu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return failed.Load()
}

// TestCrashKeepsAcknowledgedRecords SIGKILLs (or SIGTERMs) sq-server under
// an every-batch load, restarts it, sends what was not acknowledged, and checks that every
// acknowledged record is stored where its acknowledgement said, with dense
// offsets from 0 in every partition.
func TestCrashKeepsAcknowledgedRecords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		flags []string
		term  bool // stop with SIGTERM (a graceful stop under load) instead of SIGKILL
	}{
		{"default segments", nil, false},
		// About five segments per partition, so the kill may land on a
		// roll.
		{"1 MiB segments", []string{"--segment-bytes", "1048576", "--max-batch-bytes", "262144", "--max-record-bytes", "65536"}, false},
		{"SIGTERM under load", nil, true},
		// O_DIRECT writes of whole blocks (the partial last block is
		// rewritten by each append), killed mid-write, rolls included.
		{"direct writes", []string{"--direct-writes", "--segment-bytes", "1048576", "--max-batch-bytes", "262144", "--max-record-bytes", "65536"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testCrash(t, tc.flags, tc.term)
		})
	}
}

func testCrash(t *testing.T, flags []string, term bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := startServer(t, t.TempDir(), append([]string{"--sync-policy", "every-batch"}, flags...)...)
	admin, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateTopic(ctx, crashTopic, crashPartitions, sdk.TopicConfig{SyncPolicy: "every-batch"}); err != nil {
		t.Fatal(err)
	}
	admin.Close()

	acked := make([]ackedAt, crashTotal)
	all := make([]int, crashTotal)
	for i := range all {
		all[i] = i
	}
	// Phase 1: load until SIGKILL. Retries are off so the producers stop
	// at the first failure instead of waiting for the dead server.
	p1 := newCrashProducer(ctx, t, srv.addr)
	killed := make(chan struct{})
	stopCode := 0
	load := &crashLoad{p: p1, ids: all, acked: acked, killAfter: crashKillAfter, onThreshold: func() {
		if term {
			stopCode = srv.stop()
		} else {
			srv.kill()
		}
		close(killed)
	}}
	failed := load.run(ctx)
	p1.Close()
	select {
	case <-killed:
	default:
		t.Fatalf("the load ended with %d records acknowledged, before the kill at %d", load.ackedCount.Load(), crashKillAfter)
	}
	if stopCode != 0 {
		t.Fatalf("sq-server exited with status %d after SIGTERM under load; log:\n%s", stopCode, srv.log)
	}
	t.Logf("phase 1: %d records acknowledged before and around the stop, %d batches failed", load.ackedCount.Load(), failed)
	for _, err := range load.errs {
		t.Logf("phase 1: a batch failed: %v", err)
	}

	// Phase 2: restart on the same directory and send the rest.
	srv = startServer(t, srv.dataDir, srv.extra...)
	var rest []int
	for id, a := range acked {
		if !a.ok {
			rest = append(rest, id)
		}
	}
	p2 := newCrashProducer(ctx, t, srv.addr)
	load2 := &crashLoad{p: p2, ids: rest, acked: acked}
	if failed := load2.run(ctx); failed > 0 {
		t.Fatalf("phase 2: %d batches failed after the restart", failed)
	}
	p2.Close()

	total := verifyCrashLog(ctx, t, srv.addr, acked)
	if term && total != crashTotal {
		// A graceful stop answers every request it carried out.
		t.Errorf("after SIGTERM under load %d records are stored, %d were acknowledged: a stored batch lost its acknowledgement", total, crashTotal)
	}
}

func newCrashProducer(ctx context.Context, t *testing.T, addr string) *sdk.Producer {
	t.Helper()
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: addr, Retries: sdk.RetriesNone, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// verifyCrashLog reads every partition from 0 to its high watermark and
// checks dense offsets, well-formed values, and that each acknowledged
// record is at its acknowledged place. It returns the number of records
// stored.
func verifyCrashLog(ctx context.Context, t *testing.T, addr string, acked []ackedAt) int {
	t.Helper()
	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stored := make([]map[uint64]int, crashPartitions) // offset -> id
	total := 0
	for p := range uint32(crashPartitions) {
		stored[p] = map[uint64]int{}
		var off uint64
		for {
			res, err := c.Fetch(ctx, sdk.FetchRequest{Topic: crashTopic, Partition: p, Offset: off})
			if err != nil {
				t.Fatalf("fetch partition %d at %d: %v", p, off, err)
			}
			if res.LogStartOffset != 0 {
				t.Fatalf("partition %d: log start offset %d, want 0", p, res.LogStartOffset)
			}
			for _, m := range res.Messages {
				if m.Offset != off {
					t.Fatalf("partition %d: offset %d after %d: offsets not dense", p, m.Offset, off-1)
				}
				id, ok := crashID(m.Value)
				if !ok {
					t.Fatalf("partition %d offset %d: value %q is not a record the test wrote", p, m.Offset, m.Value)
				}
				stored[p][m.Offset] = id
				off++
			}
			if off >= res.HighWatermark {
				break
			}
			if len(res.Messages) == 0 {
				t.Fatalf("partition %d: empty fetch at %d below the high watermark %d", p, off, res.HighWatermark)
			}
		}
		total += int(off)
	}
	for id, a := range acked {
		if !a.ok {
			t.Fatalf("record %d was never acknowledged", id)
		}
		got, ok := stored[a.partition][a.offset]
		if !ok {
			t.Fatalf("record %d acknowledged at partition %d offset %d is missing (high watermark below it)", id, a.partition, a.offset)
		}
		if got != id {
			t.Fatalf("partition %d offset %d holds record %d, acknowledged for record %d", a.partition, a.offset, got, id)
		}
	}
	segments := 0
	if info, err := c.DescribeTopic(ctx, crashTopic); err == nil {
		for _, pi := range info.PartitionInfos {
			segments += int(pi.SegmentCount)
		}
	}
	t.Logf("verified %d acknowledged records; %d stored in %d segments (%d more than acknowledged: stored, but their acknowledgement was lost in the crash)",
		len(acked), total, segments, total-len(acked))
	return total
}
