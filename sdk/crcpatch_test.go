package sdk

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/seedqueue/sq/api/batch"
)

// TestSetProducerKeepsTheCRCValid: patching the producer fields of
// batches of many sizes leaves a CRC equal to a full recomputation, the
// fields readable, and the records untouched.
func TestSetProducerKeepsTheCRCValid(t *testing.T) {
	for _, n := range []int{1, 2, 7, 100, 1000} {
		for _, size := range []int{0, 1, 13, 4096, 40000} {
			if n*size > 1<<20 {
				continue
			}
			var bld batch.Builder
			for i := range n {
				bld.Add(fmt.Appendf(nil, "k%d", i), bytes.Repeat([]byte{byte(i)}, size), nil, 1)
			}
			b, err := bld.Build()
			if err != nil {
				t.Fatal(err)
			}
			records := append([]byte(nil), b[batch.HeaderSize:]...)
			for _, c := range []struct {
				id  producerID
				seq int32
			}{{producerID{id: 1 << 48, epoch: 3}, 0}, {producerID{id: 7, epoch: 0}, 2147483000}, {producerID{id: -1, epoch: -1}, -1}} {
				setProducer(b, c.id, c.seq)
				h, err := batch.CheckHeader(b)
				if err != nil {
					t.Fatalf("%d records of %d bytes, %+v: %v", n, size, c, err)
				}
				if h.CRC != batch.Checksum(b) || h.ProducerID != c.id.id || h.ProducerEpoch != c.id.epoch || h.BaseSequence != c.seq {
					t.Fatalf("%d records of %d bytes: header %+v after setting %+v", n, size, h, c)
				}
				if !bytes.Equal(b[batch.HeaderSize:], records) {
					t.Fatalf("%d records of %d bytes: the records changed", n, size)
				}
			}
		}
	}
}

// TestNextSequenceWraps: sequences wrap from MaxInt32 to 0, as Kafka's.
func TestNextSequenceWraps(t *testing.T) {
	for _, c := range []struct {
		seq  int32
		n    int
		want int32
	}{{0, 5, 5}, {2147483640, 7, 2147483647}, {2147483640, 8, 0}, {2147483647, 3, 2}} {
		if got := nextSequence(c.seq, c.n); got != c.want {
			t.Errorf("nextSequence(%d, %d) = %d, want %d", c.seq, c.n, got, c.want)
		}
	}
}

func BenchmarkSetProducer(b *testing.B) {
	var bld batch.Builder
	for range 1000 {
		bld.Add(nil, make([]byte, 1000), nil, 1)
	}
	data, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for i := range b.N {
		setProducer(data, producerID{id: 1, epoch: 0}, int32(i))
	}
}

func BenchmarkChecksumFull(b *testing.B) {
	for _, size := range []int{4 << 10, 16 << 10, 64 << 10, 1 << 20} {
		data := make([]byte, size)
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for range b.N {
				batch.Checksum(data)
			}
		})
	}
}
