package sdk

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// lossyConn is a client connection that loses the response to the first
// publish holding marker: once that publish is written, nothing more is
// read from the server; when cut is called (the test saw the record
// stored) the connection fails, as one whose response was lost.
type lossyConn struct {
	net.Conn
	marker []byte
	armed  *atomic.Bool // shared by the dials: only the first such publish
	writes *atomic.Int32
	hold   atomic.Bool
	cut    chan struct{}
	once   sync.Once
	onHold func(c *lossyConn)
}

func (c *lossyConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, c.marker) {
		c.writes.Add(1)
		if c.armed.CompareAndSwap(true, false) {
			c.hold.Store(true)
			defer c.onHold(c)
		}
	}
	return c.Conn.Write(p)
}

func (c *lossyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.hold.Load() {
		<-c.cut // the response is dropped
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *lossyConn) fail() {
	c.once.Do(func() {
		close(c.cut)
		c.Conn.Close()
	})
}

func (c *lossyConn) Close() error {
	c.fail()
	return nil
}

// TestIdempotentRetryAgainstTheServer: against a real node (engine and
// data plane), a publish whose response is lost after the node stored it
// is retried by the producer with the same producer id and sequence, and
// the node answers with the original offset: the record is stored once.
func TestIdempotentRetryAgainstTheServer(t *testing.T) {
	n := startFaultyNode(t)
	ctx := testCtx(t)
	admin, err := Dial(ctx, ClientConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, "t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	marker := []byte("lost-ack-record")
	var armed atomic.Bool
	var writes atomic.Int32
	stored := func() int {
		res, err := admin.Fetch(ctx, FetchRequest{Topic: "t", Offset: 0})
		if err != nil {
			return -1
		}
		k := 0
		for _, m := range res.Messages {
			if bytes.Equal(m.Value, marker) {
				k++
			}
		}
		return k
	}
	polled := make(chan error, 1)
	onHold := func(c *lossyConn) {
		go func() {
			defer c.fail()
			deadline := time.Now().Add(10 * time.Second)
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for stored() < 1 {
				if time.Now().After(deadline) {
					polled <- context.DeadlineExceeded
					return
				}
				<-tick.C
			}
			polled <- nil
		}()
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lossyConn{Conn: nc, marker: marker, armed: &armed, writes: &writes, cut: make(chan struct{}), onHold: onHold}, nil
	}
	p := newTestProducerAt(t, n.capnpAddr, func(c *ProducerConfig) { c.Dialer = dial })
	if _, err := p.Send(ctx, "t", nil, []byte("first")); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	ack, err := p.Send(ctx, "t", nil, marker)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-polled; err != nil {
		t.Fatalf("the first attempt was not stored: %v", err)
	}
	if w := writes.Load(); w < 2 {
		t.Fatalf("the publish was written %d times, want a retry", w)
	}
	if ack.Offset != 1 {
		t.Errorf("acknowledged at offset %d, want 1 (the first attempt's)", ack.Offset)
	}
	if k := stored(); k != 1 {
		t.Errorf("the record is stored %d times, want once", k)
	}
	res, err := admin.Fetch(ctx, FetchRequest{Topic: "t", Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, m := range res.Messages {
		vals = append(vals, string(m.Value))
	}
	if strings.Join(vals, ",") != "first,"+string(marker) {
		t.Errorf("partition holds %v", vals)
	}
	if len(res.Messages) > 0 {
		// Both batches carry the producer id the node granted.
		hs := fetchHeaders(t, admin, "t")
		if len(hs) != 2 || hs[0].ProducerID < 0 || hs[1].ProducerID != hs[0].ProducerID || hs[1].BaseSequence != 1 {
			t.Errorf("stored batch headers %+v, want one producer id, sequences 0 and 1", hs)
		}
	}
}

// fetchHeaders returns the headers of the batches of partition 0 of topic.
func fetchHeaders(t *testing.T, c *Client, topic string) []batch.Header {
	t.Helper()
	r, err := c.roundTripFetchRaw(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	var hs []batch.Header
	for len(r) > 0 {
		_, rest, h, err := batch.Split(r, 0)
		if err != nil {
			break
		}
		hs = append(hs, h)
		r = rest
	}
	return hs
}

// roundTripFetchRaw fetches partition 0 of topic from offset 0 and
// returns the raw batches of the response.
func (c *Client) roundTripFetchRaw(ctx context.Context, topic string) ([]byte, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		fr, err := f.NewFetchRequest()
		if err != nil {
			return err
		}
		fr.SetMaxBytes(DefaultFetchMaxBytes)
		return fr.SetTopic(topic)
	}, nil, c.Limits().MaxBatchBytes+DefaultFetchMaxBytes)
	if err != nil {
		return nil, err
	}
	return r.tail, nil
}

// newTestProducerAt is newTestProducer for a server at addr.
func newTestProducerAt(t testing.TB, addr string, mod ...func(*ProducerConfig)) *Producer {
	t.Helper()
	cfg := ProducerConfig{Addr: addr, ClientID: "test-producer", RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond,
		ReconnectBackoff: time.Millisecond, ReconnectBackoffMax: 10 * time.Millisecond}
	for _, f := range mod {
		f(&cfg)
	}
	p, err := NewProducer(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("NewProducer: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
