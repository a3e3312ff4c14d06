package jepsen

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func ok(client int, p uint32, v string, call, ret int64, off uint64) Produce {
	return Produce{Client: client, Partition: p, Value: v, Call: call, Return: ret, Status: StatusOK, Offset: off}
}

func info(client int, p uint32, v string, call int64) Produce {
	return Produce{Client: client, Partition: p, Value: v, Call: call, Return: call + 5, Status: StatusInfo, Err: "timeout"}
}

func failed(client int, p uint32, v string, call int64) Produce {
	return Produce{Client: client, Partition: p, Value: v, Call: call, Return: call + 1, Status: StatusFail, Err: "NOT_ENOUGH_REPLICAS"}
}

func rd(cons, session int, p uint32, off uint64, v string, call, ret int64) Read {
	return Read{Consumer: cons, Session: session, Partition: p, Offset: off, Value: v, Call: call, Return: ret}
}

func final(call int64, vs ...string) FinalRead {
	return FinalRead{Call: call, Return: call + 10, Values: vs}
}

// base is a history every check passes: two producers on two partitions,
// a consumer, high watermarks from two observers and three replicas.
func base() History {
	return History{
		Produces: []Produce{
			ok(1, 0, "a", 0, 10, 0),
			ok(2, 0, "b", 5, 12, 1), // concurrent with "a"
			ok(1, 0, "c", 20, 30, 2),
			ok(2, 1, "x", 0, 8, 0),
			info(1, 1, "y", 40),   // took effect
			info(2, 1, "z", 50),   // never did: pending
			failed(1, 0, "f", 60), // refused
		},
		Reads: []Read{
			rd(1, 1, 0, 0, "a", 0, 15),
			rd(1, 1, 0, 1, "b", 0, 16),
			rd(1, 1, 1, 0, "x", 0, 9),
			rd(1, 1, 0, 2, "c", 0, 31),
			rd(1, 1, 1, 1, "y", 0, 60),
			// A new assignment of partition 0 starts again at the commit.
			rd(1, 2, 0, 1, "b", 70, 75),
			rd(1, 2, 0, 2, "c", 70, 76),
		},
		HWs: []HWObservation{
			{Observer: "node-1#1", Partition: 0, HW: 1, At: 11},
			{Observer: "node-1#1", Partition: 0, HW: 3, At: 31},
			{Observer: "node-2#1", Partition: 0, HW: 2, At: 31}, // another observer lags
			{Observer: "node-1#1", Partition: 1, HW: 2, At: 61},
		},
		Final: map[uint32]FinalRead{0: final(100, "a", "b", "c"), 1: final(100, "x", "y")},
		Replicas: []ReplicaLog{
			{Node: "node-1", Partition: 0, Values: []string{"a", "b", "c"},
				Batches: []RawBatch{{Base: 0, Next: 2, Bytes: []byte("ab")}, {Base: 2, Next: 3, Bytes: []byte("c")}}},
			{Node: "node-2", Partition: 0, Values: []string{"a", "b", "c", "uncommitted"},
				Batches: []RawBatch{{Base: 0, Next: 2, Bytes: []byte("ab")}, {Base: 2, Next: 3, Bytes: []byte("c")}, {Base: 3, Next: 4, Bytes: []byte("u")}}},
			{Node: "node-3", Partition: 1, Start: 1, Values: []string{"y"}},
		},
	}
}

func TestCheckPasses(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    func() History
	}{
		{"empty", func() History { return History{} }},
		{"base", base},
		{"next round", func() History {
			// The round after base: its final logs are the start, "z"
			// is still pending and shows up now, the consumer's session
			// and the observers go on.
			return History{
				Init:     map[uint32][]string{0: {"a", "b", "c"}, 1: {"x", "y"}},
				Pending:  []Produce{info(2, 1, "z", 50)},
				Produces: []Produce{ok(1, 0, "d", 200, 210, 3)},
				Reads:    []Read{rd(1, 2, 0, 3, "d", 200, 215), rd(1, 1, 1, 2, "z", 200, 220)},
				HWs:      []HWObservation{{Observer: "node-1#1", Partition: 0, HW: 4, At: 211}},
				Final:    map[uint32]FinalRead{0: final(300, "a", "b", "c", "d"), 1: final(300, "x", "y", "z")},
				Resume:   map[SessionKey]uint64{{1, 2, 0}: 3, {1, 1, 1}: 2},
				LastHW:   map[ObserverKey]uint64{{"node-1#1", 0}: 3},
			}
		}},
		{"a duplicate of the initial log is not reported again", func() History {
			return History{
				Init:  map[uint32][]string{0: {"a", "a"}},
				Final: map[uint32]FinalRead{0: final(10, "a", "a")},
			}
		}},
		{"appends linearized in offset order though invoked otherwise", func() History {
			return History{
				Produces: []Produce{ok(1, 0, "late", 0, 50, 1), ok(2, 0, "early", 10, 20, 0)},
				Final:    map[uint32]FinalRead{0: final(60, "early", "late")},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(tc.h(), Options{Timeout: 10 * time.Second})
			if !res.OK() {
				t.Fatal(res)
			}
			for p, l := range res.Linearizability {
				if l != porcupine.Ok {
					t.Errorf("partition %d: porcupine says %s", p, l)
				}
			}
		})
	}
}

