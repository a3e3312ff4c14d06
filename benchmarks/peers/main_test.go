package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func testRows() []row {
	load := func(b, a float64) loadWindow {
		return loadWindow{before: loadAvg{one: b, ok: true}, after: loadAvg{one: a, ok: true}}
	}
	return []row{
		{system: "SQ", mode: "sq bench produce", config: "every-batch", recordsPerSec: 1_000_000, role: roleSQ, load: load(1.5, 2.25)},
		{system: "SQ", mode: "sq bench produce", config: "none", recordsPerSec: 1_100_000},
		{system: "NATS", mode: "JetStream async", config: "always", recordsPerSec: 5_000},
		{system: "NATS", mode: "JetStream fast batch 500", config: "always", recordsPerSec: 900_000},
		{system: "NATS", mode: "JetStream async", config: "default", recordsPerSec: 200_000, role: roleJetStreamDefault},
		{system: "NATS", mode: "JetStream fast batch 500", config: "default", recordsPerSec: 250_000, role: roleJetStreamDefault},
		{system: "Redis", mode: "XADD pipeline 500", config: "always", recordsPerSec: 100_000, role: roleRedisAlways},
		{system: "Redis", mode: "XADD pipeline 500", config: "everysec", recordsPerSec: 400_000},
	}
}

func TestSummarizePicksFastestJetStreamAtDefaultDurability(t *testing.T) {
	rows := testRows()
	s := summarize(rows)
	if s.sq != &rows[0] {
		t.Errorf("sq = %+v, want the every-batch row", s.sq)
	}
	// The sync_interval always fast batch row is faster but not at the
	// default durability.
	if s.jetStream != &rows[5] {
		t.Errorf("jetStream = %+v, want the default-sync fast batch row", s.jetStream)
	}
	if s.redis != &rows[6] {
		t.Errorf("redis = %+v, want the appendfsync always row", s.redis)
	}
}

func TestSummarizeSkipsFailedRows(t *testing.T) {
	rows := testRows()
	rows[5].err = errors.New("boom")
	rows[6].recordsPerSec = 0
	s := summarize(rows)
	if s.jetStream != &rows[4] {
		t.Errorf("jetStream = %+v, want the async default-sync row", s.jetStream)
	}
	if s.redis != nil {
		t.Errorf("redis = %+v, want none (0 records/s)", s.redis)
	}
	if got := ratioLine(s.sq, s.redis, "Redis appendfsync always", p2Redis); !strings.Contains(got, "not measured") {
		t.Errorf("ratio line without Redis: %q", got)
	}
}

func TestRatioLine(t *testing.T) {
	sq := &row{recordsPerSec: 1_000_000}
	peer := &row{mode: "m", config: "c", recordsPerSec: 100_000}
	got := ratioLine(sq, peer, "peer", 9)
	want := "SQ every-batch / peer (m, c): 1000000 / 100000 records/s = 10.00x (P2 asks >= 9x: met)"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := ratioLine(sq, peer, "peer", 10.5); !strings.HasSuffix(got, "(P2 asks >= 10.5x: not met)") {
		t.Errorf("got %q, want not met", got)
	}
}

func TestPrintTable(t *testing.T) {
	rows := append(testRows(), row{system: "redis", err: errors.New("apt-get install: exit 100\nmore")})
	var b bytes.Buffer
	printTable(&b, workload{duration: 10 * time.Second, recordSize: 100}, rows)
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1+1+len(rows)+2 {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), 1+1+len(rows)+2, out)
	}
	for _, want := range []string{"100 B records", "10s per configuration", "/proc/loadavg",
		"load before", "load after", "JetStream fast batch 500", "JetStream async", "FAILED: apt-get install: exit 100"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	fields := strings.Fields(lines[2]) // SQ every-batch
	if got := fields[len(fields)-3:]; got[0] != "1.50" || got[1] != "2.25" || got[2] != "1.00x" {
		t.Errorf("SQ row ends with %q, want load 1.50 2.25 and ratio 1.00x", got)
	}
	if !strings.Contains(lines[len(lines)-2], "fastest JetStream at default durability (JetStream fast batch 500, default): 1000000 / 250000 records/s = 4.00x (P2 asks >= 10x: not met)") {
		t.Errorf("JetStream ratio line: %q", lines[len(lines)-2])
	}
	if !strings.Contains(lines[len(lines)-1], "Redis appendfsync always (XADD pipeline 500, always): 1000000 / 100000 records/s = 10.00x (P2 asks >= 9x: met)") {
		t.Errorf("Redis ratio line: %q", lines[len(lines)-1])
	}
}
