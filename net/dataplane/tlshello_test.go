package dataplane

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// TestTLSClientHelloIsNamed: a TLS client of the plaintext data plane
// fails its handshake (the server closes the connection), and the
// server's log line says a TLS ClientHello arrived and how to fix it.
func TestTLSClientHelloIsNamed(t *testing.T) {
	h := startServer(t, openEngine(t), Options{})
	nc, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(time.Minute)) // guards against a hang only
	if err := tls.Client(nc, &tls.Config{ServerName: "localhost"}).Handshake(); err == nil {
		t.Fatal("a TLS handshake with the plaintext data plane succeeded")
	}
	waitFor(t, "the log line naming the ClientHello", func() bool {
		return len(h.logs.lines("TLS ClientHello", "--tls-cert")) == 1
	})
}
