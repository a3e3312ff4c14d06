package jepsen

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// logState is a partition's log in the model: an immutable list, newest
// value first, so that an append shares its predecessor (porcupine's
// states must not be mutated) and costs O(1). h is a hash chained over
// every value in order: two states are equal when n and h are.
type logState struct {
	prev  *logState
	value string
	n     int // values in the log
	h     uint64
}

func (s *logState) length() int {
	if s == nil {
		return 0
	}
	return s.n
}

func (s *logState) hash() uint64 {
	if s == nil {
		return 0
	}
	return s.h
}

// chain extends hash h by value v (FNV-1a 64 of h's bytes and v, with v's
// length, so no two lists of values chain alike by concatenation).
func chain(h uint64, v string) uint64 {
	f := fnv.New64a()
	var b [16]byte
	for i := range 8 {
		b[i] = byte(h >> (8 * i))
		b[8+i] = byte(uint64(len(v)) >> (8 * i))
	}
	f.Write(b[:])
	f.Write([]byte(v))
	return f.Sum64()
}

func (s *logState) push(v string) *logState {
	return &logState{prev: s, value: v, n: s.length() + 1, h: chain(s.hash(), v)}
}

// at returns the value at offset off < length.
func (s *logState) at(off int) string {
	for s.n-1 > off {
		s = s.prev
	}
	return s.value
}

// hashValues is the hash of a log holding values.
func hashValues(values []string) uint64 {
	var h uint64
	for _, v := range values {
		h = chain(h, v)
	}
	return h
}

// The model's inputs and outputs.
type (
	appendIn  struct{ value string }
	appendOut struct {
		offset uint64 // the offset the value got
	}
	readIn  struct{ offset uint64 }
	readOut struct {
		value string
		found bool // false: "not yet", the log is shorter
	}
	readAllIn  struct{}
	readAllOut struct {
		n int
		h uint64
	}
)

// logModel is the porcupine model of one partition whose log starts as
// init.
func logModel(init []string) porcupine.Model {
	var start *logState
	for _, v := range init {
		start = start.push(v)
	}
	return porcupine.Model{
		Init: func() any { return start },
		Step: func(state, input, output any) (bool, any) {
			s := state.(*logState)
			switch in := input.(type) {
			case appendIn:
				out := output.(appendOut)
				if out.offset != uint64(s.length()) {
					return false, s
				}
				return true, s.push(in.value)
			case readIn:
				out := output.(readOut)
				if !out.found {
					return in.offset >= uint64(s.length()), s
				}
				return in.offset < uint64(s.length()) && s.at(int(in.offset)) == out.value, s
			case readAllIn:
				out := output.(readAllOut)
				return s.length() == out.n && s.hash() == out.h, s
			}
			panic(fmt.Sprintf("jepsen: model input %T", input))
		},
		Equal: func(a, b any) bool {
			x, y := a.(*logState), b.(*logState)
			return x.length() == y.length() && x.hash() == y.hash()
		},
		Hash: func(state any) uint64 { return state.(*logState).hash() },
		DescribeOperation: func(input, output any) string {
			switch in := input.(type) {
			case appendIn:
				return fmt.Sprintf("append(%q) -> %d", in.value, output.(appendOut).offset)
			case readIn:
				if out := output.(readOut); out.found {
					return fmt.Sprintf("read(%d) -> %q", in.offset, out.value)
				}
				return fmt.Sprintf("read(%d) -> not yet", in.offset)
			case readAllIn:
				return fmt.Sprintf("read all -> %d values", output.(readAllOut).n)
			}
			return fmt.Sprint(input)
		},
		DescribeState: func(state any) string {
			s := state.(*logState)
			return fmt.Sprintf("%d values", s.length())
		},
	}
}

// opInfo is the porcupine operation's metadata: its description.
type opInfo string

