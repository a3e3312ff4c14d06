package dataplane

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// TestBadStreamsCloseOnlyTheirConnection sends each kind of broken stream
// on its own connection while a second client keeps working, and checks
// the one log line naming the remote address and the reason.
func TestBadStreamsCloseOnlyTheirConnection(t *testing.T) {
	// A valid publish frame declaring a 1000-byte tail, for the
	// mid-frame and mid-tail cases.
	pubFrame := func(t *testing.T, recordsLength int) []byte {
		msg, f, err := api.NewFrameMessage(9)
		if err != nil {
			t.Fatal(err)
		}
		if err := publishReq("t", 0, recordsLength)(f); err != nil {
			t.Fatal(err)
		}
		b, err := msg.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	hugeSegment := make([]byte, 8)
	binary.LittleEndian.PutUint32(hugeSegment[4:], 0x0fffffff) // one segment of 2 GiB
	cases := []struct {
		name       string
		handshake  bool
		stream     func(t *testing.T) []byte
		halfClose  bool // close the write side after the stream
		wantReason string
		wantReply  api.Code // an answer expected before the close
	}{
		{"garbage length prefix", true, func(*testing.T) []byte { return bytes.Repeat([]byte{0xff}, 8) }, false, "read frame", 0},
		{"garbage before the handshake", false, func(*testing.T) []byte { return bytes.Repeat([]byte{0xff}, 8) }, false, "read frame", 0},
		{"segment over the frame limit", true, func(*testing.T) []byte { return hugeSegment }, false, "read frame", 0},
		{"disconnect mid-frame", true, func(t *testing.T) []byte { return pubFrame(t, 1000)[:20] }, true, "unexpected EOF", 0},
		{"disconnect mid-tail", true, func(t *testing.T) []byte { return append(pubFrame(t, 1000), make([]byte, 10)...) }, true, "records tail", 0},
		{"tail over the batch limit", true, func(t *testing.T) []byte { return pubFrame(t, api.DefaultMaxBatchBytes+1) }, false, "over the size limit", api.CodeMessageTooLarge},
	}
	forEachBroker(t, func(t *testing.T, b Broker) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				topic := fmt.Sprintf("t%d", i)
				h := startServer(t, b, Options{})
				good, _ := connect(t, h.addr)
				good.createTopic(topic, 1)

				bad := dialClient(t, h.addr)
				if tc.handshake {
					bad.handshake(api.ProtocolVersion)
				}
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				if _, err := bad.nc.Write(tc.stream(t)); err != nil {
					t.Fatal(err)
				}
				if tc.halfClose {
					_ = bad.nc.(interface{ CloseWrite() error }).CloseWrite()
				}
				replies := bad.expectClosed()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
					t.Errorf("server allocated %d bytes for a bad stream", grew)
				}
				if tc.wantReply != 0 {
					if len(replies) != 1 || replies[0].f.Which() != api.Frame_Which_errorResponse || wireErr(replies[0].f.ErrorResponse()) != tc.wantReply {
						t.Errorf("got %d replies before the close, want one with %v", len(replies), tc.wantReply)
					}
				}
				local := bad.nc.LocalAddr().String()
				waitFor(t, "close logged", func() bool { return len(h.logs.lines("connection closed", local)) == 1 })
				line := h.logs.lines("connection closed", local)[0]
				t.Log(line)
				if !strings.Contains(line, tc.wantReason) {
					t.Errorf("log line %q does not give the reason %q", line, tc.wantReason)
				}
				// The other client is unaffected.
				if p := good.publish(topic, 0, buildBatch(t, []byte("still here"))); wireErr(p.Error()) != api.CodeNone {
					t.Fatalf("good client: %v", api.FromWire(mustWire(p.Error())))
				}
			})
		}
	})
}

