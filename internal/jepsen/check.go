package jepsen

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checks a Violation can name.
const (
	CheckLost            = "lost"            // an acknowledged record is not at its offset in the final log
	CheckDuplicate       = "duplicate"       // a value is in the logs more than once
	CheckFailedPresent   = "failed-present"  // a value whose produce definitely failed is in the log
	CheckPhantom         = "phantom"         // the log holds a value no produce sent
	CheckPrefix          = "prefix"          // the final log does not extend the initial one
	CheckReplica         = "replica"         // a replica differs from the final log below the high watermark
	CheckReplicaBytes    = "replica-bytes"   // two replicas store a batch below the high watermark differently
	CheckHWBack          = "hw-back"         // an observer saw a high watermark move back
	CheckHWAboveLog      = "hw-above-log"    // a high watermark was seen beyond the final log's end
	CheckReadGap         = "read-gap"        // a consumer skipped offsets within a session
	CheckReadOrder       = "read-order"      // a consumer read an offset again or went back within a session
	CheckReadDivergent   = "read-divergent"  // a consumer read a value the final log does not hold there
	CheckNoFinal         = "no-final"        // a partition written or read has no final read
	CheckRealTime        = "real-time"       // an ack or a read returned before an append at or below its offset was invoked
	CheckLinearizability = "linearizability" // porcupine found no linearization
	CheckInconclusive    = "inconclusive"    // porcupine did not finish within Options.Timeout
)

// Violation is one failed check, with the operations at fault.
type Violation struct {
	Check string // one of the Check* names
	Msg   string
	Ops   []string // the operations involved, described
}

// String is the check, the message and one operation per line.
func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", v.Check, v.Msg)
	for _, op := range v.Ops {
		b.WriteString("\n    ")
		b.WriteString(op)
	}
	return b.String()
}

// Options tune Check.
type Options struct {
	// Timeout bounds porcupine's search per partition; 0 means 60 s. A
	// search cut short is reported as an inconclusive violation.
	Timeout time.Duration
	// VisualizePrefix, when set, makes a partition without a
	// linearization write porcupine's visualization (an HTML page) to
	// VisualizePrefix + "partition-N.html"; the violation names the file.
	VisualizePrefix string
}

// Result is Check's verdict.
type Result struct {
	Violations []Violation
	// Linearizability is porcupine's verdict per partition.
	Linearizability map[uint32]porcupine.CheckResult
	// Pending are the produces with an unknown outcome whose value is not
	// in the final log yet: the next round's History.Pending.
	Pending []Produce
	// Resume and LastHW carry each consumer session's next offset and each
	// observer's last high watermark to the next round's History.
	Resume map[SessionKey]uint64
	LastHW map[ObserverKey]uint64
}

// OK reports whether every check passed.
func (r Result) OK() bool { return len(r.Violations) == 0 }

// maxShown bounds the violations of one check that String lists.
const maxShown = 10

// String lists the violations, at most maxShown of each check, or says
// that every check passed.
func (r Result) String() string {
	if r.OK() {
		return "every check passed"
	}
	var b strings.Builder
	count := map[string]int{}
	for _, v := range r.Violations {
		count[v.Check]++
	}
	fmt.Fprintf(&b, "%d violations:", len(r.Violations))
	for _, c := range slices.Sorted(maps.Keys(count)) {
		fmt.Fprintf(&b, " %s %d", c, count[c])
	}
	shown := map[string]int{}
	for _, v := range r.Violations {
		if shown[v.Check]++; shown[v.Check] > maxShown {
			continue
		}
		b.WriteString("\n  ")
		b.WriteString(v.String())
	}
	return b.String()
}

// place is where a value is in the final logs.
type place struct {
	partition uint32
	offset    uint64
}

// checker holds one Check's state.
type checker struct {
	h   *History
	res Result
	// where lists the places of every value in the final logs.
	where map[string][]place
	// sent maps each value to the produces that sent it.
	sent map[string][]Produce
}

func (c *checker) fail(check string, ops []string, format string, args ...any) {
	c.res.Violations = append(c.res.Violations, Violation{Check: check, Msg: fmt.Sprintf(format, args...), Ops: ops})
}

func (c *checker) final(p uint32) []string { return c.h.Final[p].Values }

