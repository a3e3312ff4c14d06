package segment

import (
	"errors"
	"sync"
	"testing"

	"github.com/seedqueue/sq/ring"
)

// TestConcurrentReads runs readers against a log that is appending and
// rolling; run with -race. Every read must see whole, intact, contiguous
// batches below the limit it passed.
func TestConcurrentReads(t *testing.T) { forEachBackend(t, testConcurrentReads) }

func testConcurrentReads(t *testing.T, be ring.Backend) {
	l := openLogOn(t, t.TempDir(), be, smallOptions())
	defer l.Close()
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			var off uint64
			for {
				select {
				case <-done:
					return
				default:
				}
				hw := l.NextOffset()
				v, err := l.Read(off, 300*(r+1), hw)
				if err != nil {
					errs <- err
					return
				}
				hs, err := walkBufs(v.Bufs)
				if err != nil {
					errs <- err
					v.Release()
					return
				}
				for i, h := range hs {
					if h.BaseOffset >= hw || (i == 0 && (h.BaseOffset > off || h.NextOffset() <= off)) {
						t.Errorf("read at %d limit %d got batch [%d, %d)", off, hw, h.BaseOffset, h.NextOffset())
					}
				}
				off = v.NextOffset
				v.Release()
				if off >= 400 {
					off = uint64(r) // read the log again from (almost) the start
				}
			}
		}(r)
	}
	for i := 0; i < 200; i++ {
		appendBatches(t, l, 1, 1+i%3, 2, 30)
		if i%10 == 0 {
			if err := l.Sync(); err != nil {
				t.Error(err)
			}
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if l.SegmentCount() < 10 {
		t.Fatalf("only %d segments: the test did not roll much", l.SegmentCount())
	}
	readable(t, l)
}

// TestConcurrentSyncAndRetention runs Sync, Checkpoint and
// DeleteSegmentsBefore from their own goroutines while one goroutine
// appends and others read; run with -race.
func TestConcurrentSyncAndRetention(t *testing.T) {
	l := openLog(t, t.TempDir(), smallOptions())
	defer l.Close()
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	loop := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := f(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	loop(l.Sync)
	loop(l.Checkpoint)
	// retained is closed by the retention goroutine after its first
	// deletion; the appender waits for it halfway, so retention runs
	// concurrently with appends and reads however the goroutines are
	// scheduled.
	retained := make(chan struct{})
	var retainedOnce sync.Once
	var retainErr error // written once, before retained is closed
	loop(func() error {
		if next := l.NextOffset(); next > 100 {
			n, err := l.DeleteSegmentsBefore(next - 100)
			if n > 0 || err != nil {
				retainedOnce.Do(func() {
					retainErr = err
					close(retained)
				})
			}
			return err
		}
		return nil
	})
	for r := 0; r < 3; r++ {
		var off uint64
		loop(func() error {
			v, err := l.Read(off, 500, l.NextOffset())
			if errors.Is(err, ErrOffsetOutOfRange) {
				off = l.LogStartOffset()
				return nil
			}
			if err != nil {
				return err
			}
			defer v.Release()
			if _, err := walkBufs(v.Bufs); err != nil {
				return err
			}
			off = v.NextOffset
			return nil
		})
	}
	for i := 0; i < 300; i++ {
		appendBatches(t, l, 1, 1+i%2, 2, 30)
		if i == 150 {
			<-retained
			if retainErr != nil {
				t.Error(retainErr)
			}
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if l.LogStartOffset() == 0 {
		t.Fatal("retention never ran")
	}
	readable(t, l)
}
