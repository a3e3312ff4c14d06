package sdk

import (
	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// The fake server's replication and idempotence (KIP-98) state, set by a
// test before it produces. Guarded by fakeServer.mu.
type fakeIdem struct {
	// replicas, when not 0, makes a publish with acks all answer
	// durability replicated with this many replicas (a replicated
	// partition's leader); acks leader answers synced, 1 replica.
	replicas uint32
	// grantIDs makes the server answer initProducerId; false: it answers
	// INVALID_REQUEST, as a server from before idempotent producers.
	grantIDs bool
	nextPID  int64
	// producers holds, per partition and producer id, the epoch and the
	// last five batches, as a partition's leader does.
	producers map[fakePKey]*fakeProducer
	// drop is how many of the next stored publishes to each partition get
	// no response (the response is lost; the client times out).
	drop map[topicPartition]int
	// dups counts the publishes answered as duplicates, per partition.
	dups map[topicPartition]int
	// appends counts the publishes that reached a partition's append;
	// failNth makes the one numbered n (from 1) fail with code.
	appends map[topicPartition]int
	failNth map[topicPartition]fakeNth
}

type fakeNth struct {
	n    int
	code api.Code
}

// failNthPublish makes the n-th publish (from 1) to reach tp's append
// fail with code.
func (s *fakeServer) failNthPublish(topic string, partition uint32, n int, code api.Code) {
	s.mu.Lock()
	if s.idem.failNth == nil {
		s.idem.failNth = map[topicPartition]fakeNth{}
	}
	s.idem.failNth[topicPartition{topic, partition}] = fakeNth{n, code}
	s.mu.Unlock()
}

// nthFailure returns the injected failure of the publish to tp now
// reaching its append, if any. Called with s.mu held.
func (s *fakeServer) nthFailure(tp topicPartition) error {
	if s.idem.appends == nil {
		s.idem.appends = map[topicPartition]int{}
	}
	s.idem.appends[tp]++
	if f, ok := s.idem.failNth[tp]; ok && f.n == s.idem.appends[tp] {
		return api.NewError(f.code, "injected at publish %d", f.n)
	}
	return nil
}

type fakePKey struct {
	tp  topicPartition
	pid int64
}

type fakeProducer struct {
	epoch   int16
	batches []fakeSeqBatch // the last five, oldest first
}

type fakeSeqBatch struct {
	first, last int32
	base        uint64
}

// grantProducerIDs makes the server answer initProducerId.
func (s *fakeServer) grantProducerIDs() {
	s.mu.Lock()
	s.idem.grantIDs = true
	s.mu.Unlock()
}

// setReplicas makes acks-all publishes answer as a leader with n in-sync
// replicas.
func (s *fakeServer) setReplicas(n uint32) {
	s.mu.Lock()
	s.idem.replicas = n
	s.mu.Unlock()
}

// dropResponses makes the next n stored publishes to tp get no response.
func (s *fakeServer) dropResponses(topic string, partition uint32, n int) {
	s.mu.Lock()
	if s.idem.drop == nil {
		s.idem.drop = map[topicPartition]int{}
	}
	s.idem.drop[topicPartition{topic, partition}] += n
	s.mu.Unlock()
}

// duplicates returns how many publishes to tp were answered as duplicates.
func (s *fakeServer) duplicates(topic string, partition uint32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idem.dups[topicPartition{topic, partition}]
}

// takeDrop reports whether the response to a publish just stored to tp is
// to be dropped.
func (s *fakeServer) takeDrop(tp topicPartition) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idem.drop[tp] > 0 {
		s.idem.drop[tp]--
		return true
	}
	return false
}

// initProducerID answers initProducerId: a new id, epoch 0.
func (s *fakeServer) initProducerID(f api.Frame) {
	s.mu.Lock()
	grant := s.idem.grantIDs
	s.idem.nextPID++
	pid := s.idem.nextPID
	s.mu.Unlock()
	if !grant {
		w, _ := f.NewErrorResponse()
		if err := api.ToWire(w, api.NewError(api.CodeInvalidRequest, "unsupported request initProducerIdRequest")); err != nil {
			panic(err)
		}
		return
	}
	r, _ := f.NewInitProducerIdResponse()
	r.SetProducerId(1000 + pid)
	r.SetProducerEpoch(0)
}

// checkSequence applies KIP-98's rules to a batch of an idempotent
// producer about to be appended to tp at next: dup is true (with the
// original base offset) for a duplicate of one of the last five batches.
// Called with s.mu held.
func (s *fakeServer) checkSequence(tp topicPartition, h batch.Header) (base uint64, dup bool, err error) {
	if h.ProducerID < 0 {
		return 0, false, nil
	}
	if s.idem.producers == nil {
		s.idem.producers = map[fakePKey]*fakeProducer{}
	}
	k := fakePKey{tp, h.ProducerID}
	st := s.idem.producers[k]
	last := h.BaseSequence + int32(h.RecordCount) - 1
	switch {
	case st == nil:
		if h.BaseSequence != 0 {
			return 0, false, api.NewError(api.CodeUnknownProducerID, "producer %d unknown, sequence %d", h.ProducerID, h.BaseSequence)
		}
		return 0, false, nil
	case h.ProducerEpoch < st.epoch:
		return 0, false, api.NewError(api.CodeInvalidProducerEpoch, "epoch %d below %d", h.ProducerEpoch, st.epoch)
	case h.ProducerEpoch > st.epoch:
		if h.BaseSequence != 0 {
			return 0, false, api.NewError(api.CodeOutOfOrderSequence, "new epoch %d starts at %d", h.ProducerEpoch, h.BaseSequence)
		}
		return 0, false, nil
	}
	for _, b := range st.batches {
		if b.first == h.BaseSequence && b.last == last {
			return b.base, true, nil
		}
	}
	if want := st.batches[len(st.batches)-1].last + 1; h.BaseSequence != want {
		return 0, false, api.NewError(api.CodeOutOfOrderSequence, "sequence %d, expected %d", h.BaseSequence, want)
	}
	return 0, false, nil
}

// noteSequence records an appended batch of an idempotent producer.
// Called with s.mu held.
func (s *fakeServer) noteSequence(tp topicPartition, h batch.Header, base uint64) {
	if h.ProducerID < 0 {
		return
	}
	k := fakePKey{tp, h.ProducerID}
	st := s.idem.producers[k]
	if st == nil || h.ProducerEpoch > st.epoch {
		st = &fakeProducer{epoch: h.ProducerEpoch}
		s.idem.producers[k] = st
	}
	st.batches = append(st.batches, fakeSeqBatch{first: h.BaseSequence, last: h.BaseSequence + int32(h.RecordCount) - 1, base: base})
	if len(st.batches) > 5 {
		st.batches = st.batches[1:]
	}
}
