package main

import (
	"testing"
)

// A slab is reused only once every value cut from it was released, and
// then its values come back in turn; values under 16 bytes never reuse.
func TestBenchSlabsReuseOnlyReleased(t *testing.T) {
	const size = 100
	per := slabBytes / size
	s := newBenchSlabs(size)
	var first [][]byte
	for range per {
		first = append(first, s.next())
	}
	second := s.next() // starts the second slab: the first is finished
	if &second[0] == &first[0][0] {
		t.Fatal("a slab was reused while its values were held")
	}
	s.release(first[:per-1])
	third := s.next()
	for i := 0; i < per-2; i++ {
		third = s.next()
	}
	_ = third
	// The second slab is now cut out: the next value starts a third slab,
	// since one value of the first is still held.
	v := s.next()
	for _, f := range first {
		if &v[0] == &f[0] {
			t.Fatal("a value of the first slab was handed out while one of its values was held")
		}
	}
	s.release(first[per-1:])
	// The third slab is cut out next; then the first one is free.
	for i := 0; i < per-1; i++ {
		s.next()
	}
	if v := s.next(); &v[0] != &first[0][0] {
		t.Fatal("the first slab was not reused once all its values were released")
	}

	small := newBenchSlabs(8)
	a := small.next()
	small.release([][]byte{a})
	for range slabBytes / 8 {
		if b := small.next(); &b[0] == &a[0] {
			t.Fatal("a value under 16 bytes was reused")
		}
	}
}