// partitionOps builds the porcupine history of partition p: its produces,
// its reads and its final read.
//
// A definite failure is left out: it never takes effect. A produce whose
// outcome is unknown takes effect at most once, at any time after its
// call; if it did, its value is in the final log, and an append's place
// in the log is its offset: it gets the offset of its value in the final
// log (else in a read of p, which a direct check already reports), as
// porcupine would find no other linearization of the final read anyway.
// One whose value is in neither is left out: it can always take effect
// after everything else, or never. So every append has an offset, which
// fixes its place among the appends: porcupine's search then follows the
// offsets instead of trying each unknown outcome at every place, which
// takes exponential time.
func partitionOps(h *History, p uint32) []porcupine.Operation {
	at := map[string]uint64{}
	if f, ok := h.Final[p]; ok {
		for i, v := range f.Values {
			if _, dup := at[v]; !dup {
				at[v] = uint64(i)
			}
		}
	}
	for _, r := range h.Reads {
		if _, ok := at[r.Value]; !ok && r.Partition == p {
			at[r.Value] = r.Offset
		}
	}
	var ops []porcupine.Operation
	for _, pr := range slices.Concat(h.Pending, h.Produces) {
		if pr.Partition != p {
			continue
		}
		switch pr.Status {
		case StatusOK:
			ops = append(ops, porcupine.Operation{ClientId: pr.Client, Input: appendIn{pr.Value}, Call: pr.Call,
				Output: appendOut{offset: pr.Offset}, Return: pr.Return, Metadata: opInfo(pr.String())})
		case StatusInfo:
			if off, ok := at[pr.Value]; ok {
				ops = append(ops, porcupine.Operation{ClientId: pr.Client, Input: appendIn{pr.Value}, Call: pr.Call,
					Output: appendOut{offset: off}, Return: math.MaxInt64,
					Metadata: opInfo(fmt.Sprintf("%s; its value is at offset %d", pr, off))})
			}
		}
	}
	for _, r := range h.Reads {
		if r.Partition != p {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: 1000 + r.Consumer, Input: readIn{r.Offset}, Call: r.Call,
			Output: readOut{value: r.Value, found: true}, Return: r.Return, Metadata: opInfo(r.String())})
	}
	if f, ok := h.Final[p]; ok {
		ops = append(ops, porcupine.Operation{ClientId: 2000, Input: readAllIn{}, Call: f.Call,
			Output: readAllOut{n: len(f.Values), h: hashValues(f.Values)}, Return: f.Return,
			Metadata: opInfo(fmt.Sprintf("final read of partition %d: %d values [%v, %v]", p, len(f.Values), time.Duration(f.Call), time.Duration(f.Return)))})
	}
	return ops
}

// linearizable checks partition p's operations with porcupine within
// timeout. On a violation it names the operations that no linearization
// could take next after the longest one found, and writes porcupine's
// visualization to visualize+"partition-N.html" when visualize is set.
func linearizable(h *History, p uint32, timeout time.Duration, visualize string) (porcupine.CheckResult, []string) {
	ops := partitionOps(h, p)
	model := logModel(h.Init[p])
	// The verbose check records the longest linearization at every step
	// back, which costs: only a history without a linearization needs it.
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(model, ops, timeout)
	if res != porcupine.Illegal {
		return res, nil
	}
	res, info := porcupine.CheckOperationsVerbose(model, ops, max(timeout-time.Since(start), time.Second))
	if res != porcupine.Illegal {
		// Cut short the second time: the verdict stands, without details.
		return porcupine.Illegal, []string{fmt.Sprintf("porcupine found no linearization; its search for the longest one did not finish (%v)", res)}
	}
	var out []string
	if visualize != "" {
		path := fmt.Sprintf("%spartition-%d.html", visualize, p)
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			out = append(out, fmt.Sprintf("porcupine's visualization not written: %v", err))
		} else {
			out = append(out, "porcupine's visualization: "+path)
		}
	}
	// The longest partial linearization, and the operations left out of it
	// that had to take effect first (the earliest returns): one of them
	// could not be placed.
	var longest []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	in := map[string]bool{}
	for _, op := range longest {
		in[string(op.Metadata.(opInfo))] = true
	}
	var rest []porcupine.Operation
	for _, op := range ops {
		if !in[string(op.Metadata.(opInfo))] {
			rest = append(rest, op)
		}
	}
	sort.SliceStable(rest, func(i, j int) bool {
		if rest[i].Return != rest[j].Return {
			return rest[i].Return < rest[j].Return
		}
		return rest[i].Call < rest[j].Call
	})
	if n := len(longest); n > 0 {
		out = append(out, fmt.Sprintf("the longest linearization (%d of %d operations) ends with: %s", n, len(ops), longest[n-1].Metadata))
	}
	for i, op := range rest {
		if i == 5 {
			out = append(out, fmt.Sprintf("... and %d more", len(rest)-5))
			break
		}
		out = append(out, "cannot follow it: "+string(op.Metadata.(opInfo)))
	}
	return res, out
}
