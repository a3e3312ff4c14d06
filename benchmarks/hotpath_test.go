package benchmarks

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
)

// hpValueBytes is the record value size of the hot-path benchmarks, as in
// the P1-P4 targets of docs/performance.md.
const hpValueBytes = 100

// hpRecordCounts are the batch sizes measured. 7281 records of 100 B make
// the largest batch within 1 MiB (1,048,560 bytes: batch.Overhead + 7281 x
// 144), the batch sdk.BatchProducer builds under its default BatchBytes.
var hpRecordCounts = []int{1, 100, 1000, 7281, 10000}

// hpBatch builds one batch of n keyless records of hpValueBytes.
func hpBatch(tb testing.TB, n int) []byte {
	tb.Helper()
	var bb batch.Builder
	v := bytes.Repeat([]byte("v"), hpValueBytes)
	for range n {
		bb.Add(nil, v, nil, 1_700_000_000_000)
	}
	out, err := bb.Build()
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// reportRecords adds a records/s metric for records handled in b's loop.
func reportRecords(b *testing.B, records int) {
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkBatchBuild measures what the SDK does per batch before a
// publish: batch.Builder Add of n records of 100 B, then Build (Cap'n Proto
// encoding, header and CRC-32C), and, as the SDK does once the server
// acknowledged the batch, batch.ReleaseBuffer (so batches of 64 KiB and
// more reuse a pooled buffer). One op is one batch.
func BenchmarkBatchBuild(b *testing.B) {
	v := bytes.Repeat([]byte("v"), hpValueBytes)
	for _, n := range hpRecordCounts {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var bb batch.Builder
			for b.Loop() {
				bb.Reset()
				for range n {
					bb.Add(nil, v, nil, 1_700_000_000_000)
				}
				out, err := bb.Build()
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(out)))
				batch.ReleaseBuffer(out)
			}
			reportRecords(b, n)
		})
	}
}

// BenchmarkValidate measures the server's per-batch check before an
// append (docs/architecture.md §3.2): header, CRC-32C and the in-place walk of the
// record list. One op is one batch.
func BenchmarkValidate(b *testing.B) {
	lim := batch.Limits{MaxRecordBytes: 1 << 20, MaxBatchBytes: 16 << 20}
	for _, n := range hpRecordCounts {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			data := hpBatch(b, n)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := batch.Validate(data, lim); err != nil {
					b.Fatal(err)
				}
			}
			reportRecords(b, n)
		})
	}
}

// BenchmarkFrameEncode measures one publish request frame as the SDK
// writes it: a new frame message, the request fields, and the stream
// framing with a 1000-record tail written to a buffer (the tail is not
// copied by the SDK on a socket; here the buffer copies it).
func BenchmarkFrameEncode(b *testing.B) {
	tail := hpBatch(b, 1000)
	var buf bytes.Buffer
	b.SetBytes(int64(len(tail)))
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		msg, f, err := api.NewFrameMessage(1)
		if err != nil {
			b.Fatal(err)
		}
		req, err := f.NewPublishRequest()
		if err != nil {
			b.Fatal(err)
		}
		req.SetPartition(0)
		req.SetRecordsLength(uint32(len(tail)))
		if err := req.SetTopic("bench"); err != nil {
			b.Fatal(err)
		}
		if err := api.WriteFrame(&buf, msg, tail); err != nil {
			b.Fatal(err)
		}
		msg.Release()
	}
}

// BenchmarkFrameDecode measures reading publish request frames and their
// 1000-record tails from a stream, as the server's connection reader does
// (the tail is read into a reused buffer).
func BenchmarkFrameDecode(b *testing.B) {
	tail := hpBatch(b, 1000)
	var stream bytes.Buffer
	const frames = 64
	for i := range frames {
		msg, f, err := api.NewFrameMessage(uint64(i))
		if err != nil {
			b.Fatal(err)
		}
		req, _ := f.NewPublishRequest()
		req.SetRecordsLength(uint32(len(tail)))
		_ = req.SetTopic("bench")
		if err := api.WriteFrame(&stream, msg, tail); err != nil {
			b.Fatal(err)
		}
	}
	data := stream.Bytes()
	rd := bytes.NewReader(data)
	fr := api.NewFrameReader(rd, api.DefaultMaxFrameBytes, api.DefaultMaxBatchBytes)
	dst := make([]byte, len(tail))
	b.SetBytes(int64(len(data) / frames))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == frames {
			rd.Reset(data)
			fr = api.NewFrameReader(rd, api.DefaultMaxFrameBytes, api.DefaultMaxBatchBytes)
			i = 0
		}
		msg, f, err := fr.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fr.ReadTail(api.TailLength(f), dst); err != nil {
			b.Fatal(err)
		}
		msg.Release()
		i++
	}
}

// hpEngine opens an engine on a temporary directory with sync policy
// policy and one topic "t" of partitions partitions.
func hpEngine(tb testing.TB, policy string, partitions int) *engine.Engine {
	tb.Helper()
	return hpEngineObserved(tb, policy, partitions, nil)
}

// BenchmarkFetchMmap measures engine.Fetch of up to 1 MiB from a log of
// 1000-record batches already on disk, in the page cache (sync policy
// none): a binary search of the segments, the sparse index, and slices of
// the mapping, with no copy, then a CRC-32C (Castagnoli) over every byte
// returned, as a consumer checking the batches would do, so the figure
// includes reading the mapped pages. One op is one fetch; records/s
// counts the records it covers.
func BenchmarkFetchMmap(b *testing.B) {
	eng := hpEngine(b, "none", 1)
	tmpl := hpBatch(b, 1000)
	ctx := context.Background()
	const batches = 200
	for range batches {
		if _, err := eng.Append(ctx, "t", 0, append([]byte(nil), tmpl...)); err != nil {
			b.Fatal(err)
		}
	}
	var bytesRead, records int64
	off := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		res, err := eng.Fetch(ctx, "t", 0, off, 1<<20, 0)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, buf := range res.Bufs {
			fetchSum = crc32.Update(fetchSum, castagnoli, buf)
			n += len(buf)
		}
		res.Release()
		bytesRead += int64(n)
		got := uint64(n / len(tmpl) * 1000)
		records += int64(got)
		off += got
		if off >= res.HighWatermark {
			off = 0
		}
	}
	b.SetBytes(bytesRead / int64(b.N))
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
}

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	// fetchSum keeps BenchmarkFetchMmap's checksum live.
	fetchSum uint32
)

// BenchmarkEngineAppend measures engine.Append of one 1000-record batch
// (100 B values) from parallelism x GOMAXPROCS concurrent callers on one
// partition, so group
// commit can share one write and one fdatasync among them. One op is one
// batch.
func BenchmarkEngineAppend(b *testing.B) {
	for _, policy := range []string{"every-batch", "none"} {
		for _, callers := range []int{1, 8} {
			b.Run(fmt.Sprintf("sync=%s/parallelism=%d", policy, callers), func(b *testing.B) {
				eng := hpEngine(b, policy, 1)
				tmpl := hpBatch(b, 1000)
				b.SetBytes(int64(len(tmpl)))
				b.SetParallelism(callers)
				b.ReportAllocs()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					buf := make([]byte, len(tmpl))
					for pb.Next() {
						copy(buf, tmpl)
						if _, err := eng.Append(context.Background(), "t", 0, buf); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)*1000/time.Since(start).Seconds(), "records/s")
			})
		}
	}
}
