package segment

import (
	"fmt"
	"testing"
)

// BenchmarkAppend measures Append of one batch of 10 records of 100 bytes,
// with and without a Sync after each (the every-batch policy).
func BenchmarkAppend(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%v", sync), func(b *testing.B) {
			opts := Options{SegmentBytes: 64 << 20, PreallocBytes: 4 << 20}
			l := openLog(b, b.TempDir(), opts)
			defer l.Close()
			proto := makeBatch(b, 0, 10, 100)
			buf := make([]byte, len(proto))
			b.SetBytes(int64(len(proto)))
			b.ResetTimer()
			for range b.N {
				copy(buf, proto)
				if _, err := l.Append([][]byte{buf}); err != nil {
					b.Fatal(err)
				}
				if sync {
					if err := l.Sync(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkRead measures zero-copy reads of 1 MiB from a log of 64 MiB.
func BenchmarkRead(b *testing.B) {
	opts := Options{SegmentBytes: 16 << 20, PreallocBytes: 4 << 20}
	l := openLog(b, b.TempDir(), opts)
	defer l.Close()
	proto := makeBatch(b, 0, 10, 100)
	for l.SizeBytes() < 64<<20 {
		bs := make([][]byte, 64)
		for i := range bs {
			bs[i] = append([]byte(nil), proto...)
		}
		if _, err := l.Append(bs); err != nil {
			b.Fatal(err)
		}
	}
	next := l.NextOffset()
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for i := range b.N {
		off := uint64(i*7919) % next
		v, err := l.Read(off, 1<<20, next)
		if err != nil {
			b.Fatal(err)
		}
		v.Release()
	}
}