func TestCheckCarriesState(t *testing.T) {
	res := Check(base(), Options{})
	if !res.OK() {
		t.Fatal(res)
	}
	if len(res.Pending) != 1 || res.Pending[0].Value != "z" {
		t.Errorf("Pending %v, want the produce of z", res.Pending)
	}
	if got := res.Resume[SessionKey{1, 2, 0}]; got != 3 {
		t.Errorf("Resume of consumer 1 session 2 partition 0: %d, want 3", got)
	}
	if got := res.LastHW[ObserverKey{"node-1#1", 0}]; got != 3 {
		t.Errorf("LastHW of node-1#1 partition 0: %d, want 3", got)
	}
}

// TestCheckFails: each history breaks one property; Check must report it
// with the named check (and maybe others) and name the operation at fault.
func TestCheckFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(h *History)
		checks []string // every check that must be reported
		names  string   // a text the report must contain
	}{
		{"acknowledged record lost", func(h *History) {
			h.Final[0] = final(100, "a", "b")
			h.Reads = slices.DeleteFunc(h.Reads, func(r Read) bool { return r.Value == "c" })
			h.HWs = h.HWs[:1]
		}, []string{CheckLost, CheckLinearizability}, `produce "c" to partition 0`},
		{"acknowledged offset overwritten", func(h *History) {
			h.Produces = append(h.Produces, info(3, 0, "w", 25))
			h.Final[0] = final(100, "a", "b", "w")
			h.Reads = h.Reads[:3]
			h.Replicas = nil
		}, []string{CheckLost, CheckLinearizability}, `which holds "w" at the end`},
		{"duplicate", func(h *History) {
			h.Final[1] = final(100, "x", "y", "y")
		}, []string{CheckDuplicate}, `"y" is in the final logs 2 times`},
		{"duplicate of a value of the initial log", func(h *History) {
			h.Init = map[uint32][]string{1: {"x"}}
			h.Produces = append(h.Produces, info(3, 1, "x", 70))
			h.Final[1] = final(100, "x", "y", "x")
		}, []string{CheckDuplicate}, `"x" is in the final logs 2 times: partition 1 offset 0, partition 1 offset 2`},
		{"failed produce present", func(h *History) {
			h.Final[0] = final(100, "a", "b", "c", "f")
		}, []string{CheckFailedPresent}, `produce "f"`},
		{"phantom", func(h *History) {
			h.Final[0] = final(100, "a", "b", "c", "ghost")
		}, []string{CheckPhantom, CheckLinearizability}, `"ghost", which no produce sent`},
		{"initial log not kept", func(h *History) {
			h.Init = map[uint32][]string{1: {"old", "x"}}
		}, []string{CheckPrefix, CheckLinearizability}, `"old" at the start`},
		{"replica lacks committed records", func(h *History) {
			h.Replicas[0].Values = []string{"a"}
			h.Replicas[0].Batches = nil
		}, []string{CheckReplica}, "replica node-1 of partition 0 lacks offsets 1..2"},
		{"empty replica", func(h *History) {
			// Only the missing offsets are reported, not each batch again.
			h.Replicas[0].Values, h.Replicas[0].Batches = nil, []RawBatch{}
			h.Reads, h.HWs = nil, nil
		}, []string{CheckReplica}, "replica node-1 of partition 0 lacks offsets 0..2"},
		{"replica diverges", func(h *History) {
			h.Replicas[1].Values = []string{"a", "B", "c"}
		}, []string{CheckReplica}, `offset 1: replica "B", final log "b"`},
		{"replica batches differ", func(h *History) {
			h.Replicas[0].Batches = []RawBatch{{Base: 0, Next: 2, Bytes: []byte("ab-epoch1")}, {Base: 2, Next: 3, Bytes: []byte("c")}}
			h.Replicas[1].Batches = []RawBatch{{Base: 0, Next: 2, Bytes: []byte("ab-epoch2")}, {Base: 2, Next: 3, Bytes: []byte("c")}}
		}, []string{CheckReplicaBytes}, "offsets 0..1 differs between replicas node-2 and node-1 (9 and 9 bytes, first difference at byte 8)"},
		{"replica lacks a batch", func(h *History) {
			h.Replicas[0].Batches = h.Replicas[0].Batches[:1]
		}, []string{CheckReplicaBytes}, "replica node-2 stores a batch of offsets 2..2, replica node-1 no batch starting at 2"},
		{"high watermark back", func(h *History) {
			h.HWs = append(h.HWs, HWObservation{Observer: "node-1#1", Partition: 0, HW: 2, At: 90})
		}, []string{CheckHWBack}, "move back from high watermark 3 to 2"},
		{"high watermark back across rounds", func(h *History) {
			h.LastHW = map[ObserverKey]uint64{{"node-2#1", 0}: 3}
		}, []string{CheckHWBack}, "from high watermark 3 earlier to 2"},
		{"high watermark above the log", func(h *History) {
			h.HWs = append(h.HWs, HWObservation{Observer: "node-3#2", Partition: 1, HW: 5, At: 90})
		}, []string{CheckHWAboveLog}, "exposed and then lost"},
		{"consumer gap", func(h *History) {
			h.Reads = slices.Delete(h.Reads, 1, 2) // offset 1 of partition 0 skipped
		}, []string{CheckReadGap}, "offsets 1..1 skipped"},
		{"consumer goes back within a session", func(h *History) {
			h.Reads = append(h.Reads, rd(1, 1, 0, 1, "b", 80, 85))
		}, []string{CheckReadOrder}, "read offset 1 after offset 2"},
		{"consumer resumes elsewhere", func(h *History) {
			h.Resume = map[SessionKey]uint64{{1, 1, 1}: 1}
		}, []string{CheckReadOrder}, "read offset 0 after offset 0"},
		{"divergent read", func(h *History) {
			h.Reads[2].Value = "lost-x"
		}, []string{CheckReadDivergent, CheckLinearizability}, `the final log holds "x" at offset 0`},
		{"read of a record later lost", func(h *History) {
			h.Produces = append(h.Produces, info(3, 1, "gone", 30))
			h.Reads = append(h.Reads, rd(2, 1, 1, 2, "gone", 30, 45))
		}, []string{CheckReadDivergent, CheckLinearizability}, "read beyond the final log's end 2"},
		{"read before the append was invoked", func(h *History) {
			// Only porcupine sees this: the value matches the final log.
			h.Reads = append(h.Reads, rd(2, 1, 0, 2, "c", 0, 19))
		}, []string{CheckLinearizability, CheckRealTime}, `consumer 2 session 1: read partition 0 offset 2 = "c" [0s, 19ns]`},
		{"offsets against real time", func(h *History) {
			// "a" was acknowledged at offset 1 before "b" was invoked, yet
			// "b" got offset 0.
			*h = History{
				Produces: []Produce{ok(1, 0, "a", 0, 10, 1), ok(2, 0, "b", 20, 30, 0)},
				Final:    map[uint32]FinalRead{0: final(60, "b", "a")},
			}
		}, []string{CheckLinearizability, CheckRealTime}, "cannot follow it"},
		{"unknown outcome stored before its call", func(h *History) {
			// "a" was acknowledged at offset 1 before "u" was invoked, yet
			// "u" is at offset 0.
			*h = History{
				Produces: []Produce{ok(1, 0, "a", 0, 10, 1), info(2, 0, "u", 20)},
				Final:    map[uint32]FinalRead{0: final(60, "u", "a")},
			}
		}, []string{CheckLinearizability, CheckRealTime}, `cannot follow it: producer 1: produce "a" to partition 0 [0s, 10ns] ok offset 1`},
		{"no final read", func(h *History) {
			delete(h.Final, 1)
		}, []string{CheckNoFinal, CheckLost}, "partition 1 was written or read but has no final read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := base()
			tc.edit(&h)
			prefix := t.TempDir() + "/"
			res := Check(h, Options{Timeout: 10 * time.Second, VisualizePrefix: prefix})
			if res.OK() {
				t.Fatal("every check passed")
			}
			got := map[string]bool{}
			for _, v := range res.Violations {
				got[v.Check] = true
			}
			for _, c := range tc.checks {
				if !got[c] {
					t.Errorf("no %s violation in:\n%s", c, res)
				}
			}
			if s := res.String(); !strings.Contains(s, tc.names) {
				t.Errorf("report lacks %q:\n%s", tc.names, s)
			}
			if got[CheckLinearizability] && !strings.Contains(res.String(), "porcupine's visualization: "+prefix+"partition-") {
				t.Errorf("report names no visualization under %s:\n%s", prefix, res)
			}
		})
	}
}

