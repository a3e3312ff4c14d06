package main

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
)

// countingProxy forwards the connections it accepts to target and counts
// them; everything it started ends at the test's cleanup. It returns its
// address and the count so far.
func countingProxy(t *testing.T, target string) (string, func() int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		n     atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			track(in)
			track(out)
			wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), n.Load
}

// TestTopicCreateAndDescribeUseOneConnection: topic create (with and
// without --replication-factor) and topic describe (with its placement)
// each open one data-plane connection, the SDK's.
func TestTopicCreateAndDescribeUseOneConnection(t *testing.T) {
	addr, conns := countingProxy(t, serveEngine(t, func(e *engine.Engine) dataplane.Broker { return e }))
	for _, args := range [][]string{
		{"topic", "create", "a", "--partitions", "2", "--replication-factor", "1"},
		{"topic", "create", "b"},
		{"topic", "describe", "a"},
		{"topic", "describe", "a", "-f", "json"},
	} {
		before := conns()
		if _, err := runSQ(t, nil, append([]string{"--server", addr}, args...)...); err != nil {
			t.Fatalf("sq %v: %v", args, err)
		}
		if got := conns() - before; got != 1 {
			t.Errorf("sq %v opened %d data-plane connections, want 1", args, got)
		}
	}
}
