package dataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
)

// Tests of the memory bounds against what a peer declares: the server's
// request budget, buffers that grow as bytes arrive, the per-frame read
// deadline and the connection cap (docs/operations.md, "Memory bounds").

// frameClaim is a stream header declaring one segment of body bytes, with
// no body: a frame the peer never sends.
func frameClaim(body int) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint32(b[4:], uint32(body/8))
	return b
}

// rawWrite writes b on the client's socket.
func rawWrite(t *testing.T, c *testClient, b []byte) {
	t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		t.Fatal(err)
	}
}

// budgetIs waits until the server holds used bytes of its budget with
// waiting readers blocked on it.
func budgetIs(t *testing.T, h *harness, what string, used int64, waiting int) {
	t.Helper()
	waitFor(t, what, func() bool {
		st := h.srv.Stats()
		return st.InFlightRequestBytes == used && st.BudgetWaiters == waiting
	})
}

// Claims that are never backed by bytes hold budget, in arrival order,
// until the budget is spent; the next claim waits (its connection is not
// read) instead of allocating, and proceeds when a holder goes.
func TestStalledClaimsWaitForTheBudget(t *testing.T) {
	const (
		frameMax = 64 << 10
		batchMax = 1 << 20
	)
	b := newMemBroker()
	b.lim.MaxBatchBytes = batchMax
	h := startServer(t, b, Options{MaxFrameBytes: frameMax, MaxInFlightRequestBytes: MinInFlightRequestBytes(frameMax, batchMax)})
	setup, _ := connect(t, h.addr)
	setup.createTopic("t", 1)

	// A: a publish declaring a whole batch, then nothing.
	a, _ := connect(t, h.addr)
	a.send(publishReq("t", 0, batchMax), nil)
	tailA := int64(batchMax + requestOverheadBytes)
	budgetIs(t, h, "A's tail held", tailA, 0)
	// B: a frame header declaring 48 KiB, then nothing.
	const body = 48 << 10
	frameB := frameCharge(8 + body)
	bc, _ := connect(t, h.addr)
	rawWrite(t, bc, frameClaim(body))
	budgetIs(t, h, "B's frame held", tailA+frameB, 0)
	// C and D: the same; C does not fit and waits, D waits behind it.
	cc, _ := connect(t, h.addr)
	rawWrite(t, cc, frameClaim(body))
	budgetIs(t, h, "C waiting", tailA+frameB, 1)
	dc, _ := connect(t, h.addr)
	rawWrite(t, dc, frameClaim(body))
	budgetIs(t, h, "C and D waiting", tailA+frameB, 2)

	// A goes: C and D are granted in turn, nothing more is waiting.
	a.nc.Close()
	budgetIs(t, h, "C and D granted once A left", 3*frameB, 0)
	for _, c := range []*testClient{bc, cc, dc} {
		c.nc.Close()
	}
	budgetIs(t, h, "everything given back", 0, 0)

	// The server still serves, and a whole publish fits.
	if p := setup.publish("t", 0, buildBatch(t, make([]byte, 1000))); wireErr(p.Error()) != api.CodeNone {
		t.Fatalf("publish after the claims: %v", api.FromWire(mustWire(p.Error())))
	}
	budgetIs(t, h, "publish answered", 0, 0)
}

// A tail over the connection's own tail budget and a frame never bypass
// the server budget: a publish waiting for it is answered once room is
// made, with its records intact.
func TestPublishWaitsForBudgetThenSucceeds(t *testing.T) {
	const batchMax = 1 << 20
	b := newMemBroker()
	b.lim.MaxBatchBytes = batchMax
	gate := make(chan struct{})
	b.appendGate = gate
	h := startServer(t, b, Options{MaxFrameBytes: 64 << 10, MaxInFlightRequestBytes: MinInFlightRequestBytes(64<<10, batchMax)})
	c1, _ := connect(t, h.addr)
	c1.createTopic("t", 2)
	big := buildBatch(t, make([]byte, 900<<10))
	id1 := c1.send(publishReq("t", 0, len(big)), big)
	waitFor(t, "first publish at the broker", func() bool { return b.gated.Load() == 1 })
	c2, _ := connect(t, h.addr)
	id2 := c2.send(publishReq("t", 1, len(big)), big)
	budgetIs(t, h, "second publish waiting", int64(len(big))+requestOverheadBytes, 1)
	if g := b.gated.Load(); g != 1 {
		t.Fatalf("%d appends at the broker, want 1", g)
	}
	close(gate)
	for _, x := range []struct {
		c  *testClient
		id uint64
	}{{c1, id1}, {c2, id2}} {
		r := x.c.recv()
		if r.f.CorrelationId() != x.id {
			t.Fatalf("response %d, want %d", r.f.CorrelationId(), x.id)
		}
		if p, err := r.f.PublishResponse(); err != nil || wireErr(p.Error()) != api.CodeNone {
			t.Fatalf("publish %d failed", x.id)
		}
	}
	budgetIs(t, h, "all given back", 0, 0)
}