func TestShutdownEndsLongPollFetch(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		c, _ := connect(t, h.addr)
		c.createTopic("t", 1)
		id := c.send(fetchReq("t", 0, 0, 0, 20_000), nil)
		waitFor(t, "fetch in flight", func() bool { return totalInFlight(h.srv) == 1 })

		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shutdownDone := make(chan error, 1)
		go func() { shutdownDone <- h.srv.Shutdown(ctx) }()
		r := c.recv()
		if r.f.CorrelationId() != id {
			t.Fatalf("answer id %d, want the fetch %d", r.f.CorrelationId(), id)
		}
		// The fetch ends empty or with SHUTTING_DOWN, as an errorResponse
		// when Shutdown began before the request was dispatched.
		code := api.CodeNone
		switch r.f.Which() {
		case api.Frame_Which_fetchResponse:
			fr, _ := r.f.FetchResponse()
			code = wireErr(fr.Error())
		case api.Frame_Which_errorResponse:
			code = wireErr(r.f.ErrorResponse())
		default:
			t.Fatalf("answered with %v", r.f.Which())
		}
		if (code != api.CodeNone && code != api.CodeShuttingDown) || len(r.tail) != 0 {
			t.Fatalf("fetch ended by shutdown with %v and %d bytes", code, len(r.tail))
		}
		c.expectClosed()
		if err := <-shutdownDone; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if elapsed := time.Since(start); elapsed > 5*time.Second {
			t.Fatalf("Shutdown took %v with a long poll in flight", elapsed)
		}
	})
}

func TestCleanCloseLogsAtDebug(t *testing.T) {
	h := startServer(t, newMemBroker(), Options{})
	c, _ := connect(t, h.addr)
	local := c.nc.LocalAddr().String()
	c.nc.Close()
	waitFor(t, "close logged", func() bool { return len(h.logs.lines("connection closed", local)) == 1 })
	if line := h.logs.lines("connection closed", local)[0]; !strings.Contains(line, "level=DEBUG") {
		t.Errorf("clean close logged as %q", line)
	}
}

func TestBackPressureAtMaxInFlight(t *testing.T) {
	b := newMemBroker()
	gate := make(chan struct{})
	b.appendGate = gate
	h := startServer(t, b, Options{MaxInFlightPerConn: 2})
	c, _ := connect(t, h.addr)
	c.createTopic("t", 3)

	const n = 6
	for i := 0; i < n; i++ {
		bb := buildBatch(t, []byte("x"))
		c.send(publishReq("t", uint32(i%3), len(bb)), bb)
	}
	waitFor(t, "two requests in flight", func() bool { return totalInFlight(h.srv) == 2 })
	// The reader holds no third slot: it is blocked before reading.
	conns := h.srv.snapshotConns()
	if len(conns) != 1 || len(conns[0].slots) != 2 {
		t.Fatalf("slots in use: %d, want 2", len(conns[0].slots))
	}
	// Nothing is dropped: releasing the appends answers every publish.
	for i := 0; i < n; i++ {
		gate <- struct{}{}
		r := c.recv()
		expectWhich(t, r, api.Frame_Which_publishResponse)
		if p, err := r.f.PublishResponse(); err != nil || wireErr(p.Error()) != api.CodeNone {
			t.Fatalf("response %d: %v", i, r.f.Which())
		}
	}
}

func TestBackPressureOnTailBytes(t *testing.T) {
	b := newMemBroker()
	gate := make(chan struct{})
	b.appendGate = gate
	h := startServer(t, b, Options{MaxInFlightBytesPerConn: 1000})
	c, _ := connect(t, h.addr)
	c.createTopic("t", 3)

	// Three ~600-byte batches to three partitions: only one fits in the
	// 1000-byte budget at a time, so only one reaches the broker.
	const n = 3
	for i := 0; i < n; i++ {
		bb := buildBatch(t, make([]byte, 500))
		if len(bb) <= 500 || len(bb) > 1000 {
			t.Fatalf("batch of %d bytes", len(bb))
		}
		c.send(publishReq("t", uint32(i), len(bb)), bb)
	}
	for i := 0; i < n; i++ {
		waitFor(t, "one request in flight, at the broker", func() bool {
			return b.gated.Load() == 1 && totalInFlight(h.srv) == 1
		})
		gate <- struct{}{}
		r := c.recv()
		expectWhich(t, r, api.Frame_Which_publishResponse)
		if p, err := r.f.PublishResponse(); err != nil || wireErr(p.Error()) != api.CodeNone {
			t.Fatalf("response %d: %v", i, r.f.Which())
		}
	}
	if m := b.maxGated.Load(); m != 1 {
		t.Fatalf("%d appends at the broker at once, want 1", m)
	}
	// A tail larger than the whole budget still goes through alone.
	close(gate)
	if p := c.publish("t", 0, buildBatch(t, make([]byte, 5000))); wireErr(p.Error()) != api.CodeNone {
		t.Fatalf("large publish: %v", api.FromWire(mustWire(p.Error())))
	}
}