// largeHistory is a round of a few thousand operations per partition, as
// the Jepsen test records them: five producers with overlapping requests,
// sends whose outcome is unknown (some never stored, some stored many
// offsets after their call, some from an earlier round), and consumer
// reads whose calls are the start of their session. Every check passes.
func largeHistory() History {
	const perPartition = 3000
	h := History{Init: map[uint32][]string{}, Final: map[uint32]FinalRead{}}
	for p := range uint32(3) {
		// The previous round left a log and an unknown outcome that is
		// stored in this one.
		log := []string{fmt.Sprintf("p%d-old", p)}
		h.Init[p] = slices.Clone(log)
		pending := fmt.Sprintf("p%d-pending", p)
		h.Pending = append(h.Pending, info(9, p, pending, 0))
		late := []string{pending}
		for i := range perPartition {
			call := 100 + int64(i)*10
			if i%20 == 0 {
				// Stored later, once a batch of others is acknowledged.
				v := fmt.Sprintf("p%d-late-%d", p, i)
				h.Produces = append(h.Produces, info(7, p, v, call))
				late = append(late, v)
			}
			if i%97 == 0 {
				h.Produces = append(h.Produces, info(8, p, fmt.Sprintf("p%d-never-%d", p, i), call))
			}
			v := fmt.Sprintf("p%d-%d", p, i)
			h.Produces = append(h.Produces, ok(i%5, p, v, call, call+40, uint64(len(log))))
			log = append(log, v)
			if i%200 == 199 {
				log = append(log, late...)
				late = nil
			}
		}
		log = append(log, late...)
		end := 100 + int64(perPartition)*10 + 100
		for off := 1; off < len(log); off++ {
			// Consumer p+1 reads each record, delivered soon after its
			// acknowledgement, within a session that started at 0.
			h.Reads = append(h.Reads, rd(int(p)+1, 1, p, uint64(off), log[off], 0, min(100+int64(off)*10+60, end)))
		}
		h.Final[p] = final(end, log...)
	}
	return h
}

