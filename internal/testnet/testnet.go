// Package testnet holds network helpers shared by the tests of several
// packages: listeners on 127.0.0.1 that answer as something other than an
// SQ server (or not at all), stopped when the test ends.
package testnet

import (
	"net"
	"sync"
	"testing"
)

// Listen accepts connections on 127.0.0.1 (a free port) and runs handle on
// each, in its own goroutine, until the test ends; it returns the
// listener's address. When the test ends the listener and every accepted
// connection are closed and Listen waits for the handlers to return, so a
// handler must return once its connection is closed.
func Listen(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() { handle(nc) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// Silent reads and drops what the client sends and never answers; it
// returns when the connection is closed.
func Silent(nc net.Conn) {
	buf := make([]byte, 4096)
	for {
		if _, err := nc.Read(buf); err != nil {
			return
		}
	}
}

// SilentListener is Listen with Silent: a listener that accepts
// connections and never answers, as a hung server or a wrong address can.
func SilentListener(t testing.TB) string {
	t.Helper()
	return Listen(t, Silent)
}

// FreeGossipAddr is FreeAddr for a gossip listener, which takes both the
// TCP and the UDP port: the port returned was free for both a moment ago.
func FreeGossipAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err == nil {
			pc.Close()
			return addr
		}
	}
	t.Fatal("testnet: no loopback port free for both TCP and UDP in 100 tries")
	return ""
}

// FreeAddr returns a loopback address (127.0.0.1:port) whose port was free
// a moment ago: nothing listens there, so a dial is refused, and a server
// started later may listen on it (another process could take the port in
// between; tests use it only on loopback).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
