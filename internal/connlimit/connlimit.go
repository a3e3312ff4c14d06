// Package connlimit counts open connections per client IP address, for
// the servers' --max-connections-per-ip (Kafka's max.connections.per.ip):
// the data plane and the gRPC control plane each keep one PerIP and close
// a connection accepted beyond it at once, before reading anything.
package connlimit

import (
	"net"
	"net/netip"
	"sync"
)

// PerIP counts the open connections of each remote IP address and refuses
// one more beyond its bound. The zero value and a nil *PerIP allow
// everything. It is safe for concurrent use.
type PerIP struct {
	max  int
	mu   sync.Mutex
	open map[netip.Addr]int
}

// NewPerIP returns a PerIP that allows at most max open connections per
// remote IP address; max <= 0 means no bound (nil is returned).
func NewPerIP(max int) *PerIP {
	if max <= 0 {
		return nil
	}
	return &PerIP{max: max, open: map[netip.Addr]int{}}
}

// Max returns the bound, 0 for none.
func (p *PerIP) Max() int {
	if p == nil {
		return 0
	}
	return p.max
}

// Acquire counts one more connection from addr's IP address (an IPv4
// address mapped into IPv6 counts as the IPv4 one) and returns the
// function that gives its place back (call it once, when the connection
// closes), or ok false, and nothing counted, when the address already has
// the bound open. An address that is not an IP (a Unix socket, a pipe in
// tests) is not bounded.
func (p *PerIP) Acquire(addr net.Addr) (release func(), ok bool) {
	if p == nil {
		return func() {}, true
	}
	ip, isIP := IP(addr)
	if !isIP {
		return func() {}, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open[ip] >= p.max {
		return nil, false
	}
	p.open[ip]++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.open[ip]--; p.open[ip] <= 0 {
				delete(p.open, ip)
			}
		})
	}, true
}

// Open returns the open connections counted for addr's IP address.
func (p *PerIP) Open(addr net.Addr) int {
	if p == nil {
		return 0
	}
	ip, ok := IP(addr)
	if !ok {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open[ip]
}

// IP returns the IP address of a TCP or UDP address (or of any address
// whose String is host:port with an IP host), unmapped from IPv6 and
// without a zone; ok is false for anything else.
func IP(addr net.Addr) (netip.Addr, bool) {
	switch a := addr.(type) {
	case nil:
		return netip.Addr{}, false
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip.Unmap().WithZone(""), ok
	case *net.UDPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip.Unmap().WithZone(""), ok
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}