// TestCheckLargeHistory: a round's history of a few thousand operations
// per partition gets porcupine's verdict. (While appends of unknown
// outcome were tried at every place, the search took exponential time:
// porcupine found no verdict on this history within 30 s a partition.)
func TestCheckLargeHistory(t *testing.T) {
	h := largeHistory()
	start := time.Now()
	res := Check(h, Options{Timeout: 30 * time.Second})
	if !res.OK() {
		t.Fatal(res)
	}
	for p, l := range res.Linearizability {
		if l != porcupine.Ok {
			t.Errorf("partition %d: porcupine says %s", p, l)
		}
	}
	if len(res.Pending) != 3*31 {
		t.Errorf("%d produces pending, want the %d never stored", len(res.Pending), 3*31)
	}
	t.Logf("%d operations checked in %v", len(h.Pending)+len(h.Produces)+len(h.Reads), time.Since(start))
}

// TestCheckLargeHistoryFails: in the same history, a read returned
// before the append it read was invoked. A direct check names it at once;
// porcupine's search of a large history that is not linearizable may not
// end within its timeout, which fails the check too.
func TestCheckLargeHistoryFails(t *testing.T) {
	h := largeHistory()
	bad := rd(9, 1, 1, 1501, h.Final[1].Values[1501], 0, 0)
	for _, pr := range h.Produces {
		if pr.Value == bad.Value {
			bad.Return = pr.Call - 1
		}
	}
	h.Reads = append(h.Reads, bad)
	res := Check(h, Options{Timeout: 2 * time.Second})
	if got := res.Linearizability[1]; got == porcupine.Ok {
		t.Errorf("partition 1: porcupine found a linearization")
	}
	var rt []Violation
	for _, v := range res.Violations {
		if v.Check == CheckRealTime {
			rt = append(rt, v)
		}
	}
	if len(rt) != 1 || !slices.Contains(rt[0].Ops, bad.String()) {
		t.Errorf("want one %s violation naming %s:\n%s", CheckRealTime, bad, res)
	}
}
