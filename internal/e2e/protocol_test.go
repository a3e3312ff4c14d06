package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/sdk"
)

// rawClient speaks the data plane frame by frame, to send what the SDK
// never sends.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	fr *api.FrameReader
}

func newRawClient(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc := dialRaw(t, addr)
	return &rawClient{t: t, nc: nc, fr: api.NewFrameReader(nc, api.DefaultMaxFrameBytes, api.DefaultMaxBatchBytes)}
}

// send writes one frame built by fill, followed by tail.
func (c *rawClient) send(id uint64, fill func(api.Frame) error, tail ...[]byte) {
	c.t.Helper()
	msg, f, err := api.NewFrameMessage(id)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := fill(f); err != nil {
		c.t.Fatal(err)
	}
	if err := api.WriteFrame(c.nc, msg, tail...); err != nil {
		c.t.Fatal(err)
	}
}

// recv reads one frame and its tail; err is set when the server closed the
// connection instead.
func (c *rawClient) recv() (api.Frame, error) {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(disconnectTimeout))
	_, f, err := c.fr.ReadFrame()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatalf("no frame and no disconnect within %v", disconnectTimeout)
	}
	if err != nil {
		return api.Frame{}, err
	}
	if _, err := c.fr.ReadTail(api.TailLength(f), nil); err != nil {
		return api.Frame{}, err
	}
	return f, nil
}

// handshake performs the handshake with protocol version v and returns the
// response's error.
func (c *rawClient) handshake(v uint16) error {
	c.t.Helper()
	c.send(1, func(f api.Frame) error {
		h, err := f.NewHandshakeRequest()
		if err != nil {
			return err
		}
		h.SetProtocolVersion(v)
		return h.SetClientId("e2e-raw")
	})
	f, err := c.recv()
	if err != nil {
		return err
	}
	if f.Which() != api.Frame_Which_handshakeResponse {
		if f.Which() == api.Frame_Which_errorResponse {
			we, _ := f.ErrorResponse()
			return api.FromWire(we)
		}
		c.t.Fatalf("handshake answered with %v", f.Which())
	}
	h, _ := f.HandshakeResponse()
	we, _ := h.Error()
	return api.FromWire(we)
}

// publish sends a publish request declaring recordsLength, followed by tail,
// and returns the response's error (or the disconnect).
func (c *rawClient) publish(id uint64, topic string, recordsLength uint32, tail []byte) error {
	c.t.Helper()
	c.send(id, func(f api.Frame) error {
		p, err := f.NewPublishRequest()
		if err != nil {
			return err
		}
		p.SetRecordsLength(recordsLength)
		return p.SetTopic(topic)
	}, tail)
	f, err := c.recv()
	if err != nil {
		return err
	}
	switch f.Which() {
	case api.Frame_Which_publishResponse:
		r, _ := f.PublishResponse()
		we, _ := r.Error()
		return api.FromWire(we)
	case api.Frame_Which_errorResponse:
		we, _ := f.ErrorResponse()
		return api.FromWire(we)
	}
	c.t.Fatalf("publish answered with %v", f.Which())
	return nil
}

// TestProtocolAbuse sends well-framed but wrong requests: an unsupported
// protocol version, a corrupt batch, and a records tail far over the limit
// that is never sent. Each gets its catalog error or a closed connection,
// and the server keeps serving.
func TestProtocolAbuse(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := startServer(t, t.TempDir())
	sqOK(t, srv.addr, nil, "topic", "create", "p", "--partitions", "1")
	client, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	alive := func(t *testing.T) {
		t.Helper()
		if _, err := client.DescribeTopic(ctx, "p"); err != nil || !srv.running() {
			t.Fatalf("server no longer serves (running %v): %v; log:\n%s", srv.running(), err, srv.log)
		}
	}

	t.Run("unsupported version", func(t *testing.T) {
		c := newRawClient(t, srv.addr)
		if err := c.handshake(api.ProtocolVersion + 99); !errors.Is(err, api.ErrUnsupportedVersion) {
			t.Errorf("handshake with version %d: %v, want UNSUPPORTED_VERSION", api.ProtocolVersion+99, err)
		}
		alive(t)
	})

	t.Run("corrupt batch", func(t *testing.T) {
		c := newRawClient(t, srv.addr)
		if err := c.handshake(api.ProtocolVersion); err != nil {
			t.Fatal(err)
		}
		garbage := make([]byte, 200)
		for i := range garbage {
			garbage[i] = byte(i * 7)
		}
		err := c.publish(2, "p", uint32(len(garbage)), garbage)
		if !errors.Is(err, api.ErrCorruptBatch) && !isDisconnect(err) {
			t.Errorf("publish of 200 garbage bytes: %v, want CORRUPT_BATCH or a closed connection", err)
		}
		alive(t)
	})

	t.Run("records tail over the limit", func(t *testing.T) {
		c := newRawClient(t, srv.addr)
		if err := c.handshake(api.ProtocolVersion); err != nil {
			t.Fatal(err)
		}
		// Declares 4 GiB - 1 and sends none of it: the server must refuse
		// at once, not allocate or wait for the bytes.
		err := c.publish(2, "p", ^uint32(0), nil)
		if !errors.Is(err, api.ErrMessageTooLarge) && !isDisconnect(err) {
			t.Errorf("publish declaring a 4 GiB tail: %v, want MESSAGE_TOO_LARGE or a closed connection", err)
		}
		alive(t)
	})

	t.Run("fetch beyond the high watermark", func(t *testing.T) {
		// The valid range of an empty partition is [0, 0], which
		// api.FromWire cannot tell from "no range" (HasRange false), so
		// only the code is checked here and the range on a non-empty one.
		_, err := client.Fetch(ctx, sdk.FetchRequest{Topic: "p", Partition: 0, Offset: 1000})
		var e *api.Error
		if !errors.As(err, &e) || e.Code != api.CodeOffsetOutOfRange || e.RangeStart != 0 || e.RangeEnd != 0 {
			t.Errorf("fetch at 1000 of an empty partition: %v, want OFFSET_OUT_OF_RANGE [0, 0]", err)
		}
		sqOK(t, srv.addr, []byte("1\n2\n3\n"), "produce", "--topic", "p")
		_, err = client.Fetch(ctx, sdk.FetchRequest{Topic: "p", Partition: 0, Offset: 1000})
		if !errors.As(err, &e) || e.Code != api.CodeOffsetOutOfRange || !e.HasRange || e.RangeStart != 0 || e.RangeEnd != 3 {
			t.Errorf("fetch at 1000 of a partition with 3 records: %v, want OFFSET_OUT_OF_RANGE with the range [0, 3]", err)
		}
		_, err = client.Fetch(ctx, sdk.FetchRequest{Topic: "p", Partition: 7, Offset: 0})
		if !errors.Is(err, api.ErrUnknownPartition) {
			t.Errorf("fetch of partition 7: %v, want UNKNOWN_PARTITION", err)
		}
		alive(t)
	})
}

// isDisconnect reports whether err is the server closing the connection.
func isDisconnect(err error) bool {
	var oe *net.OpError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &oe)
}
