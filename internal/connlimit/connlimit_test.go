package connlimit

import (
	"net"
	"sync"
	"testing"
)

func tcp(ip string, port int) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: port} }

func TestPerIPBoundsEachAddress(t *testing.T) {
	p := NewPerIP(2)
	r1, ok1 := p.Acquire(tcp("10.0.0.1", 1))
	r2, ok2 := p.Acquire(tcp("10.0.0.1", 2))
	if !ok1 || !ok2 {
		t.Fatal("the first two connections of an address refused")
	}
	if _, ok := p.Acquire(tcp("10.0.0.1", 3)); ok {
		t.Fatal("a third connection of 10.0.0.1 accepted with a bound of 2")
	}
	// The IPv4-mapped IPv6 form is the same address.
	if _, ok := p.Acquire(tcp("::ffff:10.0.0.1", 4)); ok {
		t.Fatal("::ffff:10.0.0.1 counted apart from 10.0.0.1")
	}
	if _, ok := p.Acquire(tcp("10.0.0.2", 1)); !ok {
		t.Fatal("another address refused")
	}
	r1()
	r1() // a second release changes nothing
	if got := p.Open(tcp("10.0.0.1", 0)); got != 1 {
		t.Fatalf("open after one release (twice): %d, want 1", got)
	}
	r3, ok := p.Acquire(tcp("10.0.0.1", 5))
	if !ok {
		t.Fatal("a place given back was not reusable")
	}
	r2()
	r3()
	if got := p.Open(tcp("10.0.0.1", 0)); got != 0 {
		t.Fatalf("open after every release: %d", got)
	}
	if len(p.open) != 1 { // 10.0.0.2 only
		t.Fatalf("addresses kept: %v", p.open)
	}
}

func TestPerIPUnbounded(t *testing.T) {
	for _, p := range []*PerIP{NewPerIP(0), NewPerIP(-1), nil} {
		for i := range 100 {
			if _, ok := p.Acquire(tcp("10.0.0.1", i)); !ok {
				t.Fatalf("unbounded PerIP refused connection %d", i)
			}
		}
		if p.Max() != 0 {
			t.Fatalf("Max of an unbounded PerIP: %d", p.Max())
		}
	}
	p := NewPerIP(1)
	for range 3 {
		if _, ok := p.Acquire(&net.UnixAddr{Name: "/tmp/s", Net: "unix"}); !ok {
			t.Fatal("a non-IP address was bounded")
		}
	}
}

func TestPerIPConcurrent(t *testing.T) {
	p := NewPerIP(5)
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	var releases []func()
	for i := range 50 {
		wg.Go(func() {
			if r, ok := p.Acquire(tcp("192.0.2.7", i)); ok {
				mu.Lock()
				accepted++
				releases = append(releases, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if accepted != 5 {
		t.Fatalf("%d of 50 concurrent connections accepted, want 5", accepted)
	}
	for _, r := range releases {
		r()
	}
	if got := p.Open(tcp("192.0.2.7", 0)); got != 0 {
		t.Fatalf("open after releases: %d", got)
	}
}

func TestIP(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
		ok   bool
	}{
		{tcp("127.0.0.1", 80), "127.0.0.1", true},
		{tcp("::1", 80), "::1", true},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}, "fe80::1", true},
		{&net.UnixAddr{Name: "/x", Net: "unix"}, "", false},
		{nil, "", false},
	} {
		ip, ok := IP(tc.addr)
		if ok != tc.ok || (ok && ip.String() != tc.want) {
			t.Errorf("IP(%v) = %v %v, want %s %v", tc.addr, ip, ok, tc.want, tc.ok)
		}
	}
}
