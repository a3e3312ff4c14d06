package main

import (
	"fmt"
	"io"
	"sync"
)

// fetchStalls says on stderr, once, that a partition cannot be read for
// now (its leader is down, say; sdk.ConsumerConfig.OnFetchRetry) and,
// once its records come again, that it is read again: without it, a
// consume that follows a topic goes quiet with no word of why.
type fetchStalls struct {
	stderr io.Writer
	mu     sync.Mutex
	stuck  map[uint32]bool // partitions said to be stalled, not read since
}

// to sets where the notes go.
func (f *fetchStalls) to(stderr io.Writer) {
	f.mu.Lock()
	f.stderr = stderr
	f.mu.Unlock()
}

// failed notes that a fetch of partition p failed with err and is
// retried; the first failure since p was last read is said.
func (f *fetchStalls) failed(p uint32, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stuck[p] {
		return
	}
	if f.stuck == nil {
		f.stuck = map[uint32]bool{}
	}
	f.stuck[p] = true
	fmt.Fprintf(f.stderr, "sq: partition %d cannot be read for now, retrying (the other partitions are read meanwhile): %v\n", p, err)
}

// read notes that a record of partition p at offset was printed; a
// stalled partition is said to be read again.
func (f *fetchStalls) read(p uint32, offset uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stuck[p] {
		return
	}
	delete(f.stuck, p)
	fmt.Fprintf(f.stderr, "sq: partition %d is read again, from offset %d\n", p, offset)
}