// countingReader serves n bytes, then fails, and records the size of the
// largest buffer it was offered.
type countingReader struct {
	left    int
	largest int
}

func (r *countingReader) Read(p []byte) (int, error) {
	r.largest = max(r.largest, len(p))
	if r.left == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := min(len(p), r.left)
	r.left -= n
	return n, nil
}

// A declared size is allocated only as bytes arrive: the buffer starts at
// firstChunkBytes and grows growFactor times when full.
func TestBuffersGrowAsBytesArrive(t *testing.T) {
	const declared = 16 << 20
	for _, tc := range []struct {
		arrive, wantLargest int
	}{
		{0, firstChunkBytes},
		{100, firstChunkBytes},
		{firstChunkBytes, firstChunkBytes * growFactor},
		{firstChunkBytes*growFactor - 1, firstChunkBytes * growFactor},
		{firstChunkBytes*growFactor + 1, declared},
	} {
		r := &countingReader{left: tc.arrive}
		if _, err := readGrowing(r, nil, declared); err == nil {
			t.Fatalf("%d of %d bytes: no error", tc.arrive, declared)
		}
		// The largest read offered is what remained of the largest buffer.
		if r.largest > tc.wantLargest {
			t.Errorf("%d bytes arrived: a read of %d bytes was offered, want at most %d", tc.arrive, r.largest, tc.wantLargest)
		}
	}
	full := &countingReader{left: 5000}
	b, err := readGrowing(full, []byte("hdr"), 5003)
	if err != nil || len(b) != 5003 || cap(b) != 5003 || string(b[:3]) != "hdr" {
		t.Fatalf("whole read: len %d cap %d err %v", len(b), cap(b), err)
	}
}

// A frame that starts and does not finish within FrameReadTimeout closes
// its connection, wherever it stops: in the stream header, the Cap'n Proto
// part or the records tail. A connection idle between frames is left to
// the idle timeout, and a wait for budget does not count.
func TestFrameReadTimeoutClosesSlowloris(t *testing.T) {
	const batchMax = 1 << 20
	b := newMemBroker()
	b.lim.MaxBatchBytes = batchMax
	gate := make(chan struct{})
	b.appendGate = gate
	h := startServer(t, b, Options{FrameReadTimeout: 50 * time.Millisecond, MaxFrameBytes: 64 << 10,
		MaxInFlightRequestBytes: MinInFlightRequestBytes(64<<10, batchMax)})
	idle, _ := connect(t, h.addr)
	idle.createTopic("t", 2)

	msg, f, err := api.NewFrameMessage(9)
	if err != nil {
		t.Fatal(err)
	}
	if err := publishReq("t", 0, 100)(f); err != nil {
		t.Fatal(err)
	}
	frame, err := msg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		sent []byte
	}{
		{"inside the stream header", frame[:5]},
		{"inside the frame", frame[:len(frame)-3]},
		{"inside the records tail", append(append([]byte{}, frame...), 1, 2, 3)},
	}
	for i, tc := range cases {
		slow, _ := connect(t, h.addr)
		rawWrite(t, slow, tc.sent)
		slow.expectClosed()
		waitFor(t, tc.name+": read timeout logged", func() bool {
			return len(h.logs.lines("connection closed", "read timed out")) == i+1
		})
	}

	// A publish at the broker holds most of the budget; a second one
	// waits for it. A frame started after the wait began times out while
	// the waiting publish stays, so the wait is not counted against it.
	big := buildBatch(t, make([]byte, 900<<10))
	holder, _ := connect(t, h.addr)
	holder.send(publishReq("t", 0, len(big)), big)
	waitFor(t, "publish at the broker", func() bool { return b.gated.Load() == 1 })
	waiter, _ := connect(t, h.addr)
	waiterID := waiter.send(publishReq("t", 1, len(big)), big)
	waitFor(t, "publish waiting for budget", func() bool { return h.srv.Stats().BudgetWaiters == 1 })
	slow, _ := connect(t, h.addr)
	rawWrite(t, slow, frame[:5])
	slow.expectClosed()
	waitFor(t, "fourth read timeout logged", func() bool {
		return len(h.logs.lines("connection closed", "read timed out")) == 4
	})
	if st := h.srv.Stats(); st.Connections != 3 || st.BudgetWaiters != 1 {
		t.Fatalf("stats %+v: want the idle, holder and waiter connections, one waiting", st)
	}
	close(gate)
	holder.recv()
	if r := waiter.recv(); r.f.CorrelationId() != waiterID {
		t.Fatalf("waiter got response %d", r.f.CorrelationId())
	} else if p, err := r.f.PublishResponse(); err != nil || wireErr(p.Error()) != api.CodeNone {
		t.Fatal("the publish that waited for budget failed")
	}
	// The connection idle all along is still served.
	if r := idle.call(listTopicsReq, nil); r.f.Which() != api.Frame_Which_listTopicsResponse {
		t.Fatalf("idle connection answered %v", r.f.Which())
	}
}