// Check runs every check of the package doc over h.
func Check(h History, opts Options) Result {
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	c := &checker{h: &h, where: map[string][]place{}, sent: map[string][]Produce{},
		res: Result{Linearizability: map[uint32]porcupine.CheckResult{}, Resume: map[SessionKey]uint64{}, LastHW: map[ObserverKey]uint64{}}}
	for p, f := range h.Final {
		for i, v := range f.Values {
			c.where[v] = append(c.where[v], place{p, uint64(i)})
		}
	}
	for _, pr := range slices.Concat(h.Pending, h.Produces) {
		c.sent[pr.Value] = append(c.sent[pr.Value], pr)
	}
	parts := c.partitions()
	c.checkFinals(parts)
	c.checkProduces()
	c.checkReplicas()
	c.checkReplicaBytes()
	c.checkHWs()
	c.checkReads()
	for _, p := range parts {
		c.checkRealTime(p)
	}
	for _, p := range parts {
		if _, ok := h.Final[p]; !ok {
			continue
		}
		res, ops := linearizable(&h, p, opts.Timeout, opts.VisualizePrefix)
		c.res.Linearizability[p] = res
		switch res {
		case porcupine.Illegal:
			c.fail(CheckLinearizability, ops, "partition %d: no linearization of its %d operations fits the log model", p, len(partitionOps(&h, p)))
		case porcupine.Unknown:
			c.fail(CheckInconclusive, nil, "partition %d: porcupine found no verdict within %v", p, opts.Timeout)
		}
	}
	return c.res
}

