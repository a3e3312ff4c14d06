package segment

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/seedqueue/sq/ring"
)

// dsyncCounting counts the .log files' Syncs and dsync writes of a backend
// that has WriteAtDsync.
type dsyncCounting struct {
	ring.Backend
	mu            sync.Mutex
	syncs, dsyncs int
}

func (c *dsyncCounting) Sync(files ...ring.File) error {
	c.mu.Lock()
	for _, f := range files {
		if strings.HasSuffix(f.Name(), ".log") {
			c.syncs++
		}
	}
	c.mu.Unlock()
	return c.Backend.Sync(files...)
}

func (c *dsyncCounting) WriteAtDsync(f ring.File, bufs [][]byte, off int64) (int64, error) {
	c.mu.Lock()
	c.dsyncs++
	c.mu.Unlock()
	return c.Backend.(ring.DsyncWriter).WriteAtDsync(f, bufs, off)
}

// plainCounting is dsyncCounting without WriteAtDsync.
type plainCounting struct{ *dsyncCounting }

func (p plainCounting) WriteAtDsync() {} // hides the embedded method: not a DsyncWriter

// TestDsyncWrites checks Options.DsyncWrites on each backend: appends are
// dsync writes, Sync then fdatasyncs no .log file (but a roll still syncs
// the sealed segment), everything reads back after a reopen; and on a
// backend without dsync writes the option changes nothing.
func TestDsyncWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		for _, dsync := range []bool{true, false} {
			t.Run(fmt.Sprintf("backend_has_dsync=%v", dsync), func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "p")
				c := &dsyncCounting{Backend: be}
				var use ring.Backend = c
				if !dsync {
					use = plainCounting{c}
				}
				opts := Options{SegmentBytes: 4096, DsyncWrites: true}
				l := openLogOn(t, dir, use, opts)
				const appends = 20
				rolls := 0
				for range appends {
					info, err := l.Append([][]byte{makeBatch(t, l.NextOffset(), 3, 100)})
					if err != nil {
						t.Fatal(err)
					}
					if info.Rolled {
						rolls++
					}
					if err := l.Sync(); err != nil {
						t.Fatal(err)
					}
				}
				if rolls == 0 {
					t.Fatal("no roll: the test wants one")
				}
				c.mu.Lock()
				syncs, dsyncs := c.syncs, c.dsyncs
				c.mu.Unlock()
				if dsync && (dsyncs != appends || syncs != rolls) {
					t.Fatalf("dsync writes %d, .log syncs %d; want %d and %d (the rolls)", dsyncs, syncs, appends, rolls)
				}
				if !dsync && (dsyncs != 0 || syncs != appends+rolls) {
					t.Fatalf("without WriteAtDsync: dsync writes %d, .log syncs %d; want 0 and %d (one per Sync and roll)", dsyncs, syncs, appends+rolls)
				}
				next := l.NextOffset()
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				l = openLogOn(t, dir, use, opts)
				defer l.Close()
				if start, end := readable(t, l); start != 0 || end != next {
					t.Fatalf("after reopen readable [%d, %d), want [0, %d)", start, end, next)
				}
			})
		}
	})
}

// TestCrashSeedsDsync is TestCrashSeeds with Options.DsyncWrites: Sync
// fdatasyncs nothing, so what survives the crash is what the dsync writes
// made durable (faultfs takes a durable image at each one), and a failed
// dsync write (an injected EIO or ENOSPC) fails the Log.
func TestCrashSeedsDsync(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		for _, seed := range seedsToRun(t, crashSeedCount/5) {
			opts := smallOptions()
			opts.DsyncWrites = true
			if !t.Run(fmt.Sprint(seed), func(t *testing.T) { crashOnceWith(t, be, seed, opts) }) {
				t.Logf("seed %d failed; rerun it with SQ_CRASH_SEED=%d go test -run TestCrashSeedsDsync ./segment", seed, seed)
			}
		}
	})
}