// Beyond MaxConnections a connection is accepted and closed at once; the
// refusals are counted and logged once per interval; a slot freed is
// reused.
func TestMaxConnections(t *testing.T) {
	h := startServer(t, newMemBroker(), Options{MaxConnections: 2}, func(s *Server) { s.rejectLogEvery = time.Hour })
	a, _ := connect(t, h.addr)
	connect(t, h.addr)
	const refused = 4
	for range refused {
		c := dialClient(t, h.addr)
		c.expectClosed()
	}
	st := h.srv.Stats()
	if st.RejectedConnections != refused || st.Connections != 2 || st.MaxConnections != 2 {
		t.Fatalf("stats %+v: want %d refused, 2 open", st, refused)
	}
	if n := len(h.logs.lines("too many connections")); n != 1 {
		t.Fatalf("%d refusal lines, want 1 per interval:\n%s", n, h.logs)
	}
	a.nc.Close()
	waitFor(t, "a slot freed", func() bool { return h.srv.Stats().Connections == 1 })
	c, _ := connect(t, h.addr)
	if r := c.call(listTopicsReq, nil); r.f.Which() != api.Frame_Which_listTopicsResponse {
		t.Fatalf("answered %v", r.f.Which())
	}
}

// Each subscription holds a share of the budget for its life, taken
// without waiting and never from the room the largest request needs: once
// the budget has no such room a subscribe is refused with THROTTLED, the
// connection stays usable and a largest publish still goes through.
func TestSubscriptionsChargeTheBudget(t *testing.T) {
	const (
		frameMax = 64 << 10
		batchMax = 1 << 20
	)
	b := newMemBroker()
	b.lim.MaxBatchBytes = batchMax
	h := startServer(t, b, Options{MaxFrameBytes: frameMax, MaxInFlightRequestBytes: MinInFlightRequestBytes(frameMax, batchMax)})
	c, _ := connect(t, h.addr)
	c.createTopic("t", 1)
	replies := make(chan reply, 1)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		if r, err := c.tryRecv(); err == nil {
			replies <- r
		}
	}()
	defer func() { c.nc.Close(); <-readerDone }()
	open := 0
	for ; ; open++ {
		if open > 1000 {
			t.Fatal("no subscription refused")
		}
		id := c.send(subscribeReq("t", 0, 0, 1000), nil)
		// An accepted subscription answers nothing (the topic is empty)
		// and holds its share; a refused one is answered with a push.
		var refusal *reply
		waitFor(t, "subscription accepted or refused", func() bool {
			select {
			case r := <-replies:
				refusal = &r
				return true
			default:
			}
			used, _ := h.srv.budget.stats()
			return used == int64(open+1)*requestOverheadBytes
		})
		if refusal != nil {
			p, _ := refusal.f.PushBatches()
			if refusal.f.CorrelationId() != id || wireErr(p.Error()) != api.CodeThrottled {
				t.Fatalf("subscription %d refused with %v, want THROTTLED", open, wireErr(p.Error()))
			}
			break
		}
	}
	if open == 0 {
		t.Fatal("no subscription accepted")
	}
	t.Logf("%d subscriptions accepted", open)
	budgetIs(t, h, "subscriptions hold their share", int64(open)*requestOverheadBytes, 0)
	pub, _ := connect(t, h.addr)
	if p := pub.publish("t", 0, buildBatch(t, make([]byte, 900<<10))); wireErr(p.Error()) != api.CodeNone {
		t.Fatalf("largest publish beside the subscriptions: %v", api.FromWire(mustWire(p.Error())))
	}
	c.nc.Close()
	budgetIs(t, h, "subscriptions gave their share back", 0, 0)
}

