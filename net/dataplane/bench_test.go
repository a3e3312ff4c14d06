package dataplane

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
)

// benchBatch is n records of 100 bytes.
func benchBatch(b *testing.B, n int) []byte {
	var bb batch.Builder
	v := make([]byte, 100)
	for i := 0; i < n; i++ {
		bb.Add(nil, v, nil, 0)
	}
	out, err := bb.Build()
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func benchEngine(b *testing.B) Broker {
	opts := engine.Options{DataDir: b.TempDir(), SyncPolicy: "none", Logger: slog.New(slog.DiscardHandler)}
	eng, err := engine.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.Close() })
	return eng
}

// BenchmarkPublishPipelined publishes over one connection with up to 64
// requests in flight, to one partition or round robin over four (sync
// policy none), batches of 100 records of 100 B (14 KiB) and of 7281 (1
// MiB, the SDK's default batch size: their records tails are read into
// pooled buffers). One op is one publish; B/op and allocs/op count the
// test client's too.
func BenchmarkPublishPipelined(b *testing.B) {
	for _, parts := range []int{1, 4} {
		for _, records := range []int{100, 7281} {
			name := fmt.Sprintf("partitions=%d", parts)
			if records != 100 {
				name += fmt.Sprintf("/records=%d", records)
			}
			b.Run(name, func(b *testing.B) { benchPublish(b, parts, records) })
		}
	}
}

func benchPublish(b *testing.B, partitions, records int) {
	h := startServer(b, benchEngine(b), Options{})
	c, _ := connect(b, h.addr)
	c.createTopic("t", uint32(partitions))
	tmpl := benchBatch(b, records)
	b.SetBytes(int64(len(tmpl)))
	b.ReportAllocs()
	b.ResetTimer()
	const window = 64
	sent, recvd := 0, 0
	for recvd < b.N {
		for sent < b.N && sent-recvd < window {
			c.send(publishReq("t", uint32(sent%partitions), len(tmpl)), tmpl)
			sent++
		}
		r := c.recv()
		if r.f.Which() != api.Frame_Which_publishResponse {
			b.Fatalf("answered with %v", r.f.Which())
		}
		recvd++
	}
}

// BenchmarkFetch reads back 1 MiB fetches of stored batches.
func BenchmarkFetch(b *testing.B) {
	h := startServer(b, benchEngine(b), Options{})
	c, _ := connect(b, h.addr)
	c.createTopic("t", 1)
	tmpl := benchBatch(b, 100)
	const batches = 1000
	for i := 0; i < batches; i++ {
		c.publish("t", 0, tmpl)
	}
	b.ResetTimer()
	var n int64
	off := uint64(0)
	for i := 0; i < b.N; i++ {
		fr, tail := c.fetch("t", 0, off, 1<<20, 0)
		n += int64(len(tail))
		off += uint64(len(tail) / len(tmpl) * 100)
		if off >= fr.HighWatermark() {
			off = 0
		}
	}
	b.SetBytes(n / int64(b.N))
}
