package dataplane

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// memConn is a net.Conn that reads a fixed byte stream and then io.EOF,
// and discards what is written. Deadlines are ignored.
type memConn struct {
	r       *bytes.Reader
	mu      sync.Mutex
	written int
}

func (c *memConn) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *memConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written += len(p)
	return len(p), nil
}
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{Port: 1} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// frameBytes encodes one request frame with its tail.
func frameBytes(t testing.TB, id uint64, build func(api.Frame) error, tail []byte) []byte {
	msg, f, err := api.NewFrameMessage(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := build(f); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := api.WriteFrame(&buf, msg, tail); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func handshakeReq(f api.Frame) error {
	h, err := f.NewHandshakeRequest()
	h.SetProtocolVersion(api.ProtocolVersion)
	return err
}

// FuzzServerFrame feeds arbitrary bytes to one connection of a server (after
// a valid handshake when withHandshake) and checks that the connection ends
// without a panic, recovered or not, and without hanging.
func FuzzServerFrame(f *testing.F) {
	bb := buildBatch(f, []byte("v"), []byte{})
	seeds := [][]byte{
		frameBytes(f, 1, listTopicsReq, nil),
		frameBytes(f, 2, metadataReq("t", "x"), nil),
		frameBytes(f, 3, createTopicReq("n", 2), nil),
		frameBytes(f, 4, describeTopicReq("t"), nil),
		frameBytes(f, 5, publishReq("t", 0, len(bb)), bb),
		frameBytes(f, 6, fetchReq("t", 0, 0, 100, 10), nil),
		frameBytes(f, 7, publishReq("t", 0, 10), nil)[:40],
		append(frameBytes(f, 8, publishReq("t", 0, len(bb)), bb), frameBytes(f, 9, fetchReq("t", 0, 0, 0, 0), nil)...),
		frameBytes(f, 10, handshakeReq, nil),
		bytes.Repeat([]byte{0xff}, 8),
		{0, 0, 0, 0, 0xff, 0xff, 0xff, 0x0f},
		{},
	}
	for _, s := range seeds {
		f.Add(s, true)
		f.Add(s, false)
	}
	hs := frameBytes(f, 0, handshakeReq, nil)
	f.Fuzz(func(t *testing.T, data []byte, withHandshake bool) {
		b := newMemBroker()
		if _, err := b.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
			t.Fatal(err)
		}
		logs := &logBuffer{}
		srv, err := New(b, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		stream := data
		if withHandshake {
			stream = append(append([]byte{}, hs...), data...)
		}
		c, _ := srv.newConn(&memConn{r: bytes.NewReader(stream)})
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer srv.connWG.Done()
			c.serve()
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("connection did not end after its stream did")
		}
		if out := logs.String(); strings.Contains(out, "panic") {
			t.Fatalf("server panicked:\n%s", out)
		}
		srv.Close()
	})
}