// partitions lists every partition the history names, ascending.
func (c *checker) partitions() []uint32 {
	set := map[uint32]bool{}
	for p := range c.h.Final {
		set[p] = true
	}
	for p := range c.h.Init {
		set[p] = true
	}
	for _, pr := range c.h.Produces {
		set[pr.Partition] = true
	}
	for _, r := range c.h.Reads {
		set[r.Partition] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// checkFinals: every partition has a final read that extends its initial
// log, no value is in the logs twice, and every value beyond the initial
// logs was sent by a produce.
func (c *checker) checkFinals(parts []uint32) {
	for _, p := range parts {
		f, ok := c.h.Final[p]
		if !ok {
			c.fail(CheckNoFinal, nil, "partition %d was written or read but has no final read", p)
			continue
		}
		init := c.h.Init[p]
		for i, v := range init {
			if i >= len(f.Values) {
				c.fail(CheckPrefix, nil, "partition %d: the final log ends at offset %d, the initial log held %d values (offsets %d.. gone, from %q)", p, len(f.Values), len(init), i, v)
				break
			}
			if f.Values[i] != v {
				c.fail(CheckPrefix, nil, "partition %d offset %d: %q at the start, %q at the end", p, i, v, f.Values[i])
			}
		}
		for i := len(init); i < len(f.Values); i++ {
			if v := f.Values[i]; len(c.sent[v]) == 0 {
				c.fail(CheckPhantom, nil, "partition %d offset %d holds %q, which no produce sent", p, i, v)
			}
		}
	}
	for _, v := range slices.Sorted(maps.Keys(c.where)) {
		if ps := c.where[v]; len(ps) > 1 && !c.allInit(ps) {
			var at []string
			for _, pl := range ps {
				at = append(at, fmt.Sprintf("partition %d offset %d", pl.partition, pl.offset))
			}
			c.fail(CheckDuplicate, describe(c.sent[v]), "%q is in the final logs %d times: %s", v, len(ps), strings.Join(at, ", "))
		}
	}
}

// allInit reports whether every place is in the initial logs, whose
// duplicates an earlier history reported.
func (c *checker) allInit(ps []place) bool {
	for _, pl := range ps {
		if pl.offset >= uint64(len(c.h.Init[pl.partition])) {
			return false
		}
	}
	return true
}

// checkProduces: every acknowledged record is at its offset, no record
// whose produce failed is anywhere, and the unknown outcomes not in the
// log yet stay pending.
func (c *checker) checkProduces() {
	for _, pr := range slices.Concat(c.h.Pending, c.h.Produces) {
		log := c.final(pr.Partition)
		switch pr.Status {
		case StatusOK:
			switch {
			case pr.Offset >= uint64(len(log)):
				c.fail(CheckLost, []string{pr.String()}, "acknowledged at partition %d offset %d; the final log ends at offset %d%s", pr.Partition, pr.Offset, len(log), c.elsewhere(pr.Value))
			case log[pr.Offset] != pr.Value:
				c.fail(CheckLost, append([]string{pr.String()}, describe(c.sent[log[pr.Offset]])...), "acknowledged at partition %d offset %d, which holds %q at the end%s", pr.Partition, pr.Offset, log[pr.Offset], c.elsewhere(pr.Value))
			}
		case StatusFail:
			if ps := c.where[pr.Value]; len(ps) > 0 {
				c.fail(CheckFailedPresent, []string{pr.String()}, "the produce failed, yet partition %d offset %d holds its value", ps[0].partition, ps[0].offset)
			}
		case StatusInfo:
			if len(c.where[pr.Value]) == 0 {
				c.res.Pending = append(c.res.Pending, pr)
			}
		}
	}
}

// elsewhere says where else a value is in the final logs.
func (c *checker) elsewhere(v string) string {
	ps := c.where[v]
	if len(ps) == 0 {
		return "; the value is nowhere in the final logs"
	}
	return fmt.Sprintf("; the value is at partition %d offset %d instead", ps[0].partition, ps[0].offset)
}

// checkReplicas: every replica holds the final log's value at each offset
// it stores below the final log's end (the high watermark), and stores
// every such offset.
func (c *checker) checkReplicas() {
	for _, r := range c.h.Replicas {
		f, ok := c.h.Final[r.Partition]
		if !ok {
			continue
		}
		hw := uint64(len(f.Values))
		var diffs []string
		for off := r.Start; off < hw; off++ {
			i := off - r.Start
			if i >= uint64(len(r.Values)) {
				c.fail(CheckReplica, nil, "replica %s of partition %d lacks offsets %d..%d, below the high watermark %d (its log ends at %d)", r.Node, r.Partition, off, hw-1, hw, off)
				break
			}
			if r.Values[i] != f.Values[off] {
				diffs = append(diffs, fmt.Sprintf("offset %d: replica %q, final log %q", off, r.Values[i], f.Values[off]))
			}
		}
		if len(diffs) > 0 {
			shown := diffs
			if len(shown) > 5 {
				shown = append(shown[:5:5], fmt.Sprintf("... and %d more", len(diffs)-5))
			}
			c.fail(CheckReplica, shown, "replica %s of partition %d differs from the final log at %d offsets below the high watermark %d", r.Node, r.Partition, len(diffs), hw)
		}
	}
}

// checkReplicaBytes: every batch wholly below the high watermark is
// stored byte for byte alike by every replica that gives its batches and
// holds its offsets (the offsets a replica lacks are checkReplicas'
// business). The reference of a partition is its replica holding the
// most offsets (the first of those).
func (c *checker) checkReplicaBytes() {
	end := func(r *ReplicaLog) uint64 { return r.Start + uint64(len(r.Values)) }
	ref := map[uint32]*ReplicaLog{}
	for i := range c.h.Replicas {
		r := &c.h.Replicas[i]
		if b, ok := ref[r.Partition]; r.Batches != nil && (!ok || end(r) > end(b)) {
			ref[r.Partition] = r
		}
	}
	for i := range c.h.Replicas {
		r := &c.h.Replicas[i]
		f, ok := c.h.Final[r.Partition]
		base := ref[r.Partition]
		if !ok || r.Batches == nil || base == r {
			continue
		}
		hw := uint64(len(f.Values))
		theirs := map[uint64]RawBatch{}
		for _, b := range r.Batches {
			theirs[b.Base] = b
		}
		for _, b := range base.Batches {
			if b.Next > hw || b.Base < r.Start || b.Next > end(r) {
				continue
			}
			o, ok := theirs[b.Base]
			switch {
			case !ok:
				c.fail(CheckReplicaBytes, nil, "partition %d: replica %s stores a batch of offsets %d..%d, replica %s no batch starting at %d", r.Partition, base.Node, b.Base, b.Next-1, r.Node, b.Base)
			case !bytes.Equal(o.Bytes, b.Bytes):
				c.fail(CheckReplicaBytes, nil, "partition %d: the batch of offsets %d..%d differs between replicas %s and %s (%d and %d bytes, first difference at byte %d)", r.Partition, b.Base, b.Next-1, base.Node, r.Node, len(b.Bytes), len(o.Bytes), firstDiff(b.Bytes, o.Bytes))
			default:
				continue
			}
			break // one report per replica
		}
	}
}

// firstDiff is the index of the first byte where a and b differ.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// checkHWs: no observer sees a partition's high watermark move back, nor
// beyond the final log's end.
func (c *checker) checkHWs() {
	maps.Copy(c.res.LastHW, c.h.LastHW)
	last := map[ObserverKey]HWObservation{}
	for _, o := range c.h.HWs {
		k := ObserverKey{o.Observer, o.Partition}
		prev, seen := last[k]
		if hw, ok := c.res.LastHW[k]; ok && hw > o.HW {
			what := fmt.Sprintf("high watermark %d earlier", hw)
			var ops []string
			if seen {
				what = fmt.Sprintf("high watermark %d", prev.HW)
				ops = append(ops, prev.String())
			}
			c.fail(CheckHWBack, append(ops, o.String()), "%s saw partition %d's high watermark move back from %s to %d", o.Observer, o.Partition, what, o.HW)
		}
		if f, ok := c.h.Final[o.Partition]; ok && o.HW > uint64(len(f.Values)) {
			c.fail(CheckHWAboveLog, []string{o.String()}, "%s saw partition %d's high watermark at %d; the final log ends at %d: records below it were exposed and then lost", o.Observer, o.Partition, o.HW, len(f.Values))
		}
		last[k] = o
		c.res.LastHW[k] = max(c.res.LastHW[k], o.HW)
	}
}

// checkReads: within a session a consumer reads consecutive offsets, each
// holding the final log's value.
func (c *checker) checkReads() {
	maps.Copy(c.res.Resume, c.h.Resume)
	prev := map[SessionKey]Read{}
	for _, r := range c.h.Reads {
		k := SessionKey{r.Consumer, r.Session, r.Partition}
		if next, ok := c.res.Resume[k]; ok && r.Offset != next {
			var ops []string
			if p, ok := prev[k]; ok {
				ops = append(ops, p.String())
			}
			ops = append(ops, r.String())
			if r.Offset > next {
				c.fail(CheckReadGap, ops, "consumer %d session %d of partition %d read offset %d where %d was next: offsets %d..%d skipped", r.Consumer, r.Session, r.Partition, r.Offset, next, next, r.Offset-1)
			} else {
				c.fail(CheckReadOrder, ops, "consumer %d session %d of partition %d read offset %d after offset %d", r.Consumer, r.Session, r.Partition, r.Offset, next-1)
			}
		}
		prev[k] = r
		c.res.Resume[k] = r.Offset + 1
		f, ok := c.h.Final[r.Partition]
		switch {
		case !ok:
		case r.Offset >= uint64(len(f.Values)):
			c.fail(CheckReadDivergent, []string{r.String()}, "read beyond the final log's end %d: the record was exposed and then lost", len(f.Values))
		case f.Values[r.Offset] != r.Value:
			c.fail(CheckReadDivergent, []string{r.String()}, "the final log holds %q at offset %d", f.Values[r.Offset], r.Offset)
		}
	}
}

// checkRealTime: no acknowledgement of an append at offset k, and no read
// of offset k, returned before the append of an offset i <= k was invoked
// (the append of i precedes that of k in the log, so it takes effect
// before anything that needs offset k). Porcupine finds these too, but may
// search for long on a large history that is not linearizable; this
// names them at once. Offsets of the initial log and values no produce
// sent (reported as phantoms) have no invocation to compare with.
func (c *checker) checkRealTime(p uint32) {
	f, ok := c.h.Final[p]
	if !ok {
		return
	}
	// last[k] is the produce invoked last among those that appended
	// offsets len(init)..k, nil when none is known.
	last := make([]*Produce, len(f.Values))
	var latest *Produce
	for k := len(c.h.Init[p]); k < len(f.Values); k++ {
		for i, pr := range c.sent[f.Values[k]] {
			if pr.Partition == p && (latest == nil || pr.Call > latest.Call) {
				latest = &c.sent[f.Values[k]][i]
			}
		}
		last[k] = latest
	}
	early := func(off uint64, ret int64, what string) {
		if off >= uint64(len(last)) || last[off] == nil || ret >= last[off].Call {
			return
		}
		first := last[off]
		c.fail(CheckRealTime, []string{what, first.String()}, "partition %d offset %d: answered at %v, before the append of %q (offset %d) was invoked at %v",
			p, off, time.Duration(ret), first.Value, c.placeIn(p, first.Value), time.Duration(first.Call))
	}
	for _, pr := range c.h.Produces {
		if pr.Partition == p && pr.Status == StatusOK && pr.Offset < uint64(len(f.Values)) && f.Values[pr.Offset] == pr.Value {
			early(pr.Offset, pr.Return, pr.String())
		}
	}
	for _, r := range c.h.Reads {
		if r.Partition == p && r.Offset < uint64(len(f.Values)) && f.Values[r.Offset] == r.Value {
			early(r.Offset, r.Return, r.String())
		}
	}
}

// placeIn is the offset of value v in partition p's final log.
func (c *checker) placeIn(p uint32, v string) uint64 {
	for _, pl := range c.where[v] {
		if pl.partition == p {
			return pl.offset
		}
	}
	return 0
}

// describe describes produces for a report.
func describe(ps []Produce) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}
