package benchmarks

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/seedqueue/sq/ring"
)

// BenchmarkWriteSync measures the backend calls alone: one 1 KiB write
// then an fdatasync of the same file, per op, from 1 and 8 goroutines each
// on its own file. "separate" is WriteAt then Sync (two submissions on
// io_uring); "linked" is the io_uring WriteAndSync (WRITEV linked to
// FSYNC in one io_uring_enter).
func BenchmarkWriteSync(b *testing.B) {
	for _, c := range []struct{ mode, call string }{
		{ring.ModePortable, "separate"}, {ring.ModeUring, "separate"}, {ring.ModeUring, "linked"},
	} {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("backend=%s/%s/goroutines=%d", c.mode, c.call, par), func(b *testing.B) {
				be := openBackend(b, c.mode)
				defer be.Close()
				ws, _ := be.(ring.WriteSyncer)
				buf := make([]byte, 1024)
				dir := b.TempDir()
				b.SetBytes(int64(len(buf)))
				b.ResetTimer()
				var wg sync.WaitGroup
				for g := range par {
					n := b.N / par
					if g < b.N%par {
						n++
					}
					f, err := os.Create(filepath.Join(dir, fmt.Sprint(g)))
					if err != nil {
						b.Fatal(err)
					}
					defer f.Close()
					if err := be.Allocate(f, 0, int64(n+1)*int64(len(buf))); err != nil {
						b.Fatal(err)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range n {
							off := int64(i) * int64(len(buf))
							var err error
							if c.call == "linked" {
								_, err = ws.WriteAndSync(f, [][]byte{buf}, off)
							} else if _, err = be.WriteAt(f, [][]byte{buf}, off); err == nil {
								err = be.Sync(f)
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}
