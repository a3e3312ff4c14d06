package testnet

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections on 127.0.0.1 to a backend until Freeze:
// from then on it keeps every connection open and drops what either side
// sends, as a server that was SIGSTOPped looks to its clients. It stops
// when the test ends.
type Proxy struct {
	// Addr is where clients connect (127.0.0.1:port).
	Addr string

	ln       net.Listener
	frozen   atomic.Bool
	dropped  atomic.Int64
	shutOnce sync.Once
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

// StartProxy starts a Proxy to backend (host:port). A connection the
// backend refuses is closed.
func StartProxy(t testing.TB, backend string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln}
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
		p.Close()
		p.wg.Wait()
	})
	return p
}

// Freeze makes the proxy drop, from now on, every byte either side sends,
// with every connection kept open.
func (p *Proxy) Freeze() { p.frozen.Store(true) }

// Dropped returns the number of bytes dropped since Freeze: more than 0
// once a client sent a request to the frozen server.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Close closes the listener and every connection, once: a client still
// waiting for the frozen server fails at once. The end of the test closes
// it too.
func (p *Proxy) Close() {
	p.shutOnce.Do(func() {
		p.ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
}

// pipe copies src to dst, or drops what src sends while frozen.
func (p *Proxy) pipe(dst, src net.Conn) {
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
