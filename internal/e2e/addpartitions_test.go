package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// storedRecords reads every stored record of topic through sq consume
// -f json, by partition in offset order.
func storedRecords(t *testing.T, addr, topic string) map[uint32][]consumedRecord {
	t.Helper()
	return parseConsumed(t, sqOK(t, addr, nil, "consume", "-t", topic, "-f", "json"))
}

// describedPartitions returns the partition count and the number of
// per-partition entries of sq topic describe -f json.
func describedPartitions(t *testing.T, addr, topic string) (count, entries int) {
	t.Helper()
	var d struct {
		PartitionCount int               `json:"partition_count"`
		Partitions     []json.RawMessage `json:"partitions"`
	}
	out := sqOK(t, addr, nil, "topic", "describe", topic, "-f", "json")
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("describe: %v\n%s", err, out)
	}
	return d.PartitionCount, len(d.Partitions)
}

// TestAddPartitionsThroughTheBinaries grows a topic from 2 to 4 partitions
// with sq topic alter --partitions on a real sq-server: keyed records
// produced by a new client afterwards reach all 4 partitions, the records
// stored before are untouched at their offsets, a shrink or a repeat is
// refused, and a restart keeps the 4 partitions and every record.
func TestAddPartitionsThroughTheBinaries(t *testing.T) {
	t.Parallel()
	addr, flags := fixedAddrs(t)
	control := flags[3] // --grpc-host ADDR
	srv := startServer(t, t.TempDir(), flags...)
	sqOK(t, addr, nil, "topic", "create", "grow", "--partitions", "2")
	var old strings.Builder
	for i := range 40 {
		fmt.Fprintf(&old, "k%d:old%d\n", i, i)
	}
	sqOK(t, addr, []byte(old.String()), "produce", "-t", "grow", "--key-separator", ":")
	before := storedRecords(t, addr, "grow")
	if len(before) != 2 || len(before[0])+len(before[1]) != 40 {
		t.Fatalf("consumed %v before growing, want 40 records over partitions 0 and 1", before)
	}

	out := sqOK(t, addr, nil, "--control", control, "topic", "alter", "grow", "--partitions", "4")
	if !strings.Contains(out, "topic grow now has 4 partitions") {
		t.Fatalf("sq topic alter --partitions 4 printed:\n%s", out)
	}
	for _, tc := range []struct{ n, want string }{
		{"4", "has 4 partitions; the new total 4 must be larger"},
		{"3", "the new total 3 must be larger (partitions can be added, not removed)"},
		{"10001", "above the maximum 10000"},
	} {
		if e := sqFails(t, addr, nil, "--control", control, "topic", "alter", "grow", "--partitions", tc.n); !strings.Contains(e, tc.want) {
			t.Errorf("sq topic alter --partitions %s: %s, want %q", tc.n, e, tc.want)
		}
	}
	if e := sqFails(t, addr, nil, "--control", control, "topic", "alter", "nope", "--partitions", "3"); !strings.Contains(e, "UNKNOWN_TOPIC") {
		t.Errorf("growing an unknown topic: %s", e)
	}

	var fresh strings.Builder
	for i := range 64 {
		fmt.Fprintf(&fresh, "key-%d:new%d\n", i, i)
	}
	sqOK(t, addr, []byte(fresh.String()), "produce", "-t", "grow", "--key-separator", ":")
	check := func(when string) {
		t.Helper()
		if n, entries := describedPartitions(t, addr, "grow"); n != 4 || entries != 4 {
			t.Fatalf("%s: described %d partitions with %d entries, want 4", when, n, entries)
		}
		after := storedRecords(t, addr, "grow")
		newPer := map[uint32]int{}
		for part, recs := range after {
			old := before[part]
			if len(recs) < len(old) {
				t.Fatalf("%s: partition %d holds %d records, fewer than the %d stored before growing", when, part, len(recs), len(old))
			}
			for i, r := range recs {
				switch {
				case i < len(old) && (r.Offset != old[i].Offset || r.value(t) != old[i].value(t) || *r.Key != *old[i].Key):
					t.Fatalf("%s: partition %d record %d is %+v, was %+v before growing", when, part, i, r, old[i])
				case i >= len(old) && !strings.HasPrefix(r.value(t), "new"):
					t.Fatalf("%s: partition %d record %d is %q, want a record produced after growing", when, part, i, r.value(t))
				case i >= len(old):
					newPer[part]++
				}
			}
		}
		total := 0
		for _, n := range newPer {
			total += n
		}
		if len(newPer) != 4 || total != 64 {
			t.Fatalf("%s: keyed records produced after growing per partition %v, want all of 0..3 and 64 in all", when, newPer)
		}
	}
	check("after growing")
	srv.restart(t)
	check("after a restart")
}
