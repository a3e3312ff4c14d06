package dataplane

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// poison is the byte a released records tail is filled with: a tail given
// back while the engine still held it would reach the log so.
const poison = 0xA5

// tailRecorder stands in for Server.releaseBuffer: it fails the test when
// a buffer is given back twice, fills each buffer given back with poison,
// and does not pool it, so that every tail read is a buffer of its own.
type tailRecorder struct {
	t        testing.TB
	mu       sync.Mutex
	released map[*byte]int // first byte of the buffer's array: its length
}

func poisonTails(t testing.TB) (*tailRecorder, func(*Server)) {
	r := &tailRecorder{t: t, released: map[*byte]int{}}
	return r, func(s *Server) { s.releaseBuffer = r.release }
}

func (r *tailRecorder) release(b []byte) {
	if cap(b) == 0 {
		return // nil: no tail was read
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := &b[:1][0]
	if _, ok := r.released[p]; ok {
		r.t.Errorf("a records tail buffer of %d bytes was given back twice", len(b))
	}
	r.released[p] = len(b)
	full := b[:cap(b)]
	for i := range full {
		full[i] = poison
	}
}

// count returns how many buffers of length n were given back.
func (r *tailRecorder) count(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := 0
	for _, l := range r.released {
		if l == n {
			k++
		}
	}
	return k
}

// valueBatch returns a batch of records values, each of size bytes and
// filled with a byte derived from tag and its index, so that batches and
// records are told apart.
func valueBatch(t testing.TB, tag, records, size int) []byte {
	t.Helper()
	vals := make([][]byte, records)
	for i := range vals {
		vals[i] = bytes.Repeat([]byte{byte(tag*31 + i)}, size)
	}
	return buildBatch(t, vals...)
}

// fetchAll reads partition p of topic from offset 0 up to its high
// watermark and returns its record values.
func fetchAll(t testing.TB, c *testClient, topic string, p uint32) [][]byte {
	t.Helper()
	var vals [][]byte
	off := uint64(0)
	for {
		fr, tail := c.fetch(topic, p, off, 8<<20, 0)
		if err := api.FromWire(mustWire(fr.Error())); err != nil {
			t.Fatalf("fetch %s/%d at %d: %v", topic, p, off, err)
		}
		if len(tail) == 0 {
			return vals
		}
		for len(tail) > 0 {
			h, err := batch.ParseHeader(tail)
			if err != nil {
				t.Fatal(err)
			}
			it, err := batch.NewIter(tail[:h.Size()])
			if err != nil {
				t.Fatal(err)
			}
			for it.Next() {
				vals = append(vals, bytes.Clone(it.Record().Value))
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			off = h.NextOffset()
			tail = tail[h.Size():]
		}
	}
}

// batchValues returns the record values of a batch.
func batchValues(t testing.TB, b []byte) [][]byte {
	t.Helper()
	it, err := batch.NewIter(b)
	if err != nil {
		t.Fatal(err)
	}
	var vals [][]byte
	for it.Next() {
		vals = append(vals, bytes.Clone(it.Record().Value))
	}
	return vals
}

// The records tail of a publish is read into a pooled buffer and given
// back once the engine has committed it, exactly once, and never while the
// engine holds it: every buffer given back is poisoned, and what the log
// stores must still be what was sent. Pipelined publishes to two
// partitions (small tails, and tails over the pool's 64 KiB floor, read
// both into a pool buffer and by growing), refused publishes (unknown
// topic, corrupt batch, chained behind a refused one) and publishes whose
// connection closed while they waited for their commit all give their tail
// back.
func TestPublishTailGivenBackOnceAfterCommit(t *testing.T) {
	rec, setup := poisonTails(t)
	h := startServer(t, openEngine(t), Options{}, setup)
	c, _ := connect(t, h.addr)
	c.createTopic("t", 2)

	// Sizes: 4 records of 10 B (not pooled), 1,000 and 2,000 records of
	// 100 B (144 KiB and 288 KiB: pooled; the first of each size grows).
	shapes := [][2]int{{4, 10}, {1000, 100}, {2000, 100}}
	var sent [2][][]byte
	var ids []uint64
	for i := range 12 {
		s := shapes[i%len(shapes)]
		b := valueBatch(t, i, s[0], s[1])
		p := uint32(i % 2)
		sent[p] = append(sent[p], batchValues(t, b)...)
		ids = append(ids, c.send(publishReq("t", p, len(b)), b))
	}
	for range ids {
		r := c.recv()
		expectWhich(t, r, api.Frame_Which_publishResponse)
		pr, _ := r.f.PublishResponse()
		if err := api.FromWire(mustWire(pr.Error())); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	for _, s := range shapes {
		n := len(valueBatch(t, 0, s[0], s[1]))
		if got := rec.count(n); got != 4 {
			t.Errorf("tails of %d bytes given back: %d, want 4 (one per publish)", n, got)
		}
	}

	// Refused: the unknown topic, a corrupt batch, and a publish chained
	// behind the corrupt one.
	bad := valueBatch(t, 90, 1001, 100)
	bad[len(bad)-1] ^= 0xFF // the CRC no longer matches
	unknown := valueBatch(t, 91, 999, 100)
	chained := valueBatch(t, 92, 998, 100)
	c.send(publishReq("nope", 0, len(unknown)), unknown)
	c.send(publishReq("t", 0, len(bad)), bad)
	c.send(func(f api.Frame) error {
		r, err := f.NewPublishRequest()
		if err != nil {
			return err
		}
		r.SetPartition(0)
		r.SetChained(true)
		r.SetRecordsLength(uint32(len(chained)))
		return r.SetTopic("t")
	}, chained)
	for range 3 {
		r := c.recv()
		expectWhich(t, r, api.Frame_Which_publishResponse)
		pr, _ := r.f.PublishResponse()
		if err := api.FromWire(mustWire(pr.Error())); err == nil {
			t.Errorf("publish %d: accepted, want an error", r.f.CorrelationId())
		}
	}
	for _, b := range [][]byte{bad, unknown, chained} {
		if got := rec.count(len(b)); got != 1 {
			t.Errorf("refused tail of %d bytes given back %d times, want 1", len(b), got)
		}
	}

	// Publishes whose connection closes before their answers (the waits
	// are cut short): each tail the server read is given back once its
	// commit is over. The server may not read them all: closing a socket
	// with unread answers resets it.
	c2, _ := connect(t, h.addr)
	var late [][]byte
	var lateVals [][]byte
	for i := range 6 {
		b := valueBatch(t, 100+i, 1500+i, 100)
		late = append(late, b)
		lateVals = append(lateVals, batchValues(t, b)...)
		c2.send(publishReq("t", 1, len(b)), b)
	}
	c2.nc.Close()
	waitFor(t, "the server to drop the closed connection", func() bool {
		h.srv.mu.Lock()
		defer h.srv.mu.Unlock()
		return len(h.srv.conns) == 1
	})

	// What the log holds is what was sent: no poison reached it. Of the
	// closed connection's publishes, a prefix is stored, after partition
	// 1's others, and each of those gave its tail back once.
	for p := range uint32(2) {
		got := fetchAll(t, c, "t", p)
		if len(got) < len(sent[p]) {
			t.Fatalf("partition %d: %d records, want at least %d", p, len(got), len(sent[p]))
		}
		for i, v := range sent[p] {
			if !bytes.Equal(got[i], v) {
				t.Fatalf("partition %d record %d: %d bytes starting %x, want %d bytes of %x", p, i, len(got[i]), got[i][:min(4, len(got[i]))], len(v), v[0])
			}
		}
		rest := got[len(sent[p]):]
		if p == 0 {
			if len(rest) != 0 {
				t.Fatalf("partition 0: %d records more than sent", len(rest))
			}
			continue
		}
		if len(rest) > len(lateVals) {
			t.Fatalf("partition 1: %d records after the first connection's, at most %d sent", len(rest), len(lateVals))
		}
		for i, v := range rest {
			if !bytes.Equal(v, lateVals[i]) {
				t.Fatalf("partition 1: record %d of the closed connection's is stored altered", i)
			}
		}
		stored := 0
		for n := 0; n < len(rest); stored++ {
			n += len(batchValues(t, late[stored]))
		}
		t.Logf("%d of the closed connection's %d publishes stored", stored, len(late))
		waitFor(t, "the stored tails of the closed connection given back", func() bool {
			for _, b := range late[:stored] {
				if rec.count(len(b)) != 1 {
					return false
				}
			}
			return true
		})
	}
	for _, b := range late {
		if n := rec.count(len(b)); n > 1 {
			t.Errorf("a tail of the closed connection given back %d times", n)
		}
	}
}

// readTailBuffer reads exactly n bytes, leaving what follows, whether the
// pool holds a buffer of n's size or the buffer grows; a stream that ends
// early is io.ErrUnexpectedEOF with every buffer taken given back.
func TestReadTailBuffer(t *testing.T) {
	for _, n := range []int{1, 100, 64 << 10, 64<<10 + 1, 300 << 10, 1<<20 + 5} {
		for _, pooled := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/pooled=%v", n, pooled), func(t *testing.T) {
				if pooled {
					batch.ReleaseBuffer(batch.NewBuffer(n))
				}
				data := make([]byte, n+10)
				for i := range data {
					data[i] = byte(i * 7)
				}
				var given [][]byte
				release := func(b []byte) { given = append(given, b) }
				r := bytes.NewReader(data)
				got, err := readTailBuffer(iotest.HalfReader(r), n, release)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, data[:n]) {
					t.Fatalf("read %d bytes, not the stream's first %d", len(got), n)
				}
				if r.Len() != 10 {
					t.Fatalf("%d bytes left in the stream, want 10", r.Len())
				}
				for _, g := range given {
					if &g[:1][0] == &got[:1][0] {
						t.Fatal("the buffer returned was given back")
					}
				}
				batch.ReleaseBuffer(got)

				given = nil
				_, err = readTailBuffer(iotest.HalfReader(bytes.NewReader(data[:n-1])), n, release)
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("short stream: %v, want io.ErrUnexpectedEOF", err)
				}
				if len(given) == 0 {
					t.Fatal("short stream: the partial buffer was not given back")
				}
			})
		}
	}
}