// The budget grants in arrival order, lets small requests pass when they
// fit, gives back on cancellation, and clamps a request larger than the
// whole budget.
func TestByteBudget(t *testing.T) {
	ctx := context.Background()
	b := newByteBudget(100, 5)
	if n, _ := b.acquire(ctx, 70); n != 70 {
		t.Fatal(n)
	}
	granted := make(chan int64, 3)
	wait := func(n int64) {
		go func() {
			if got, err := b.acquire(ctx, n); err == nil {
				granted <- got
			}
		}()
	}
	waiting := func(what string, used int64, n int) {
		t.Helper()
		waitFor(t, what, func() bool { u, w := b.stats(); return u == used && w == n })
	}
	wait(50) // first in line, does not fit
	waiting("50 waiting", 70, 1)
	wait(10) // would fit, but is not small: waits behind 50
	waiting("10 waiting behind 50", 70, 2)
	if n, _ := b.acquire(ctx, 5); n != 5 {
		t.Fatal("a small request that fits waited")
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, err := b.acquire(cctx, 1000); errc <- err }()
	waiting("a clamped request waiting", 75, 3)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v", err)
	}
	waiting("the cancelled request gone", 75, 2)
	b.release(25) // 50 fits now, 10 then does not
	if got := <-granted; got != 50 {
		t.Fatalf("granted %d first, want 50", got)
	}
	waiting("10 still waiting", 100, 1)
	b.release(50)
	if got := <-granted; got != 10 {
		t.Fatalf("granted %d, want 10", got)
	}
	b.release(60)
	if n, _ := b.acquire(ctx, 1000); n != 100 {
		t.Fatalf("oversized acquire took %d, want the whole budget", n)
	}
	b.release(100)
	waiting("all given back", 0, 0)
}

// New refuses a budget that cannot hold one largest frame and batch.
func TestBudgetMustHoldOnePublish(t *testing.T) {
	b := newMemBroker()
	least := MinInFlightRequestBytes(api.DefaultMaxFrameBytes, api.DefaultMaxBatchBytes)
	if least != 8*api.DefaultMaxFrameBytes+api.DefaultMaxBatchBytes+2*requestOverheadBytes {
		t.Fatalf("least budget %d", least)
	}
	for _, budget := range []int64{api.DefaultMaxBatchBytes, least - 1} {
		if _, err := New(b, Options{MaxInFlightRequestBytes: budget}); err == nil {
			t.Fatalf("accepted a budget of %d", budget)
		}
	}
	if _, err := New(b, Options{MaxInFlightRequestBytes: least}); err != nil {
		t.Fatal(err)
	}
}

// A small frame declaring a list of many empty elements is refused before
// they are decoded: decoded, each would take far more memory than the
// frame was charged. The traversal limit, 8 times the frame's size, stops
// the longest lists; checkListLen the rest.
func TestEmptyElementListsAreRefused(t *testing.T) {
	h := startServer(t, newMemBroker(), Options{})
	for _, tc := range []struct {
		n    int32
		want string
	}{
		{50, "a list of 50 elements in a frame of"},
		{100000, "traversal limit"},
	} {
		c, _ := connect(t, h.addr)
		c.send(func(f api.Frame) error {
			r, err := f.NewCommitOffsetsRequest()
			if err != nil {
				return err
			}
			if err := r.SetGroup("g"); err != nil {
				return err
			}
			l, err := capnp.NewCompositeList(r.Segment(), capnp.ObjectSize{}, tc.n)
			if err != nil {
				return err
			}
			return r.SetOffsets(api.OffsetCommit_List(l))
		}, nil)
		c.expectClosed()
		waitFor(t, tc.want, func() bool { return len(h.logs.lines("connection closed", tc.want)) == 1 })
	}
}

