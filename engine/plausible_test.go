package engine

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seedqueue/sq/segment"
)

const week = 7 * 24 * time.Hour

// timeIndexOf returns the .timeindex path of the segment at base of
// partition 0 of topic.
func timeIndexOf(dir, topic string, base uint64) string {
	return filepath.Join(dir, "topics", topic, "0", fmt.Sprintf("%020d.timeindex", base))
}

// segmentsOf returns the segments of partition 0 of topic.
func segmentsOf(t *testing.T, e *Engine, topic string) []segment.SegmentInfo {
	t.Helper()
	tp, err := e.topic(topic)
	if err != nil {
		t.Fatal(err)
	}
	return tp.parts()[0].log.Segments()
}

// TestTimeIndexDamageKeepsRecords: a sealed segment's .timeindex replaced
// while stopped (12 zero bytes, a time 10 years ahead, garbage) is rebuilt
// at start. Retention of 7 days keeps the segment's records, a lookup by
// time never answers later than the exact offset (--from-time never starts
// late), and once the records really are older than 7 days retention
// deletes them (the rebuilt times do not pin them either).
func TestTimeIndexDamageKeepsRecords(t *testing.T) {
	damages := map[string]func(b []byte) []byte{
		"12 zero bytes": func([]byte) []byte { return make([]byte, 12) },
		"10 years ahead": func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b, uint64(time.UnixMilli(1_700_000_000_000).AddDate(10, 0, 0).UnixMilli()))
			return b
		},
		"garbage": func(b []byte) []byte {
			for i := range b {
				b[i] = byte(i*7 + 3)
			}
			return b
		},
		// Positive and in order, but before the topic existed.
		"1 ms": func([]byte) []byte {
			return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint64(nil, 1), 0)
		},
		"a year back": func(b []byte) []byte {
			for i := 0; i+12 <= len(b); i += 12 {
				ts := int64(binary.LittleEndian.Uint64(b[i:]))
				binary.LittleEndian.PutUint64(b[i:], uint64(ts-365*24*time.Hour.Milliseconds()))
			}
			return b
		},
	}
	for name, damage := range damages {
		for _, which := range []string{"first", "second", "every sealed"} {
			t.Run(name+"/"+which, func(t *testing.T) { testTimeIndexDamageKeepsRecords(t, damage, which) })
		}
	}
}

func testTimeIndexDamageKeepsRecords(t *testing.T, damage func([]byte) []byte, which string) {
	clk := newRetClock()
	dir := t.TempDir()
	opts := retentionOptions(dir, clk)
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTopic("ti", 1, TopicConfig{RetentionMs: week.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	t0 := clk.Now().UnixMilli()
	var bases []uint64
	for range 30 {
		bases = append(bases, appendN(t, e, "ti", 1, 20)...)
		clk.Advance(time.Second)
	}
	segs := segmentsOf(t, e, "ti")
	if len(segs) < 3 {
		t.Fatalf("%d segments; the test wants several", len(segs))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	damaged := map[string][]segment.SegmentInfo{"first": segs[:1], "second": segs[1:2], "every sealed": segs[:len(segs)-1]}[which]
	for _, sg := range damaged {
		path := timeIndexOf(dir, "ti", sg.BaseOffset)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, damage(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Minute)
	e = openTest(t, opts)
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if p := partInfo(t, e, "ti"); p.LogStartOffset != 0 {
		t.Fatalf("retention of 7 days moved the log start to %d within a minute", p.LogStartOffset)
	}
	if n := readRange(t, e, "ti", 0); n != 600 {
		t.Fatalf("read %d records, want 600", n)
	}
	for i, base := range bases {
		ts := t0 + int64(i)*1000
		off, at, err := e.ListOffsets("ti", 0, ts)
		if err != nil || off > base || at < ts {
			t.Fatalf("ListOffsets(%d) = %d, %d, %v; exact answer %d", ts, off, at, err, base)
		}
	}
	// The rebuilt times are not in the future either: a week
	// later every sealed segment goes.
	clk.Advance(week + time.Hour)
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if p := partInfo(t, e, "ti"); p.LogStartOffset < segs[len(segs)-1].BaseOffset {
		t.Fatalf("a week later the log starts at %d; want at least %d", p.LogStartOffset, segs[len(segs)-1].BaseOffset)
	}
}