func TestHandshakeAndIdleTimeouts(t *testing.T) {
	t.Run("handshake", func(t *testing.T) {
		h := startServer(t, newMemBroker(), Options{HandshakeTimeout: 20 * time.Millisecond})
		c := dialClient(t, h.addr)
		c.expectClosed()
		waitFor(t, "close logged", func() bool { return len(h.logs.lines("connection closed", "no handshake within")) == 1 })
	})
	t.Run("idle", func(t *testing.T) {
		h := startServer(t, newMemBroker(), Options{IdleTimeout: 30 * time.Millisecond})
		c, _ := connect(t, h.addr)
		c.expectClosed()
		waitFor(t, "close logged", func() bool { return len(h.logs.lines("connection closed", "idle timeout")) == 1 })
	})
	t.Run("long poll is not idle", func(t *testing.T) {
		h := startServer(t, newMemBroker(), Options{IdleTimeout: 30 * time.Millisecond})
		c, _ := connect(t, h.addr)
		c.createTopic("t", 1)
		start := time.Now()
		fr, _ := c.fetch("t", 0, 0, 0, 200)
		if code := wireErr(fr.Error()); code != api.CodeNone || time.Since(start) < 150*time.Millisecond {
			t.Fatalf("fetch: code %v after %v", code, time.Since(start))
		}
	})
}

func TestShutdownWaitsForInFlightRequests(t *testing.T) {
	b := newMemBroker()
	gate := make(chan struct{})
	b.appendGate = gate
	h := startServer(t, b, Options{})
	c, _ := connect(t, h.addr)
	c.createTopic("t", 2)
	idle, _ := connect(t, h.addr)

	// One publish held in the broker, one long-poll fetch waiting.
	bb := buildBatch(t, []byte("held"))
	pubID := c.send(publishReq("t", 0, len(bb)), bb)
	fetchID := c.send(fetchReq("t", 1, 0, 0, 20_000), nil)
	waitFor(t, "two requests in flight", func() bool { return totalInFlight(h.srv) == 2 })

	shutdownDone := make(chan error, 1)
	start := time.Now()
	go func() { shutdownDone <- h.srv.Shutdown(context.Background()) }()

	// The long poll ends at once, the idle connection closes, and a new
	// request is refused with SHUTTING_DOWN.
	r := c.recv()
	if r.f.CorrelationId() != fetchID {
		t.Fatalf("first answer %d, want the fetch %d", r.f.CorrelationId(), fetchID)
	}
	expectWhich(t, r, api.Frame_Which_fetchResponse)
	if fr, _ := r.f.FetchResponse(); len(r.tail) != 0 || (wireErr(fr.Error()) != api.CodeNone && wireErr(fr.Error()) != api.CodeShuttingDown) {
		t.Fatalf("fetch during shutdown: code %v, %d bytes", wireErr(fr.Error()), len(r.tail))
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("long poll not ended by Shutdown")
	}
	idle.expectClosed()
	lr := c.call(listTopicsReq, nil)
	expectWhich(t, lr, api.Frame_Which_errorResponse)
	if code := wireErr(lr.f.ErrorResponse()); code != api.CodeShuttingDown {
		t.Fatalf("request during shutdown: %v code %v, want SHUTTING_DOWN", lr.f.Which(), code)
	}
	select {
	case err := <-shutdownDone:
		t.Fatalf("Shutdown returned %v with a publish in flight", err)
	default:
	}
	// The held publish completes and is answered; then the connection
	// closes and Shutdown returns.
	close(gate)
	r = c.recv()
	expectWhich(t, r, api.Frame_Which_publishResponse)
	if p, err := r.f.PublishResponse(); err != nil || r.f.CorrelationId() != pubID || wireErr(p.Error()) != api.CodeNone {
		t.Fatalf("held publish: %v id %d", r.f.Which(), r.f.CorrelationId())
	}
	c.expectClosed()
	if err := <-shutdownDone; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-h.served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
	h.served <- ErrServerClosed // for the cleanup
}

