package sim

import (
	"fmt"
	"time"
)

// Endpoint names other than the nodes' ids.
const (
	ctlID    = "ctl"    // the controller
	clientID = "client" // producers (consumers read directly)
)

// kind is a message type.
type kind uint8

const (
	msgFetch     kind = iota + 1 // follower -> leader
	msgFetchResp                 // leader -> follower
	msgEpochReq                  // follower -> leader: offsetForLeaderEpoch
	msgEpochResp                 // leader -> follower
	msgMeta                      // controller -> node: the partition's metadata
	msgPropose                   // leader -> controller: set-isr
	msgProduce                   // client -> node
	msgAck                       // node -> client
)

var kindNames = map[kind]string{
	msgFetch: "fetch", msgFetchResp: "fetch-response", msgEpochReq: "offset-for-leader-epoch",
	msgEpochResp: "offset-for-leader-epoch-response", msgMeta: "metadata", msgPropose: "set-isr",
	msgProduce: "produce", msgAck: "ack",
}

// message is one message in flight. Only the fields of its kind are set.
type message struct {
	kind      kind
	from, to  string
	toInc     int // the destination's incarnation when sent (nodes only)
	deliverAt time.Time

	seq        uint64 // request number, echoed by the response
	epoch      uint32 // the sender's leader epoch (requests) or the leader's (responses)
	err        bool   // the leader refused the request (not leader, other epoch, out of range)
	outOfRange bool   // fetch offset above the leader's LEO (in endOffset)

	offset  uint64  // fetch offset; produce/ack offset
	durable uint64  // the follower's durable LEO
	batches []batch // fetch response
	hw      uint64  // fetch response: the leader's HW

	latest      uint32 // offsetForLeaderEpoch: the follower's latest epoch
	endEpoch    uint32 // response: the epoch and end offset, and whether the leader knows one
	endOffset   uint64
	leaderKnows bool

	meta  meta     // metadata
	base  uint64   // set-isr: the metadata version the proposal is based on
	isr   []string // set-isr: the proposed ISR
	value uint64   // produce, ack
}

func (m *message) String() string {
	s := fmt.Sprintf("%s %s->%s", kindNames[m.kind], m.from, m.to)
	switch m.kind {
	case msgFetch:
		s += fmt.Sprintf(" epoch=%d offset=%d durable=%d", m.epoch, m.offset, m.durable)
	case msgFetchResp:
		s += fmt.Sprintf(" epoch=%d batches=%d hw=%d err=%v", m.epoch, len(m.batches), m.hw, m.err)
	case msgEpochReq:
		s += fmt.Sprintf(" epoch=%d latest=%d", m.epoch, m.latest)
	case msgEpochResp:
		s += fmt.Sprintf(" end=(%d,%d,%v) err=%v", m.endEpoch, m.endOffset, m.leaderKnows, m.err)
	case msgMeta:
		s += " " + m.meta.String()
	case msgPropose:
		s += fmt.Sprintf(" epoch=%d base=%d isr=%v", m.epoch, m.base, m.isr)
	case msgProduce, msgAck:
		s += fmt.Sprintf(" value=%d offset=%d", m.value, m.offset)
	}
	return s
}

// network holds the messages in flight and the partition of the
// endpoints into sides. A message is delivered at or after its
// deliverAt, in any order among those due (reordering); it is lost when
// dropped at send, when its ends are on different sides at delivery, or
// when its destination crashed since it was sent.
type network struct {
	inflight []*message
	side     map[string]int // endpoint -> side; the client reaches every side
}

func (n *network) reachable(a, b string) bool {
	if a == clientID || b == clientID {
		return true
	}
	return n.side[a] == n.side[b]
}

func (n *network) partitioned() bool {
	for _, s := range n.side {
		if s != 0 {
			return true
		}
	}
	return false
}
