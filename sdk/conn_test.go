package sdk

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// scriptConn is a net.Conn whose writes succeed okWrites times and then
// fail with ECONNRESET; its reads block until gate is closed and then
// return replies, then EOF. It stages a server that answered the requests
// it read and then closed while the client was still writing: the failed
// write is seen before the responses are read.
type scriptConn struct {
	okWrites int
	replies  *bytes.Reader

	mu        sync.Mutex
	writes    int
	gate      chan struct{} // reads wait for it
	closeOnce sync.Once
	closed    chan struct{}
}

func newScriptConn(okWrites int, replies []byte) *scriptConn {
	return &scriptConn{okWrites: okWrites, replies: bytes.NewReader(replies),
		gate: make(chan struct{}), closed: make(chan struct{})}
}

func (s *scriptConn) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.writes <= s.okWrites {
		return len(p), nil
	}
	return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
}

func (s *scriptConn) Read(p []byte) (int, error) {
	select {
	case <-s.gate:
	case <-s.closed:
		return 0, net.ErrClosed
	}
	return s.replies.Read(p)
}

func (s *scriptConn) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

func (s *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (s *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (s *scriptConn) SetDeadline(time.Time) error      { return nil }
func (s *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (s *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// publishReply encodes the publish response to correlation id id.
func publishReply(t *testing.T, id, baseOffset uint64) []byte {
	t.Helper()
	msg, f, err := api.NewFrameMessage(id)
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.NewPublishResponse()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetTopic("t"); err != nil {
		t.Fatal(err)
	}
	r.SetBaseOffset(baseOffset)
	r.SetRecordCount(1)
	var b bytes.Buffer
	if err := api.WriteFrame(&b, msg); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func buildPublish(f api.Frame) error {
	r, err := f.NewPublishRequest()
	if err != nil {
		return err
	}
	r.SetRecordsLength(1)
	return r.SetTopic("t")
}

// TestWriteFailureKeepsWrittenResponses: when a write fails after earlier
// requests were written, the earlier requests still get the responses the
// server sent for them (they were carried out: failing them would report a
// stored batch as lost), the request being written fails with
// ErrConnection, new requests fail at once, and the connection ends once
// nothing is left to read.
func TestWriteFailureKeepsWrittenResponses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Two requests written; responses to both are queued behind the failure.
	replies := append(publishReply(t, 1, 40), publishReply(t, 2, 41)...)
	// Each request is two writes here (frame, then tail: net.Buffers on a
	// conn without writev).
	sc := newScriptConn(4, replies)
	cn := startConn(sc, bufio.NewReader(sc), Limits{MaxInFlight: 8}.withDefaults(), slog.New(slog.DiscardHandler))
	defer cn.close(errors.New("test over"))
	// The responses become readable once the connection has handled the
	// failed write.
	go func() {
		select {
		case <-cn.wdone:
		case <-cn.done:
		}
		close(sc.gate)
	}()

	var calls []*call
	for range 2 {
		cl, err := cn.start(ctx, buildPublish, []byte{0}, 0)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, cl)
	}
	// The third write fails.
	if _, err := cn.roundTrip(ctx, buildPublish, []byte{0}, 0); !errors.Is(err, ErrConnection) || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("request whose write failed: %v, want ErrConnection wrapping ECONNRESET", err)
	}
	if !cn.broken() {
		t.Fatal("connection not broken after a failed write")
	}
	if _, err := cn.start(ctx, buildPublish, []byte{0}, 0); !errors.Is(err, ErrConnection) {
		t.Fatalf("request after the failed write: %v, want ErrConnection", err)
	}
	for i, cl := range calls {
		select {
		case r := <-cl.ch:
			if r.err != nil {
				t.Fatalf("request %d written before the failure: %v, want its response", i+1, r.err)
			}
			res, err := decodePublish(r, "t", 0)
			if err != nil || res.BaseOffset != uint64(40+i) {
				t.Fatalf("request %d: %+v, %v; want base offset %d", i+1, res, err, 40+i)
			}
		case <-ctx.Done():
			t.Fatalf("request %d: no response", i+1)
		}
	}
	select {
	case <-cn.done:
	case <-ctx.Done():
		t.Fatal("the connection did not end once every written request was answered")
	}
}
