package e2e

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCLIConsumeInterruptedWhileConnecting: Ctrl-C while sq consume waits
// for the handshake of a listener that never answers stops it at once,
// with the summary line and status 130, in every mode.
func TestCLIConsumeInterruptedWhileConnecting(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- nc
		}
	})
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, nc := range conns {
			nc.Close()
		}
	})
	for _, mode := range [][]string{nil, {"--follow"}, {"-g", "g"}, {"-g", "g", "--follow"}} {
		args := append([]string{"--timeout", "10m", "consume", "-t", "orders"}, mode...)
		p := startCLI(t, ln.Addr().String(), nil, args...)
		select {
		case nc := <-accepted: // connected: the handshake waits for an answer
			conns = append(conns, nc)
		case <-time.After(consumeWait):
			t.Fatalf("sq %v did not connect within %v", args, consumeWait)
		}
		if code := p.interrupt(t); code != 130 {
			t.Errorf("sq %v: status %d after SIGINT, want 130; stderr:\n%s", args, code, p.stderr)
		}
		if want := "sq: interrupted: printed 0 records of orders"; !strings.Contains(p.stderr.String(), want) {
			t.Errorf("sq %v: stderr %q, want the summary %q", args, p.stderr, want)
		}
	}
}