// A publishBatches request's records tail is one buffer, whose parts are
// the entries' batches: it is given back whole, once, after the commits
// of every entry queued from it, and no entry gives its part back on its
// own, stored or refused (an entry's part given back alone would let the
// pool hand out memory that the request's other entries still use). The
// log then holds exactly what the stored entries sent.
func TestPublishBatchesTailGivenBackWhole(t *testing.T) {
	rec, setup := poisonTails(t)
	h := startServer(t, openEngine(t), Options{}, setup)
	c, _ := connect(t, h.addr)
	c.createTopic("t", 2)
	bad := valueBatch(t, 3, 700, 100)
	bad[len(bad)-1] ^= 0xFF // the CRC no longer matches
	entries := []batchEntry{
		{"t", 0, valueBatch(t, 1, 1000, 100), false},
		{"t", 1, valueBatch(t, 2, 800, 100), false},
		{"t", 0, bad, false},                          // refused alone
		{"t", 7, valueBatch(t, 4, 600, 100), false},   // no such partition
		{"t", 1, valueBatch(t, 5, 900, 100), false},   // stored after the refused ones
		{"nope", 0, valueBatch(t, 6, 10, 100), false}, // no such topic
	}
	p := c.publishBatches(entries...)
	l, err := p.Results()
	if err != nil || l.Len() != len(entries) {
		t.Fatalf("%d results (%v), want %d", l.Len(), err, len(entries))
	}
	wantErr := []bool{false, false, true, true, false, true}
	for i := range entries {
		if got := api.FromWire(mustWire(l.At(i).Error())) != nil; got != wantErr[i] {
			t.Errorf("entry %d refused: %v, want %v", i, got, wantErr[i])
		}
	}
	whole := len(batchesTail(entries))
	waitFor(t, "the request's tail to be given back", func() bool { return rec.count(whole) == 1 })
	for i, e := range entries {
		if n := rec.count(len(e.batch)); n != 0 {
			t.Errorf("entry %d's part of the tail (%d bytes) was given back on its own %d times", i, len(e.batch), n)
		}
	}
	want := [2][][]byte{
		batchValues(t, entries[0].batch),
		append(batchValues(t, entries[1].batch), batchValues(t, entries[4].batch)...),
	}
	for part := range 2 {
		got := fetchAll(t, c, "t", uint32(part))
		if len(got) != len(want[part]) {
			t.Fatalf("partition %d holds %d records, want %d", part, len(got), len(want[part]))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[part][i]) {
				t.Fatalf("partition %d record %d differs from what was sent", part, i)
			}
		}
	}
}
