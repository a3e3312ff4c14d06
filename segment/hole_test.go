package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/internal/faultfs"
)

// holeFixture is a log of five one-record batches, each synced after its
// append as under sync policy every-batch, that then crashed. With
// checkpointed, the recovery point was written after the first batch;
// otherwise only the one written at creation (offset 0) exists.
type holeFixture struct {
	dir   string
	infos []AppendInfo
}

func buildHoleFixture(t *testing.T, checkpointed bool) *holeFixture {
	t.Helper()
	f := &holeFixture{dir: t.TempDir()}
	l := openLog(t, f.dir, smallOptions())
	for i := range 5 {
		info, err := l.Append([][]byte{makeBatch(t, uint64(i), 1, 50)})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		if i == 0 && checkpointed {
			if err := l.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
		f.infos = append(f.infos, info)
	}
	if f.infos[4].Segment != 0 {
		t.Fatal("the fixture wants one segment")
	}
	abandon(t, l)
	return f
}

func (f *holeFixture) log() string { return logPath(f.dir, 0) }

// holeDamage damages the batch with index k (k = 1: offset 1) of a
// holeFixture.
type holeDamage struct {
	name   string
	damage func(t *testing.T, f *holeFixture, k int)
	// detected: recovery sees the batch as bad (false only for the fields
	// the batch format leaves unchecked: leaderEpoch).
	detected bool
}

func zeroRange(t *testing.T, path string, from, to int64) {
	t.Helper()
	patch(t, path, from, make([]byte, to-from))
}

func putU32(t *testing.T, path string, pos int64, v uint32) {
	t.Helper()
	patch(t, path, pos, binary.LittleEndian.AppendUint32(nil, v))
}

func holeDamages() []holeDamage {
	at := func(f *holeFixture, k int) (int64, int64) { return f.infos[k].Position, f.infos[k].Bytes }
	flip := func(field int64) func(*testing.T, *holeFixture, int) {
		return func(t *testing.T, f *holeFixture, k int) {
			p, _ := at(f, k)
			flipBit(t, f.log(), p+field)
		}
	}
	length := func(v func(size int64) uint32) func(*testing.T, *holeFixture, int) {
		return func(t *testing.T, f *holeFixture, k int) {
			p, n := at(f, k)
			putU32(t, f.log(), p+8, v(n))
		}
	}
	ds := []holeDamage{
		{"zero magic", func(t *testing.T, f *holeFixture, k int) {
			p, _ := at(f, k)
			patch(t, f.log(), p+16, []byte{0})
		}, true},
		{"magic 2", func(t *testing.T, f *holeFixture, k int) {
			p, _ := at(f, k)
			patch(t, f.log(), p+16, []byte{2})
		}, true},
		{"bad CRC: bit flip in a record", func(t *testing.T, f *holeFixture, k int) {
			p, n := at(f, k)
			flipBit(t, f.log(), p+n-7)
		}, true},
		{"bad CRC: crc field zeroed", func(t *testing.T, f *holeFixture, k int) {
			p, _ := at(f, k)
			putU32(t, f.log(), p+17, 0)
		}, true},
		{"garbage length 0xFFFFFFFF", length(func(int64) uint32 { return 0xFFFFFFFF }), true},
		{"garbage length below the header", length(func(int64) uint32 { return 10 }), true},
		{"garbage length 0", length(func(int64) uint32 { return 0 }), true},
		{"garbage length one byte long", length(func(n int64) uint32 { return uint32(n - 12 + 1) }), true},
		{"garbage length one byte short", length(func(n int64) uint32 { return uint32(n - 12 - 1) }), true},
		{"garbage length past the file", length(func(int64) uint32 { return 1 << 20 }), true},
		{"bit flip in baseOffset", flip(0), true},
		{"bit flip in batchLength", flip(8), true},
		{"bit flip in magic", flip(16), true},
		{"bit flip in crc", flip(18), true},
		{"bit flip in attributes", flip(21), true},
		{"bit flip in lastOffsetDelta", flip(23), true},
		{"bit flip in firstTimestamp", flip(28), true},
		{"bit flip in maxTimestamp", flip(36), true},
		{"bit flip in producerId", flip(44), true},
		{"bit flip in baseSequence", flip(54), true},
		{"bit flip in recordCount", flip(57), true},
		{"bit flip in reserved", flip(62), true},
		// leaderEpoch is outside the CRC so that a leader can stamp it;
		// nothing can see a flip there, and nothing depends on it yet.
		{"bit flip in leaderEpoch (unchecked)", flip(12), false},
		{"zeroed bytes in the middle", func(t *testing.T, f *holeFixture, k int) {
			p, n := at(f, k)
			zeroRange(t, f.log(), p+30, p+n-10)
		}, true},
		{"zeroed records", func(t *testing.T, f *holeFixture, k int) {
			p, n := at(f, k)
			zeroRange(t, f.log(), p+64, p+n)
		}, true},
		{"zeroed header", func(t *testing.T, f *holeFixture, k int) {
			p, _ := at(f, k)
			zeroRange(t, f.log(), p, p+64)
		}, true},
		{"whole batch zeroed", func(t *testing.T, f *holeFixture, k int) {
			p, n := at(f, k)
			zeroRange(t, f.log(), p, p+n)
		}, true},
		{"zeroed from the middle of this batch into the next", func(t *testing.T, f *holeFixture, k int) {
			p, n := at(f, k)
			end := p + n
			if k+1 < len(f.infos) {
				end = f.infos[k+1].Position + 20
			}
			zeroRange(t, f.log(), p+40, end)
		}, true},
	}
	return ds
}

// TestRecoverHolePerSyncPolicy: in the last segment above the recovery
// point, a bad batch followed by a valid batch that continues the offsets
// is corruption under every-batch (reported with the file and position,
// nothing cut), and a hole cut off with an ERROR naming the offsets dropped
// under interval and none. The same damage to the last batch, with nothing
// valid after it, is a torn write under every policy.
func TestRecoverHolePerSyncPolicy(t *testing.T) {
	for _, checkpointed := range []bool{false, true} {
		for _, d := range holeDamages() {
			if checkpointed && !strings.HasPrefix(d.name, "zero") {
				continue // the recovery point changes where the scan starts, not the rule
			}
			for _, dur := range []Durability{DurableEveryBatch, DurableInterval, DurableNone} {
				for _, k := range []int{0, 1, 4} { // the first batch, the second, or the last
					if k == 0 && checkpointed {
						continue // below the recovery point: corruption under every policy
					}
					name := fmt.Sprintf("rp_after_first=%v/%s/%s/batch%d", checkpointed, d.name, dur, k)
					t.Run(name, func(t *testing.T) {
						t.Parallel() // each case has its own directory; the time goes to fsync
						testRecoverHole(t, checkpointed, d, dur, k)
					})
				}
			}
		}
	}
}

func testRecoverHole(t *testing.T, checkpointed bool, d holeDamage, dur Durability, k int) {
	f := buildHoleFixture(t, checkpointed)
	d.damage(t, f, k)
	before, err := os.ReadFile(f.log())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	opts := smallOptions()
	opts.Durability = dur
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	l, err := Open(f.dir, osFS(), newTestBackend(t, "portable"), opts)
	hole := d.detected && k < len(f.infos)-1
	if hole && dur == DurableEveryBatch {
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.File != f.log() || ce.Position != f.infos[k].Position {
			t.Fatalf("Open = %v; want a *CorruptError at %s byte %d", err, f.log(), f.infos[k].Position)
		}
		after, rerr := os.ReadFile(f.log())
		if rerr != nil {
			t.Fatal(rerr)
		}
		if !bytes.Equal(before, after) {
			t.Fatalf("the damaged file changed: %d bytes, was %d", len(after), len(before))
		}
		return
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer l.Close()
	want := uint64(len(f.infos)) // offsets readable after restart: [0, want)
	if d.detected {
		want = uint64(k)
	}
	if start, end := readable(t, l); start != 0 || end != want {
		t.Fatalf("readable [%d, %d), want [0, %d)", start, end, want)
	}
	if hole {
		line := fmt.Sprintf("from_offset=%d to_offset=%d", k, len(f.infos))
		if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), line) {
			t.Fatalf("no ERROR naming the offsets dropped (%s) in:\n%s", line, logs.String())
		}
	} else if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("ERROR logged for a torn tail:\n%s", logs.String())
	}
	// Appends continue at the recovered end and survive a reopen.
	if _, err := l.Append([][]byte{makeBatch(t, want, 1, 50)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(f.dir, osFS(), newTestBackend(t, "portable"), opts)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer l2.Close()
	if _, end := readable(t, l2); end != want+1 {
		t.Fatalf("after one more record and a reopen: end %d, want %d", end, want+1)
	}
}

// TestRecoverReadErrorCutsNothing: a read of the last segment that fails
// (EIO) during the scan above the recovery point, at the first read, in
// the middle, or while looking for a valid batch after a bad one, fails
// Open under every policy and cuts nothing: bytes recovery could not see
// are neither a torn write nor corruption. With the disk healthy again,
// every record is back.
func TestRecoverReadErrorCutsNothing(t *testing.T) {
	for _, checkpointed := range []bool{false, true} {
		for _, after := range []int{0, 3, 5} {
			for _, dur := range []Durability{DurableEveryBatch, DurableNone} {
				name := fmt.Sprintf("rp_after_first=%v/reads_before_the_error=%d/%s", checkpointed, after, dur)
				t.Run(name, func(t *testing.T) { testRecoverReadError(t, checkpointed, after, dur) })
			}
		}
	}
}

func testRecoverReadError(t *testing.T, checkpointed bool, after int, dur Durability) {
	f := buildHoleFixture(t, checkpointed)
	if after == 5 {
		// The third batch is bad: the search after it reads.
		patch(t, f.log(), f.infos[2].Position+16, []byte{0})
	}
	size := fileSize(t, f.log())
	fs := faultfs.New(f.dir, nil)
	fs.Inject(faultfs.Rule{Ops: faultfs.OpRead, Path: "*.log", After: after, Err: syscall.EIO})
	opts := smallOptions()
	opts.Durability = dur
	l, err := Open(f.dir, fs, fs.Backend(), opts)
	if err == nil {
		l.Close()
		t.Fatal("Open succeeded with every read of the log failing")
	}
	if !errors.Is(err, syscall.EIO) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v; want the EIO, not corruption", err)
	}
	if got := fileSize(t, f.log()); got != size {
		t.Fatalf("log is %d bytes after the failed Open, was %d", got, size)
	}
	opts.Durability = DurableNone
	l = openLog(t, f.dir, opts)
	defer l.Close()
	want := uint64(5)
	if after == 5 {
		want = 2
	}
	if start, end := readable(t, l); start != 0 || end != want {
		t.Fatalf("readable [%d, %d), want [0, %d)", start, end, want)
	}
}
