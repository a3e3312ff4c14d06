package control_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
)

// Beyond MaxConnections a gRPC connection is closed as soon as it is
// accepted and counted; once a place is free a client is served again.
func TestGRPCMaxConnections(t *testing.T) {
	n := startNode(t, control.Options{MaxConnections: 1})
	first, err := net.Dial("tcp", n.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	for i := range 3 {
		extra, err := net.Dial("tcp", n.grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, extra); err != nil {
			t.Fatalf("connection %d beyond the limit: %v, want it closed by the server", i, err)
		}
		extra.Close()
	}
	if v := value(scrape(t, n), "sq_grpc_rejected_connections_total", nil); v != 3 {
		t.Fatalf("sq_grpc_rejected_connections_total = %v, want 3", v)
	}
	first.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eventually(t, "a gRPC call served once the place is free", func() bool {
		_, err := sqv1.NewTopicsClient(n.conn).ListTopics(ctx, &sqv1.ListTopicsRequest{})
		return err == nil
	})
}

// The server states its limit of concurrent calls per connection in its
// HTTP/2 SETTINGS frame (SETTINGS_MAX_CONCURRENT_STREAMS, id 3).
func TestGRPCMaxConcurrentStreams(t *testing.T) {
	n := startNode(t, control.Options{MaxConcurrentStreams: 7})
	nc, err := net.Dial("tcp", n.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	// Client preface, then an empty SETTINGS frame (RFC 9113 §3.4, §6.5).
	if _, err := nc.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	for {
		var hdr [9]byte
		if _, err := io.ReadFull(nc, hdr[:]); err != nil {
			t.Fatalf("no SETTINGS from the server: %v", err)
		}
		length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		payload := make([]byte, length)
		if _, err := io.ReadFull(nc, payload); err != nil {
			t.Fatal(err)
		}
		if hdr[3] != 4 || hdr[4]&1 != 0 { // not SETTINGS, or an ACK
			continue
		}
		for i := 0; i+6 <= len(payload); i += 6 {
			if binary.BigEndian.Uint16(payload[i:]) == 3 {
				if v := binary.BigEndian.Uint32(payload[i+2:]); v != 7 {
					t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want 7", v)
				}
				return
			}
		}
		t.Fatal("the server's SETTINGS state no SETTINGS_MAX_CONCURRENT_STREAMS")
	}
}

// dialGRPCFrom dials addr from the local IP address from (127.0.0.0/8 is
// all loopback on Linux), skipping the test where that cannot be done.
func dialGRPCFrom(t *testing.T, addr, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("dial from %s: %v (no such loopback address here)", from, err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return nc
}

// served reports whether the server speaks HTTP/2 on nc: it answers the
// client preface with a frame (its SETTINGS) rather than closing.
func served(t *testing.T, nc net.Conn) bool {
	t.Helper()
	if _, err := nc.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		return false
	}
	var hdr [9]byte
	_, err := io.ReadFull(nc, hdr[:])
	return err == nil
}

// Beyond MaxConnectionsPerIP a gRPC connection from that address is
// closed as soon as it is accepted and counted, while other addresses are
// served.
func TestGRPCMaxConnectionsPerIP(t *testing.T) {
	n := startNode(t, control.Options{MaxConnectionsPerIP: 2})
	for i := range 2 {
		if !served(t, dialGRPCFrom(t, n.grpcAddr, "127.0.0.2")) {
			t.Fatalf("connection %d of 127.0.0.2 not served with a bound of 2", i)
		}
	}
	for i := range 3 {
		if served(t, dialGRPCFrom(t, n.grpcAddr, "127.0.0.2")) {
			t.Fatalf("connection %d beyond the bound of 127.0.0.2 served", i)
		}
	}
	if !served(t, dialGRPCFrom(t, n.grpcAddr, "127.0.0.3")) {
		t.Fatal("another address not served")
	}
	m := scrape(t, n)
	if v := value(m, "sq_grpc_rejected_connections_per_ip_total", nil); v != 3 {
		t.Fatalf("sq_grpc_rejected_connections_per_ip_total = %v, want 3", v)
	}
	if v := value(m, "sq_grpc_rejected_connections_total", nil); v != 3 {
		t.Fatalf("sq_grpc_rejected_connections_total = %v, want 3", v)
	}
}
