package engine

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/seedqueue/sq/internal/faultfs"
	"github.com/seedqueue/sq/ring"
)

// crashSeed runs one seed of TestEngineCrashSeeds (also SQ_CRASH_SEED).
var crashSeed = flag.Uint64("seed", 0, "run only this seed of TestEngineCrashSeeds (env SQ_CRASH_SEED)")

// engineCrashSeeds is the number of seeds run by default.
const engineCrashSeeds = 60

func engineSeeds(t *testing.T) []uint64 { return engineSeedsN(t, engineCrashSeeds) }

// engineSeedsN returns seeds 1 to n, or the one seed asked for with -seed
// or SQ_CRASH_SEED.
func engineSeedsN(t *testing.T, n int) []uint64 {
	if *crashSeed != 0 {
		return []uint64{*crashSeed}
	}
	if s := os.Getenv("SQ_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SQ_CRASH_SEED=%q: %v", s, err)
		}
		return []uint64{v}
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// TestEngineCrashSeeds publishes under every-batch to two partitions
// through faultfs, crashes at a random counted call, restores the synced
// (odd seeds) or a torn (even seeds) state, reopens, and checks that every
// acknowledged record is at its acknowledged offset, offsets are
// contiguous, every stored record is one that was published, and the
// next publish continues after the recovered end. Rerun one seed with
// SQ_CRASH_SEED=<n> go test -run TestEngineCrashSeeds ./engine.
// Writes go through each I/O backend in turn (faultfs simulates the syncs).
func TestEngineCrashSeeds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		for _, seed := range engineSeeds(t) {
			if !t.Run(fmt.Sprint(seed), func(t *testing.T) { engineCrashOnce(t, be, seed) }) {
				t.Logf("seed %d failed; rerun it with SQ_CRASH_SEED=%d go test -run TestEngineCrashSeeds ./engine", seed, seed)
			}
		}
	})
}

func engineCrashOnce(t *testing.T, be ring.Backend, seed uint64) {
	dir := t.TempDir()
	fs := faultfs.New(dir, be)
	opts := testOptions(dir)
	opts.FS, opts.Backend, opts.ScrubBytesPerSec = fs, fs.Backend(), -1
	opts.SegmentBytes, opts.MaxBatchBytes, opts.PreallocBytes = 8<<10, 2<<10, 4<<10
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 0xc4a5))
	fs.CrashAfter(1 + rng.Int64N(120))
	acked := [2]map[uint64]string{{}, {}}
	sent := map[string]bool{}
	for i := 0; i < 60 && !fs.Crashed(); i++ {
		p := rng.IntN(2)
		var values []string
		for j := range 1 + rng.IntN(5) {
			v := fmt.Sprintf("s%d-i%d-j%d-%s", seed, i, j, strings.Repeat("x", rng.IntN(200)))
			values = append(values, v)
			sent[v] = true
		}
		res, err := e.Append(context.Background(), "t", p, mkBatch(t, values...))
		if err != nil {
			continue // failed by the crash: not acknowledged
		}
		for j, v := range values {
			acked[p][res.BaseOffset+uint64(j)] = v
		}
	}
	fs.Crash()
	e.Close() // fails: the process is dead
	var torn *rand.Rand
	if seed%2 == 0 {
		torn = rng
	}
	if err := fs.Restore(torn); err != nil {
		t.Fatal(err)
	}
	e, err = Open(opts)
	if err != nil {
		t.Fatalf("seed %d: reopen: %v", seed, err)
	}
	defer e.Close()
	for p := range 2 {
		if ti, _ := e.DescribeTopic("t"); ti.Partitions[p].Err != nil {
			t.Fatalf("seed %d: partition %d failed after recovery: %v", seed, p, ti.Partitions[p].Err)
		}
		got := readAll(t, e, "t", p) // contiguous from 0
		for off, v := range acked[p] {
			if off >= uint64(len(got)) || got[off] != v {
				t.Fatalf("seed %d: partition %d: acknowledged record %d lost (%d records recovered)", seed, p, off, len(got))
			}
		}
		for off, v := range got {
			if !sent[v] {
				t.Fatalf("seed %d: partition %d offset %d holds %q, never published (phantom)", seed, p, off, v)
			}
		}
		if res := appendValues(t, e, "t", p, "after"); res.BaseOffset != uint64(len(got)) {
			t.Fatalf("seed %d: partition %d: next publish at %d, want %d", seed, p, res.BaseOffset, len(got))
		}
	}
}