func TestShutdownDeadlineForcesClose(t *testing.T) {
	b := newMemBroker()
	b.appendGate = make(chan struct{}) // never opened
	h := startServer(t, b, Options{})
	c, _ := connect(t, h.addr)
	c.createTopic("t", 1)
	bb := buildBatch(t, []byte("stuck"))
	c.send(publishReq("t", 0, len(bb)), bb)
	waitFor(t, "publish in flight", func() bool { return totalInFlight(h.srv) == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want DeadlineExceeded", err)
	}
	c.expectClosed()
}

func TestOptionsValidate(t *testing.T) {
	var o Options
	o.Defaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	bad := Options{MaxFrameBytes: 8, MaxInFlightPerConn: -1, MaxFetchWait: -1, HandshakeTimeout: -1}
	bad.Defaults()
	err := bad.Validate()
	for _, want := range []string{"MaxFrameBytes", "MaxInFlightPerConn", "MaxFetchWait", "HandshakeTimeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want a complaint about %s", err, want)
		}
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// panickyBroker panics in ListTopics, standing in for a bug.
type panickyBroker struct{ *memBroker }

func (panickyBroker) ListTopics() []engine.TopicInfo { panic("bug") }

func TestPanicInHandlerClosesOnlyThatConnection(t *testing.T) {
	h := startServer(t, panickyBroker{newMemBroker()}, Options{})
	other, _ := connect(t, h.addr)
	c, _ := connect(t, h.addr)
	r := c.call(listTopicsReq, nil)
	expectWhich(t, r, api.Frame_Which_errorResponse)
	if code := wireErr(r.f.ErrorResponse()); code != api.CodeUnknown {
		t.Fatalf("code %v, want UNKNOWN", code)
	}
	c.expectClosed()
	waitFor(t, "panic logged", func() bool { return len(h.logs.lines("panic serving a request", "bug")) == 1 })
	if p := other.createTopic("t", 1); wireErr(p.Error()) != api.CodeNone {
		t.Fatalf("other connection: %v", api.FromWire(mustWire(p.Error())))
	}
}

func TestListenAndServeAndClose(t *testing.T) {
	srv, err := New(newMemBroker(), Options{Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	waitFor(t, "listening", func() bool { return srv.Addr() != nil })
	c, _ := connect(t, srv.Addr().String())
	c.createTopic("t", 1)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("ListenAndServe: %v", err)
	}
	c.expectClosed()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(ln); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Close: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after Close: %v", err)
	}
}

// deadlineRecorder is a net.Conn that records the read deadlines set on it.
type deadlineRecorder struct {
	net.Conn
	mu        sync.Mutex
	deadlines []time.Time
}

func (d *deadlineRecorder) SetReadDeadline(t time.Time) error {
	d.mu.Lock()
	d.deadlines = append(d.deadlines, t)
	d.mu.Unlock()
	return d.Conn.SetReadDeadline(t)
}

// TestStopDuringCloseKeepsLinger: once a connection is closing (its reader
// ended, its responses written, the socket half-closed and drained for
// closeLinger), the stops Shutdown and the idle timer keep sending must not
// cut the drain short: a close with unread bytes resets the connection and
// can destroy responses the client has not read yet.
func TestStopDuringCloseKeepsLinger(t *testing.T) {
	h := startServer(t, newMemBroker(), Options{IdleTimeout: time.Nanosecond})
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	rec := &deadlineRecorder{Conn: a}
	c := newConn(h.srv, rec)
	// What serve does before closeGracefully.
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
	c.closeIfIdle() // Shutdown's poll
	c.checkIdle()   // the idle timer
	c.stopReading(errShutdown, slog.LevelDebug)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.deadlines) != 0 {
		t.Fatalf("read deadlines %v set on a closing connection, want none", rec.deadlines)
	}
	// Before the close began, the same stop does set one.
	c.mu.Lock()
	c.done = false
	c.mu.Unlock()
	rec.mu.Unlock()
	c.closeIfIdle()
	rec.mu.Lock()
	if len(rec.deadlines) != 1 || !rec.deadlines[0].Before(time.Now()) {
		t.Fatalf("read deadlines %v on an open idle connection, want one in the past", rec.deadlines)
	}
}
