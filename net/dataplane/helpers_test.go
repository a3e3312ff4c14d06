package dataplane

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// TestMain fails the run when a goroutine of this module outlives the
// tests: every test must stop its servers and connections.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitNoLeaks(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// waitNoLeaks polls until no goroutine other than the caller runs code of
// this module, and returns the stacks of those still running at timeout.
func waitNoLeaks(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "github.com/seedqueue/sq/") && !strings.Contains(g, "dataplane.TestMain") &&
				!strings.Contains(g, "dataplane.waitNoLeaks") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// logBuffer is a concurrency-safe sink for the server's slog output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// lines returns the log lines that contain every one of subs.
func (l *logBuffer) lines(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// harness is a running server on 127.0.0.1:0.
type harness struct {
	srv    *Server
	addr   string
	logs   *logBuffer
	served chan error
}

// startServer serves broker on a loopback port until the test ends; each
// setup changes the server before it serves.
func startServer(t testing.TB, broker Broker, opts Options, setup ...func(*Server)) *harness {
	t.Helper()
	logs := &logBuffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if opts.NodeID == "" {
		opts.NodeID = "node-1"
	}
	if opts.ServerVersion == "" {
		opts.ServerVersion = "test"
	}
	srv, err := New(broker, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(srv) // before Serve: its goroutines see the change
	}
	h := &harness{srv: srv, addr: ln.Addr().String(), logs: logs, served: make(chan error, 1)}
	go func() { h.served <- srv.Serve(ln) }()
	waitFor(t, "server listening", func() bool { return srv.Addr() != nil })
	t.Cleanup(func() {
		srv.Close()
		if err := <-h.served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return h
}

// testClient is a minimal data-plane client speaking raw frames.
type testClient struct {
	t    testing.TB
	nc   net.Conn
	fr   *api.FrameReader
	next uint64
}

func dialClient(t testing.TB, addr string) *testClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &testClient{t: t, nc: nc, fr: api.NewFrameReader(nc, 16<<20, 64<<20), next: 1}
}

// connect dials and completes the handshake.
func connect(t testing.TB, addr string) (*testClient, api.HandshakeResponse) {
	t.Helper()
	c := dialClient(t, addr)
	return c, c.handshake(api.ProtocolVersion)
}

// send writes one request frame built by build, with tail, and returns its
// correlation id.
func (c *testClient) send(build func(api.Frame) error, tail []byte) uint64 {
	c.t.Helper()
	id := c.next
	c.next++
	msg, f, err := api.NewFrameMessage(id)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := build(f); err != nil {
		c.t.Fatal(err)
	}
	if err := api.WriteFrame(c.nc, msg, tail); err != nil {
		c.t.Fatalf("write frame: %v", err)
	}
	return id
}

// reply is one response frame with its records tail.
type reply struct {
	msg  *capnp.Message
	f    api.Frame
	tail []byte
}

// recv reads the next response frame, failing the test after 10 s.
func (c *testClient) recv() reply {
	c.t.Helper()
	r, err := c.tryRecv()
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	return r
}

func (c *testClient) tryRecv() (reply, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	msg, f, err := c.fr.ReadFrame()
	if err != nil {
		return reply{}, err
	}
	tail, err := c.fr.ReadTail(api.TailLength(f), nil)
	if err != nil {
		return reply{}, err
	}
	return reply{msg: msg, f: f, tail: tail}, nil
}

// call sends one request and reads its response, which must carry the
// request's correlation id.
func (c *testClient) call(build func(api.Frame) error, tail []byte) reply {
	c.t.Helper()
	id := c.send(build, tail)
	r := c.recv()
	if got := r.f.CorrelationId(); got != id {
		c.t.Fatalf("response correlationId %d, want %d", got, id)
	}
	return r
}

func (c *testClient) handshake(version uint16) api.HandshakeResponse {
	c.t.Helper()
	r := c.call(func(f api.Frame) error {
		h, err := f.NewHandshakeRequest()
		if err != nil {
			return err
		}
		h.SetProtocolVersion(version)
		return h.SetClientId("test-client")
	}, nil)
	if r.f.Which() != api.Frame_Which_handshakeResponse {
		c.t.Fatalf("handshake answered with %v", r.f.Which())
	}
	h, err := r.f.HandshakeResponse()
	if err != nil {
		c.t.Fatal(err)
	}
	return h
}

// expectClosed reads until the server closes the connection, failing if
// it stays open for 10 s. Frames read on the way are returned.
func (c *testClient) expectClosed() []reply {
	c.t.Helper()
	var got []reply
	for {
		r, err := c.tryRecv()
		if err == nil {
			got = append(got, r)
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.t.Fatal("connection still open after 10 s")
		}
		return got
	}
}

// Request builders.

func createTopicReq(name string, partitions uint32) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewCreateTopicRequest()
		if err != nil {
			return err
		}
		r.SetPartitions(partitions)
		return r.SetName(name)
	}
}

