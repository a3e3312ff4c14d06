package sim

import "fmt"

// checker holds what the invariants compare against: the value committed
// at each offset (first seen below a high watermark, acknowledged, or
// read by a consumer), the acknowledged values, and how far each node's
// log has been checked.
type checker struct {
	failed    string
	committed []uint64 // offset -> value; 0: none yet (values start at 1)
	ackAt     []uint64 // offset -> acknowledged value; 0: none
	// checked[i]: node i's log below this offset matched committed (and
	// holds every acknowledged value there). A truncation or a crash
	// lowers it.
	checked    []uint64
	ackChecked []uint64 // node i holds every acknowledged value below this
}

func newChecker(nodes int) checker {
	return checker{checked: make([]uint64, nodes), ackChecked: make([]uint64, nodes)}
}

func (c *checker) fail(format string, args ...any) {
	if c.failed == "" {
		c.failed = fmt.Sprintf(format, args...)
	}
}

// commit records value v at offset o as committed, seen by who; a
// different value already committed there fails.
func (c *checker) commit(o, v uint64, who string) {
	for uint64(len(c.committed)) <= o {
		c.committed = append(c.committed, 0)
	}
	switch c.committed[o] {
	case 0:
		c.committed[o] = v
	case v:
	default:
		c.fail("offset %d holds value %d on %s, but value %d is committed there", o, v, who, c.committed[o])
	}
}

// truncated lowers node i's checked marks after its log was cut at t.
func (c *checker) truncated(i int, t uint64) {
	c.checked[i] = min(c.checked[i], t)
	c.ackChecked[i] = min(c.ackChecked[i], t)
}

// acked records an acknowledgement received by the producer: the value
// is committed at its offset, and the current leader must hold it.
func (c *checker) acked(v, o uint64) {
	c.commit(o, v, "the producer's acknowledgement")
	for uint64(len(c.ackAt)) <= o {
		c.ackAt = append(c.ackAt, 0)
	}
	c.ackAt[o] = v
	for i := range c.ackChecked {
		c.ackChecked[i] = min(c.ackChecked[i], o)
	}
}

// consumed checks a consumer's read from node id: it starts at the
// consumer's position, is contiguous up to the high watermark it reports,
// that high watermark is not below one the consumer saw before, and its
// values are the committed ones.
func (c *checker) consumed(s *Sim, cons *consumer, id string, start uint64, batches []batch, hw uint64) {
	switch {
	case start != cons.pos:
		c.fail("a consumer at offset %d read from %d on %s (a gap or a repeat)", cons.pos, start, id)
		return
	case start+uint64(len(batches)) != hw:
		c.fail("a consumer read [%d, %d) on %s, not up to its high watermark %d", start, start+uint64(len(batches)), id, hw)
		return
	case hw < cons.lastHW:
		c.fail("the high watermark a consumer saw moved back from %d to %d on %s", cons.lastHW, hw, id)
		return
	}
	for i, b := range batches {
		c.commit(start+uint64(i), b.value, "a consumer's read from "+id)
	}
	s.stats.Consumed += len(batches)
	cons.pos, cons.lastHW = hw, hw
}

// check runs after every step: no node's high watermark is above its log
// end offset (KAFKA-14704); every node's log below its high watermark is
// the committed log, so no two replicas differ below the lower of their
// high watermarks; and the leader the controller names holds every
// acknowledged value at its offset.
func (c *checker) check(s *Sim) {
	for _, n := range s.nodes {
		if n.hw > n.leo() {
			c.fail("%s's high watermark %d is above its log end offset %d", n.id, n.hw, n.leo())
			return
		}
		for o := c.checked[n.i]; o < n.hw; o++ {
			c.commit(o, n.log[o].value, n.id+" below its high watermark")
		}
		c.checked[n.i] = max(c.checked[n.i], n.hw)
	}
	l := s.node(s.ctl.meta.Leader)
	if l == nil {
		return
	}
	end := uint64(len(c.ackAt))
	for o := c.ackChecked[l.i]; o < end; o++ {
		v := c.ackAt[o]
		switch {
		case v == 0:
		case o >= l.leo():
			c.fail("acknowledged value %d at offset %d lost: leader %s (epoch %d) ends at %d", v, o, l.id, s.ctl.meta.Epoch, l.leo())
			return
		case l.log[o].value != v:
			c.fail("acknowledged value %d at offset %d lost: leader %s (epoch %d) holds %d there", v, o, l.id, s.ctl.meta.Epoch, l.log[o].value)
			return
		}
	}
	c.ackChecked[l.i] = end
}
