package main

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
)

// benchSlabs cuts one producer's record values from slabs of slabBytes
// and reuses a slab once every record cut from it was acknowledged or
// failed, so that a long run does not touch fresh memory for every record
// (that first touch was about 15% of sq bench's CPU time). A value is
// [0:8] the send time (written by the producer), [8:16] the number of its
// slab, so that the acknowledgement finds the slab; values of fewer than
// 16 bytes are cut from slabs that are never reused.
type benchSlabs struct {
	size int // bytes of each value

	mu   sync.Mutex
	all  []*benchSlab // by number
	free []*benchSlab

	cur  *benchSlab
	rest []byte // of cur, not cut yet
}

// benchSlab is one slab. refs counts the records cut from it and not yet
// acknowledged or failed, plus one while it is being cut; at 0 it is free.
type benchSlab struct {
	buf  []byte
	refs atomic.Int64
}

func newBenchSlabs(size int) *benchSlabs { return &benchSlabs{size: size} }

// reusable reports whether values carry their slab's number.
func (s *benchSlabs) reusable() bool { return s.size >= 16 }

// next returns the next value: size bytes, the slab number written at
// [8:16] when reusable. Only the producer's goroutine calls it.
func (s *benchSlabs) next() []byte {
	if len(s.rest) < s.size {
		s.take()
	}
	v := s.rest[:s.size:s.size]
	s.rest = s.rest[s.size:]
	return v
}

// take finishes the current slab and starts the next: a free one, or a
// new one.
func (s *benchSlabs) take() {
	if !s.reusable() {
		s.rest = make([]byte, max(slabBytes, s.size))
		return
	}
	s.mu.Lock()
	if s.cur != nil {
		// The values not cut were counted when the slab was started.
		s.done(s.cur, 1+int64(len(s.rest)/s.size))
	}
	var sl *benchSlab
	if n := len(s.free); n > 0 {
		sl = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		sl = &benchSlab{buf: make([]byte, max(slabBytes, s.size))}
		s.all = append(s.all, sl)
		num := uint64(len(s.all) - 1)
		for at := 0; at+s.size <= len(sl.buf); at += s.size {
			binary.LittleEndian.PutUint64(sl.buf[at+8:], num)
		}
	}
	s.mu.Unlock()
	// One reference per value it holds, and one while it is cut.
	sl.refs.Store(1 + int64(len(sl.buf)/s.size))
	s.cur, s.rest = sl, sl.buf
}

// done drops n references of sl; s.mu is held.
func (s *benchSlabs) done(sl *benchSlab, n int64) {
	if sl.refs.Add(-n) == 0 {
		s.free = append(s.free, sl)
	}
}

// release gives back the values of records that were acknowledged or
// failed: the SDK no longer holds them.
func (s *benchSlabs) release(values [][]byte) {
	if !s.reusable() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var last *benchSlab
	var n int64
	for _, v := range values {
		num := binary.LittleEndian.Uint64(v[8:16])
		if num >= uint64(len(s.all)) {
			continue // not a value of these slabs
		}
		sl := s.all[num]
		if sl != last {
			if last != nil {
				s.done(last, n)
			}
			last, n = sl, 0
		}
		n++
	}
	if last != nil {
		s.done(last, n)
	}
}
