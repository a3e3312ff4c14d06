package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestRefusedBatchTakesBackPreallocatedSpace: on a 16 MiB volume, after
// 50 partitions took one record each, their preallocation steps hold most
// of the room above the floor. A batch larger than that room and than its
// own partition's spare space is accepted: the other partitions give their
// unused preallocated space back first. They keep accepting records
// afterwards, the floor holds, and everything reads back after a restart.
func TestRefusedBatchTakesBackPreallocatedSpace(t *testing.T) {
	const capacity, parts = 16 << 20, 50
	d := newSmallDisk(capacity)
	opts := Options{DataDir: t.TempDir(), FS: d, Backend: d, MinFreeBytes: MinFreeAuto, SyncPolicy: "none",
		MaxBatchBytes: 2 << 20, MaxRecordBytes: 2 << 20,
		DiskFree: func(string) (int64, error) { return d.free(), nil }, Logger: slog.New(slog.DiscardHandler)}
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", parts, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	want := make([][]string, parts)
	for p := range parts {
		v := fmt.Sprintf("small %d", p)
		appendValues(t, e, "t", p, v)
		want[p] = append(want[p], v)
	}
	floor := e.MinFreeBytes()
	last := parts - 1
	_, lp, err := e.partition("t", last)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("b", 1<<20)
	batchBytes := int64(len(mkBatch(t, big)))
	var held int64
	for p := range parts - 1 {
		_, pp, _ := e.partition("t", p)
		held += pp.spare()
	}
	// Without giving space back the batch fits neither above the floor
	// nor in its partition's spare space, but in what the others hold.
	if room := d.free() - floor; room >= batchBytes || lp.spare() >= batchBytes || held < batchBytes {
		t.Fatalf("setup: room above the floor %d, own spare %d, others' spare %d, batch %d: the batch must need the others' space",
			room, lp.spare(), held, batchBytes)
	}
	if _, err := e.Append(context.Background(), "t", last, mkBatch(t, big)); err != nil {
		t.Fatalf("batch of %d bytes with %d bytes preallocated by other partitions: %v", batchBytes, held, err)
	}
	want[last] = append(want[last], big)
	if free := d.free(); free < floor {
		t.Errorf("%d bytes free after the batch, below the floor %d", free, floor)
	}
	for p := range parts {
		v := fmt.Sprintf("after %d", p)
		appendValues(t, e, "t", p, v)
		want[p] = append(want[p], v)
	}
	e.Close()
	e = openTest(t, opts)
	for p := range parts {
		if got := readAll(t, e, "t", p); !equal(got, want[p]) {
			t.Fatalf("partition %d after a restart: %d records, want %d", p, len(got), len(want[p]))
		}
	}
}

// TestReclaimDuringAppends: partitions keep appending while big batches
// to another partition make them give back their preallocated space;
// every publish succeeds or gets DISK_FULL, and every acknowledged record
// reads back in order (run with -race).
func TestReclaimDuringAppends(t *testing.T) {
	const capacity, parts, writers = 16 << 20, 20, 4
	d := newSmallDisk(capacity)
	opts := Options{DataDir: t.TempDir(), FS: d, Backend: d, MinFreeBytes: MinFreeAuto, SyncPolicy: "none",
		MaxBatchBytes: 2 << 20, MaxRecordBytes: 2 << 20,
		DiskFree: func(string) (int64, error) { return d.free(), nil }, Logger: slog.New(slog.DiscardHandler)}
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", parts, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	for p := range parts {
		appendValues(t, e, "t", p, "first")
	}
	want := make([][]string, parts)
	for p := range parts {
		want[p] = []string{"first"}
	}
	errs := make(chan error, writers+1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				v := fmt.Sprintf("w%d-%d-%s", w, i, strings.Repeat("x", 4000))
				_, err := e.Append(context.Background(), "t", w, mkBatch(t, v))
				switch {
				case err == nil:
					want[w] = append(want[w], v)
				case codeOf(err) != api.CodeDiskFull:
					errs <- fmt.Errorf("partition %d: %w", w, err)
					return
				}
			}
		})
	}
	last := parts - 1
	for i := range 8 {
		v := fmt.Sprintf("big-%d-%s", i, strings.Repeat("b", 512<<10))
		_, err := e.Append(context.Background(), "t", last, mkBatch(t, v))
		switch {
		case err == nil:
			want[last] = append(want[last], v)
		case codeOf(err) != api.CodeDiskFull:
			t.Errorf("big batch %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for p := range parts {
		if got := readAll(t, e, "t", p); !equal(got, want[p]) {
			t.Fatalf("partition %d: %d records, want %d", p, len(got), len(want[p]))
		}
	}
}
