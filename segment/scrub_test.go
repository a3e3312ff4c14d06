package segment

import (
	"context"
	"errors"
	"os"
	"testing"
)

// TestVerifySealed: a bit flipped in the middle of a sealed segment is not
// found by Open (it only spot-checks) but by VerifySealed, which names the
// file and the batch's position and truncates nothing.
func TestVerifySealed(t *testing.T) {
	dir := t.TempDir()
	opts := smallOptions()
	l := openLog(t, dir, opts)
	appendBatches(t, l, 40, 1, 2, 60)
	if err := l.VerifySealed(context.Background(), nil); err != nil {
		t.Fatalf("VerifySealed of an intact log: %v", err)
	}
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := logPath(dir, segs[0].BaseOffset)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flip := int64(len(data) / 2)
	data[flip] ^= 0x10
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, opts)
	defer l.Close()
	err = l.VerifySealed(context.Background(), nil)
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("VerifySealed = %v, want a *CorruptError", err)
	}
	if ce.File != path || ce.Position > flip || ce.Position+int64(opts.MaxBatchBytes) < flip {
		t.Fatalf("CorruptError names %s at %d; the flip is in %s at %d", ce.File, ce.Position, path, flip)
	}
	if got := fileSize(t, path); got != int64(len(data)) {
		t.Fatalf("file size %d after the scrub, want %d (not truncated)", got, len(data))
	}
	stop := errors.New("stop")
	if err := l.VerifySealed(context.Background(), func(int) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("VerifySealed with a failing pace = %v", err)
	}
}

// TestVerifyActiveBelowRecoveryPoint flips a bit early in the active
// segment after a clean stop: Open's spot check does not reach it, the
// scrub of the synced part of the active segment does.
func TestVerifyActiveBelowRecoveryPoint(t *testing.T) {
	dir := t.TempDir()
	opts := smallOptions()
	opts.SegmentBytes = 1 << 20 // one segment holds everything
	l := openLog(t, dir, opts)
	appendBatches(t, l, 200, 1, 2, 60)
	if l.SegmentCount() != 1 {
		t.Fatalf("%d segments, want 1", l.SegmentCount())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := logPath(dir, 0)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flip := int64(len(data) / 10)
	data[flip] ^= 0x10
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, opts)
	defer l.Close()
	err = l.VerifySealed(context.Background(), nil)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != path || ce.Position > flip {
		t.Fatalf("VerifySealed = %v, want a *CorruptError in %s at or before %d", err, path, flip)
	}
	if got := fileSize(t, path); got < int64(len(data)) {
		t.Fatalf("file size %d after the scrub, want at least %d (not truncated)", got, len(data))
	}
}
