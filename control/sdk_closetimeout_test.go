package control_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/sdk"
)

// frozenProxy forwards TCP connections to a backend until frozen: from
// then on it keeps every connection open and drops what either side
// sends, as a server that was SIGSTOPped looks to its clients.
type frozenProxy struct {
	addr    string
	ln      net.Listener
	frozen  atomic.Bool
	dropped atomic.Int64 // bytes dropped since frozen

	shutOnce sync.Once
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

func startFrozenProxy(t *testing.T, backend string) *frozenProxy {
	t.Helper()
	ln := listen(t)
	p := &frozenProxy{addr: ln.Addr().String(), ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			bc, err := net.Dial("tcp", backend)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, bc)
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(bc, c) })
			p.wg.Go(func() { p.pipe(c, bc) })
		}
	})
	t.Cleanup(func() {
		p.shut()
		p.wg.Wait()
	})
	return p
}

// shut closes the listener and every connection, once.
func (p *frozenProxy) shut() {
	p.shutOnce.Do(func() {
		p.ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
}

func (p *frozenProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.frozen.Load() {
				p.dropped.Add(int64(n))
			} else if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// GrpcConsumer.Close is bounded by CloseTimeout, not RequestTimeout (an
// hour here): against a server that froze, its final commit is sent and
// not answered, and Close returns a *sdk.CloseCommitError naming every
// partition whose position was not stored, wrapping
// context.DeadlineExceeded; the group has no offset. Against a server
// that answers, Close (and CloseContext) commit and return nil.
func TestGrpcConsumerCloseBounded(t *testing.T) {
	for _, frozen := range []bool{true, false} {
		n := startNode(t, control.Options{NodeID: "n1"})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		direct := sdk.GrpcConfig{Addr: n.grpcAddr}
		admin, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: direct})
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if _, err := admin.CreateTopic(ctx, "t", 2, sdk.TopicConfig{}); err != nil {
			t.Fatal(err)
		}
		p, err := sdk.NewGrpcProducer(sdk.GrpcProducerConfig{GrpcConfig: direct})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			if _, err := p.Send(ctx, "t", fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		p.Close()

		px := startFrozenProxy(t, n.grpcAddr)
		c, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: px.addr, RequestTimeout: time.Hour},
			Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Hour, MaxWait: 50 * time.Millisecond,
			CloseTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			px.shut() // a Close still waiting for the frozen server fails now
			c.Close()
		})
		want := map[uint32]uint64{}
		for got := 0; got < 6; {
			msgs, err := c.Poll(ctx)
			if err != nil {
				t.Fatalf("Poll: %v", err)
			}
			for _, m := range msgs {
				want[m.Partition] = max(want[m.Partition], m.Offset+1)
			}
			got += len(msgs)
		}
		px.frozen.Store(frozen)
		done := make(chan error, 1)
		go func() {
			if frozen {
				done <- c.Close()
				return
			}
			cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer ccancel()
			done <- c.CloseContext(cctx)
		}()
		err = endsBy(t, "Close", done)
		committed := map[uint32]uint64{}
		d, derr := n.eng.DescribeGroup("g")
		if derr == nil {
			for _, o := range d.Offsets {
				if o.CommittedOffset >= 0 {
					committed[uint32(o.Partition)] = uint64(o.CommittedOffset)
				}
			}
		}
		if !frozen {
			if err != nil || !maps.Equal(committed, want) {
				t.Fatalf("Close: %v; committed %v, want nil and %v", err, committed, want)
			}
			continue
		}
		var ce *sdk.CloseCommitError
		if !errors.As(err, &ce) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close: %v, want a *sdk.CloseCommitError wrapping context.DeadlineExceeded", err)
		}
		if !maps.Equal(ce.Positions, want) || px.dropped.Load() == 0 {
			t.Fatalf("positions not committed %v (%d bytes sent to the frozen server), want %v and the commit sent", ce.Positions, px.dropped.Load(), want)
		}
		if len(committed) != 0 {
			t.Fatalf("the group has offsets %v, want none", committed)
		}
	}
}
