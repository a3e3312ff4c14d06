package segment

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/internal/faultfs"
	"github.com/seedqueue/sq/ring"
)

// crashSeed runs one seed of TestCrashSeeds (also SQ_CRASH_SEED).
var crashSeed = flag.Uint64("seed", 0, "run only this seed of TestCrashSeeds (env SQ_CRASH_SEED)")

// crashSeedCount is the number of seeds TestCrashSeeds runs by default.
const crashSeedCount = 250

// seedsToRun returns the seeds of a seeded test: the one given by -seed or
// SQ_CRASH_SEED, else 1..n.
func seedsToRun(t *testing.T, n uint64) []uint64 {
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

// crashRun is what one seed did before its crash.
type crashRun struct {
	acked   uint64 // every offset below is acknowledged (covered by a Sync)
	written uint64 // no append reached this offset: nothing at or above may exist
	failed  bool   // a sync failed (ErrFailed)
	torn    bool   // Restore kept random unsynced bytes
}

// TestCrashSeeds appends under the every-batch discipline (Append, then
// Sync, then acknowledge) through faultfs, crashes it at a random counted
// call, with random injected ENOSPC writes and EIO syncs on the way,
// restores the synced state (or a torn one), reopens, and checks that
// every acknowledged record is readable with contiguous offsets from 0,
// that nothing beyond what was appended appears, and that the log takes
// appends and survives another restart. Rerun one seed with
// SQ_CRASH_SEED=<n> go test -run TestCrashSeeds ./segment.
// Writes go through each I/O backend in turn (faultfs simulates the syncs).
func TestCrashSeeds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		for _, seed := range seedsToRun(t, crashSeedCount) {
			if !t.Run(fmt.Sprint(seed), func(t *testing.T) { crashOnce(t, be, seed) }) {
				t.Logf("seed %d failed; rerun it with SQ_CRASH_SEED=%d go test -run TestCrashSeeds ./segment", seed, seed)
			}
		}
	})
}

func crashOnce(t *testing.T, be ring.Backend, seed uint64) {
	crashOnceWith(t, be, seed, smallOptions())
}

// crashOnceWith is crashOnce with the Log's options.
func crashOnceWith(t *testing.T, be ring.Backend, seed uint64, opts Options) {
	root := t.TempDir()
	dir := filepath.Join(root, "p")
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	fs := faultfs.New(root, be)
	l, err := Open(dir, fs, fs.Backend(), opts)
	if err != nil {
		t.Fatalf("seed %d: Open: %v", seed, err)
	}
	run := appendUntilCrash(t, l, fs, rng)
	run.torn = seed%2 == 0
	fs.Crash()
	abandon(t, l)
	var trng *rand.Rand
	if run.torn {
		trng = rng
	}
	if err := fs.Restore(trng); err != nil {
		t.Fatalf("seed %d: Restore: %v", seed, err)
	}
	l, err = Open(dir, fs, fs.Backend(), opts)
	if err != nil {
		t.Fatalf("seed %d (%+v): reopen after crash: %v", seed, run, err)
	}
	checkRecovered(t, seed, l, run)
	next := l.NextOffset()
	if info, err := l.Append([][]byte{makeBatch(t, next, 3, 40)}); err != nil || info.BaseOffset != next {
		t.Fatalf("seed %d: Append after recovery = %+v, %v; want base %d", seed, info, err, next)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("seed %d: Close: %v", seed, err)
	}
	l, err = Open(dir, fs, fs.Backend(), opts)
	if err != nil {
		t.Fatalf("seed %d: reopen after a clean stop: %v", seed, err)
	}
	defer l.Close()
	if _, end := readable(t, l); end != next+3 {
		t.Fatalf("seed %d: after a clean restart readable to %d, want %d", seed, end, next+3)
	}
}

// appendUntilCrash appends random batches, syncing after each append,
// until the crash point (chosen here) or a failed sync.
func appendUntilCrash(t *testing.T, l *Log, fs *faultfs.FS, rng *rand.Rand) crashRun {
	var run crashRun
	fs.CrashAfter(1 + rng.Int64N(80))
	switch rng.IntN(4) {
	case 0: // a full disk for a while: partial writes fail with ENOSPC
		fs.Inject(faultfs.Rule{Ops: faultfs.OpWrite | faultfs.OpAllocate, Path: "*.log", After: rng.IntN(20), Times: 1 + rng.IntN(3), Err: syscall.ENOSPC, Partial: true})
	case 1: // a failed fdatasync (docs/architecture.md §3.3)
		fs.Inject(faultfs.Rule{Ops: faultfs.OpSync, After: rng.IntN(20), Times: 1, Err: syscall.EIO})
	}
	for i := 0; i < 60 && !fs.Crashed(); i++ {
		next := l.NextOffset()
		var bs [][]byte
		for range 1 + rng.IntN(3) {
			n := 1 + rng.IntN(4)
			bs = append(bs, makeBatch(t, next, n, 10+rng.IntN(120)))
			next += uint64(n)
		}
		run.written = max(run.written, next) // a failed write may leave whole batches
		if _, err := l.Append(bs); err != nil {
			if errors.Is(err, ErrFailed) {
				run.failed = true
				break
			}
			continue // ENOSPC or the crash: nothing published
		}
		if err := l.Sync(); err != nil {
			run.failed = errors.Is(err, ErrFailed)
			break
		}
		run.acked = l.NextOffset()
		if rng.IntN(4) == 0 {
			_ = l.Checkpoint() // may fail at the crash: the old point stays
		}
	}
	return run
}

// checkRecovered checks the log recovered after a crash against run.
func checkRecovered(t *testing.T, seed uint64, l *Log, run crashRun) {
	t.Helper()
	start, end := readable(t, l) // contiguous, CRCs, values name offsets
	switch {
	case start != 0:
		t.Fatalf("seed %d (%+v): log starts at %d", seed, run, start)
	case end < run.acked:
		t.Fatalf("seed %d (%+v): readable to %d, but %d were acknowledged", seed, run, end, run.acked)
	case end > run.written:
		t.Fatalf("seed %d (%+v): readable to %d, beyond the %d appended (phantom records)", seed, run, end, run.written)
	}
}