func describeTopicReq(name string) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewDescribeTopicRequest()
		if err != nil {
			return err
		}
		return r.SetName(name)
	}
}

func listTopicsReq(f api.Frame) error {
	_, err := f.NewListTopicsRequest()
	return err
}

func metadataReq(topics ...string) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewMetadataRequest()
		if err != nil || len(topics) == 0 {
			return err
		}
		l, err := r.NewTopics(int32(len(topics)))
		if err != nil {
			return err
		}
		for i, t := range topics {
			if err := l.Set(i, t); err != nil {
				return err
			}
		}
		return nil
	}
}

func publishReq(topic string, partition uint32, recordsLength int) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewPublishRequest()
		if err != nil {
			return err
		}
		r.SetPartition(partition)
		r.SetRecordsLength(uint32(recordsLength))
		return r.SetTopic(topic)
	}
}

func fetchReq(topic string, partition uint32, offset uint64, maxBytes, maxWaitMs uint32) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewFetchRequest()
		if err != nil {
			return err
		}
		r.SetPartition(partition)
		r.SetOffset(offset)
		r.SetMaxBytes(maxBytes)
		r.SetMaxWaitMs(maxWaitMs)
		return r.SetTopic(topic)
	}
}

// buildBatch returns a batch of the given values (keys nil).
func buildBatch(t testing.TB, values ...[]byte) []byte {
	t.Helper()
	var b batch.Builder
	for _, v := range values {
		b.Add(nil, v, nil, 0)
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// expectWhich fails the test unless r is a w frame (the generated getters
// panic on the wrong union member).
func expectWhich(t testing.TB, r reply, w api.Frame_Which) {
	t.Helper()
	if got := r.f.Which(); got != w {
		msg := ""
		if got == api.Frame_Which_errorResponse {
			msg = fmt.Sprint(api.FromWire(mustWire(r.f.ErrorResponse())))
		}
		t.Fatalf("answered with %v %s, want %v", got, msg, w)
	}
}

// wireErr returns the catalog code of a response's error field (0: none).
func wireErr(w api.WireError, err error) api.Code {
	if err != nil || !w.IsValid() {
		return api.CodeNone
	}
	return api.Code(w.Code())
}

// publish sends one batch and returns the publish response.
func (c *testClient) publish(topic string, partition uint32, b []byte) api.PublishResponse {
	c.t.Helper()
	r := c.call(publishReq(topic, partition, len(b)), b)
	expectWhich(c.t, r, api.Frame_Which_publishResponse)
	p, err := r.f.PublishResponse()
	if err != nil {
		c.t.Fatalf("publish answered with %v: %v", r.f.Which(), err)
	}
	return p
}

// fetch sends one fetch and returns the response and its tail.
func (c *testClient) fetch(topic string, partition uint32, offset uint64, maxBytes, maxWaitMs uint32) (api.FetchResponse, []byte) {
	c.t.Helper()
	r := c.call(fetchReq(topic, partition, offset, maxBytes, maxWaitMs), nil)
	expectWhich(c.t, r, api.Frame_Which_fetchResponse)
	p, err := r.f.FetchResponse()
	if err != nil {
		c.t.Fatalf("fetch answered with %v: %v", r.f.Which(), err)
	}
	return p, r.tail
}

func (c *testClient) createTopic(name string, partitions uint32) api.CreateTopicResponse {
	c.t.Helper()
	r := c.call(createTopicReq(name, partitions), nil)
	expectWhich(c.t, r, api.Frame_Which_createTopicResponse)
	p, err := r.f.CreateTopicResponse()
	if err != nil {
		c.t.Fatalf("createTopic answered with %v: %v", r.f.Which(), err)
	}
	return p
}
