package jepsen

import (
	"fmt"
	"time"
)

// Status is the outcome of a produce as its client saw it.
type Status int

const (
	// StatusOK: the record was acknowledged at Produce.Offset.
	StatusOK Status = iota + 1
	// StatusFail: the record was definitely not written (refused before
	// any write, such as NOT_ENOUGH_REPLICAS).
	StatusFail
	// StatusInfo: the outcome is unknown (a timeout, a lost connection):
	// the record may be in the log, once at most.
	StatusInfo
)

// String returns "ok", "fail" or "info".
func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusFail:
		return "fail"
	case StatusInfo:
		return "info"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// Produce is one record a producer sent: invoked at Call and answered at
// Return (nanoseconds since the start of the test, on one monotonic clock
// for the whole history; Return is ignored for StatusInfo). Values are
// unique across the test.
type Produce struct {
	Client    int // the producer's number
	Partition uint32
	Value     string
	Call      int64
	Return    int64
	Status    Status
	Offset    uint64 // the acknowledged offset (StatusOK only)
	Err       string // the error, for StatusFail and StatusInfo
}

// String describes the operation for reports.
func (p Produce) String() string {
	s := fmt.Sprintf("producer %d: produce %q to partition %d [%v", p.Client, p.Value, p.Partition, time.Duration(p.Call))
	switch p.Status {
	case StatusOK:
		return s + fmt.Sprintf(", %v] ok offset %d", time.Duration(p.Return), p.Offset)
	case StatusInfo:
		return s + fmt.Sprintf(", %v] info (unknown outcome): %s", time.Duration(p.Return), p.Err)
	}
	return s + fmt.Sprintf(", %v] %v: %s", time.Duration(p.Return), p.Status, p.Err)
}

// Read is one record a consumer read. Session numbers the consumer's
// assignments of Partition (a partition revoked and assigned again starts
// a new session, which may read again from the committed offset). Call is
// no later than the read's request (the start of the session will do) and
// Return no earlier than the record's delivery to the application.
type Read struct {
	Consumer  int
	Session   int
	Partition uint32
	Offset    uint64
	Value     string
	Call      int64
	Return    int64
}

// String describes the operation for reports.
func (r Read) String() string {
	return fmt.Sprintf("consumer %d session %d: read partition %d offset %d = %q [%v, %v]",
		r.Consumer, r.Session, r.Partition, r.Offset, r.Value, time.Duration(r.Call), time.Duration(r.Return))
}

// SessionKey names a consumer's session of one partition.
type SessionKey struct {
	Consumer  int
	Session   int
	Partition uint32
}

// HWObservation is one high watermark seen by Observer (a node's process,
// a consumer) for Partition at At. An observer's observations are in the
// order it made them.
type HWObservation struct {
	Observer  string
	Partition uint32
	HW        uint64
	At        int64
}

// String describes the observation for reports.
func (o HWObservation) String() string {
	return fmt.Sprintf("%s: partition %d high watermark %d at %v", o.Observer, o.Partition, o.HW, time.Duration(o.At))
}

// FinalRead is a partition's whole log, from offset 0 up to its high
// watermark, read after the faults healed and the producers stopped,
// between Call and Return.
type FinalRead struct {
	Call   int64
	Return int64
	Values []string // Values[i] is the value at offset i
}

// ReplicaLog is one replica's local copy of a partition, as read from its
// node's own data at the end: Values[i] is the value at offset Start+i.
// Batches, when set, are the batches as stored, compared byte for byte
// with the other replicas' below the high watermark.
type ReplicaLog struct {
	Node      string
	Partition uint32
	Start     uint64
	Values    []string
	Batches   []RawBatch
}

// RawBatch is one stored batch: its bytes hold offsets Base..Next-1.
type RawBatch struct {
	Base, Next uint64
	Bytes      []byte
}

// History is what one test (or one round of it) did and saw.
type History struct {
	// Init is each partition's log at the start (a previous round's final
	// log, already checked); a partition absent starts empty.
	Init map[uint32][]string
	// Pending are produces of earlier histories whose outcome is still
	// unknown (Result.Pending of the previous round): they may appear in
	// this history's logs.
	Pending  []Produce
	Produces []Produce
	Reads    []Read // in the order each consumer got them
	HWs      []HWObservation
	Final    map[uint32]FinalRead // every partition of the topic
	Replicas []ReplicaLog
	// Resume is the next offset each session continuing from an earlier
	// history must read (Result.Resume of the previous round).
	Resume map[SessionKey]uint64
	// LastHW is each observer's last high watermark of a partition in
	// earlier histories (Result.LastHW of the previous round).
	LastHW map[ObserverKey]uint64
}

// ObserverKey names an observer's view of one partition.
type ObserverKey struct {
	Observer  string
	Partition uint32
}
