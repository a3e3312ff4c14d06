package sdk

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
)

// leaderCooldown is how long a leader that could not be reached (or
// answered SHUTTING_DOWN) is avoided by keyless placement: long enough
// for the cluster to notice a dead node and for the metadata to be read
// again, short enough to come back soon after the node does.
const leaderCooldown = 5 * time.Second

// availability is what the client core knows of leaders that failed: a
// leader whose connection failed is unavailable for leaderCooldown, and
// keyless placement avoids the partitions it leads meanwhile
// (docs/architecture.md §4.1). Leaders are keyed by leaderKey.
type availability struct {
	mu   sync.Mutex
	down map[string]time.Time // leaderKey -> end of its cool-down
	// until is the latest end of a cool-down, in Unix nanoseconds, or 0
	// once every cool-down has ended or none began: placement reads neither
	// the clock nor the map while it is 0 (the common case, nothing down).
	until atomic.Int64
}

// leaderKey names a leader for availability: its node id, else its
// address ("" for the bootstrap connection).
func leaderKey(b leaderAddr) string {
	if b.nodeID != "" {
		return "id:" + b.nodeID
	}
	return "addr:" + b.addr
}

// markDown makes leader b unavailable for leaderCooldown from now.
func (a *availability) markDown(b leaderAddr, now time.Time) {
	end := now.Add(leaderCooldown)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down == nil {
		a.down = map[string]time.Time{}
	}
	a.down[leaderKey(b)] = end
	if end.UnixNano() > a.until.Load() {
		a.until.Store(end.UnixNano())
	}
}

// markUp ends b's cool-down: a request to it succeeded.
func (a *availability) markUp(b leaderAddr) {
	if a.until.Load() == 0 {
		return
	}
	a.mu.Lock()
	delete(a.down, leaderKey(b))
	if len(a.down) == 0 {
		a.until.Store(0)
	}
	a.mu.Unlock()
}

// anyDownNow is anyDown at the current time, reading the clock only
// while some cool-down may not have ended; once the latest has ended, it
// forgets every cool-down, so that later calls cost one atomic load.
func (a *availability) anyDownNow() bool {
	u := a.until.Load()
	if u == 0 {
		return false
	}
	if time.Now().UnixNano() < u {
		return true
	}
	a.mu.Lock()
	if a.until.Load() == u { // no cool-down began since: all have ended
		clear(a.down)
		a.until.Store(0)
	}
	a.mu.Unlock()
	return false
}

// anyDown reports whether some leader may be in its cool-down at now.
func (a *availability) anyDown(now time.Time) bool {
	return now.UnixNano() < a.until.Load()
}

// isDown reports whether b is in its cool-down at now.
func (a *availability) isDown(b leaderAddr, now time.Time) bool {
	if !a.anyDown(now) {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	end, ok := a.down[leaderKey(b)]
	if ok && !now.Before(end) {
		delete(a.down, leaderKey(b))
		return false
	}
	return ok
}

// leaderGone reports whether err, from a request to a partition's
// leader, says that the leader cannot serve it now: its connection
// failed (ErrConnection) or it is shutting down (SHUTTING_DOWN).
func leaderGone(err error) bool {
	return errors.Is(err, ErrConnection) || errors.Is(err, api.ErrShuttingDown)
}

// LeaderConnectionError is the failure of records whose partition's
// leader could not be reached: a keyed record (which must go to its
// partition) or a keyless one when no other partition's leader was
// available either. It is retriable (IsRetriable): the leader may come
// back, or the cluster may move the partition. Err is the last failure,
// which wraps ErrConnection (and ErrDeliveryTimeout when the delivery
// timeout ended the retries).
type LeaderConnectionError struct {
	Topic     string
	Partition uint32
	// Leader is the address the SDK sent to: the leader's data-plane
	// address (gRPC address for GrpcProducer), or the configured Addr.
	Leader string
	Err    error
}

func (e *LeaderConnectionError) Error() string {
	return fmt.Sprintf("sdk: leader %s of %s/%d unreachable: %v", e.Leader, e.Topic, e.Partition, e.Err)
}

func (e *LeaderConnectionError) Unwrap() error { return e.Err }

// Retriable reports true: the same records may be sent again later.
func (e *LeaderConnectionError) Retriable() bool { return true }

// leaderConnErr wraps err, the final failure of records of tp sent to
// leader, in a *LeaderConnectionError when the leader could not be
// reached; other errors are returned unchanged.
func leaderConnErr(tp topicPartition, leader string, err error) error {
	var lce *LeaderConnectionError
	if err == nil || !errors.Is(err, ErrConnection) || errors.As(err, &lce) {
		return err
	}
	return &LeaderConnectionError{Topic: tp.topic, Partition: tp.partition, Leader: leader, Err: err}
}

// keyless reports whether every record of msgs has no key, so that they
// may go to any partition.
func keyless(msgs []ProducerMessage) bool {
	for i := range msgs {
		if msgs[i].Key != nil {
			return false
		}
	}
	return len(msgs) > 0
}