// A connection whose handshake cannot get budget waits no longer than
// HandshakeTimeout.
func TestHandshakeWaitsForBudgetWithinItsTimeout(t *testing.T) {
	const (
		frameMax = 64 << 10
		batchMax = 1 << 20
	)
	b := newMemBroker()
	b.lim.MaxBatchBytes = batchMax
	h := startServer(t, b, Options{MaxFrameBytes: frameMax, MaxInFlightRequestBytes: MinInFlightRequestBytes(frameMax, batchMax),
		HandshakeTimeout: time.Second})
	setup, _ := connect(t, h.addr)
	setup.createTopic("t", 1)
	// A stalled batch and a stalled largest frame spend the whole budget.
	a, _ := connect(t, h.addr)
	a.send(publishReq("t", 0, batchMax), nil)
	bc, _ := connect(t, h.addr)
	rawWrite(t, bc, frameClaim(frameMax-8))
	budgetIs(t, h, "budget spent", MinInFlightRequestBytes(frameMax, batchMax), 0)
	late := dialClient(t, h.addr)
	late.send(listTopicsReq, nil) // not a handshake, but it needs budget first
	budgetIs(t, h, "the late connection waiting", MinInFlightRequestBytes(frameMax, batchMax), 1)
	late.expectClosed()
	waitFor(t, "handshake timeout logged", func() bool {
		return len(h.logs.lines("connection closed", "no handshake within")) == 1
	})
	budgetIs(t, h, "the late connection gone", MinInFlightRequestBytes(frameMax, batchMax), 0)
}

// dialFrom dials addr from the local IP address from (127.0.0.0/8 is all
// loopback on Linux) and completes the handshake.
func dialFrom(t *testing.T, addr, from string) *testClient {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("dial from %s: %v (no such loopback address here)", from, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &testClient{t: t, nc: nc, fr: api.NewFrameReader(nc, 16<<20, 64<<20), next: 1}
}

// Beyond MaxConnectionsPerIP a connection from that address is accepted
// and closed at once, while other addresses are served; the refusals are
// counted apart and logged; a slot freed is reused.
func TestMaxConnectionsPerIP(t *testing.T) {
	h := startServer(t, newMemBroker(), Options{MaxConnectionsPerIP: 2}, func(s *Server) { s.rejectLogEvery = time.Hour })
	a := dialFrom(t, h.addr, "127.0.0.2")
	a.handshake(api.ProtocolVersion)
	dialFrom(t, h.addr, "127.0.0.2").handshake(api.ProtocolVersion)
	const refused = 3
	for range refused {
		dialFrom(t, h.addr, "127.0.0.2").expectClosed()
	}
	other := dialFrom(t, h.addr, "127.0.0.3")
	other.handshake(api.ProtocolVersion)
	if r := other.call(listTopicsReq, nil); r.f.Which() != api.Frame_Which_listTopicsResponse {
		t.Fatalf("another address answered %v", r.f.Which())
	}
	st := h.srv.Stats()
	if st.RejectedConnections != refused || st.RejectedConnectionsPerIP != refused || st.Connections != 3 {
		t.Fatalf("stats %+v: want %d refused per IP, 3 open", st, refused)
	}
	if n := len(h.logs.lines("too many connections from one IP address")); n != 1 {
		t.Fatalf("%d refusal lines, want 1 per interval:\n%s", n, h.logs)
	}
	a.nc.Close()
	waitFor(t, "a slot of 127.0.0.2 freed", func() bool { return h.srv.Stats().Connections == 2 })
	c := dialFrom(t, h.addr, "127.0.0.2")
	c.handshake(api.ProtocolVersion)
	if r := c.call(listTopicsReq, nil); r.f.Which() != api.Frame_Which_listTopicsResponse {
		t.Fatalf("answered %v", r.f.Which())
	}
}
