package sdk

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/seedqueue/sq/internal/testnet"
)

// shortTimeout is the connect bound of the tests that expect an error:
// small, so a test against a testnet.Silent listener is quick; the code under test
// must not depend on the value.
const shortTimeout = 300 * time.Millisecond

func TestIdentifySpeaker(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"http2 settings", []byte{0, 0, 6, 4, 0, 0, 0, 0, 0}, SpeaksHTTP2},
		{"http2 settings ack", []byte{0, 0, 0, 4, 1, 0, 0, 0, 0}, SpeaksHTTP2},
		{"http2 settings, reserved bit", []byte{0, 0, 18, 4, 0, 0x80, 0, 0, 0}, SpeaksHTTP2},
		{"http/1.1", []byte("HTTP/1.1 400 Bad Request\r\n"), SpeaksHTTP1},
		{"http/1.0", []byte("HTTP/1.0 200 OK"), SpeaksHTTP1},
		{"tls alert", []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46}, SpeaksTLS},
		{"tls handshake", []byte{0x16, 0x03, 0x01, 0x00, 0x7a}, SpeaksTLS},
		{"sq frame, one segment", []byte{0, 0, 0, 0, 12, 0, 0, 0, 0}, ""},
		{"sq frame, three segments", []byte{2, 0, 0, 0, 12, 0, 0, 0, 0}, ""},
		{"text", []byte("-ERR unknown command\r\n"), SpeaksUnknown},
		{"ssh banner", []byte("SSH-2.0-OpenSSH_9.6\r\n"), SpeaksSSH},
		{"one byte", []byte{'\n'}, SpeaksUnknown},
		{"too many segments", []byte{0, 2, 0, 0, 0, 0, 0, 0, 0}, SpeaksUnknown},
		{"http2 type, nonzero stream", []byte{0, 0, 6, 4, 0, 0, 0, 0, 1}, SpeaksUnknown},
	} {
		if got := identifySpeaker(tc.b); got != tc.want {
			t.Errorf("%s: identifySpeaker(%q) = %q, want %q", tc.name, tc.b, got, tc.want)
		}
	}
}

// grpcServer serves gRPC without SQ's services.
func grpcServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return ln.Addr().String()
}

func httpServer(t *testing.T, tls bool) string {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	var s *httptest.Server
	if tls {
		s = httptest.NewTLSServer(h)
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// tlsServer serves TLS the way OpenSSL-based servers do: a first record
// that is no ClientHello (an SQ frame, an HTTP request) makes it close the
// connection without a byte; only a TLS handshake gets an answer.
func tlsServer(t *testing.T) string {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	hs.StartTLS() // for its test certificate
	cert := hs.TLS.Certificates[0]
	hs.Close()
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	return testnet.Listen(t, func(nc net.Conn) {
		tc := tls.Server(nc, cfg)
		if tc.Handshake() == nil {
			testnet.Silent(tc)
		}
		nc.Close()
	})
}

// sshServer sends an SSH identification string and waits.
func sshServer(t *testing.T) string {
	return testnet.Listen(t, func(nc net.Conn) { _, _ = nc.Write([]byte("SSH-2.0-OpenSSH_9.6p1\r\n")); testnet.Silent(nc) })
}

func TestDialNamesTheProtocolThatAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addr  func(t *testing.T) string
		wants string
	}{
		{"gRPC (HTTP/2)", grpcServer, SpeaksHTTP2},
		{"HTTP/1.1", func(t *testing.T) string { return httpServer(t, false) }, SpeaksHTTP1},
		{"HTTPS", func(t *testing.T) string { return httpServer(t, true) }, SpeaksTLS},
		{"TLS alert", func(t *testing.T) string {
			return testnet.Listen(t, func(nc net.Conn) {
				_, _ = nc.Write([]byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46})
				testnet.Silent(nc)
			})
		}, SpeaksTLS},
		{"TLS, closing on a record that is no ClientHello", tlsServer, SpeaksTLS},
		{"SSH", sshServer, SpeaksSSH},
		{"garbage", func(t *testing.T) string {
			return testnet.Listen(t, func(nc net.Conn) { _, _ = nc.Write([]byte("+OK POP3 server ready\r\n")); testnet.Silent(nc) })
		}, SpeaksUnknown},
		{"garbage, then close", func(t *testing.T) string {
			return testnet.Listen(t, func(nc net.Conn) { _, _ = nc.Write([]byte("?")); nc.Close() })
		}, SpeaksUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr(t)
			// A generous timeout: each of these answers at once or within
			// probeDelayMax, and the error must not depend on the bound.
			_, err := Dial(testCtx(t), ClientConfig{Addr: addr, DialTimeout: 30 * time.Second})
			var wp *WrongProtocolError
			if !errors.As(err, &wp) || !errors.Is(err, ErrNotDataPlane) {
				t.Fatalf("Dial(%s): %v, want a *WrongProtocolError matching ErrNotDataPlane", addr, err)
			}
			if errors.Is(err, ErrConnection) || IsRetriable(err) || errors.Is(err, ErrNotControlPlane) {
				t.Errorf("Dial(%s): %v matches ErrConnection, ErrNotControlPlane or is retriable", addr, err)
			}
			if wp.Speaks != tc.wants || wp.Addr != addr {
				t.Errorf("Dial: Speaks %q Addr %q, want %q %q", wp.Speaks, wp.Addr, tc.wants, addr)
			}
			hint := ""
			if tc.wants == SpeaksTLS {
				hint = tlsHint
			}
			want := addr + " is not an SQ data plane (it speaks " + tc.wants + hint + "; the data plane is on port 6064 by default)"
			if err.Error() != "sdk: "+want {
				t.Errorf("error %q, want %q", err, "sdk: "+want)
			}
		})
	}
}

func TestDialSilentListenerTimesOut(t *testing.T) {
	addr := testnet.Listen(t, testnet.Silent)
	ctx, cancel := context.WithTimeout(testCtx(t), time.Minute) // guards against a hang only
	defer cancel()
	_, err := Dial(ctx, ClientConfig{Addr: addr, DialTimeout: shortTimeout})
	var te *ConnectTimeoutError
	if !errors.As(err, &te) || !errors.Is(err, ErrConnectTimeout) || !errors.Is(err, ErrConnection) {
		t.Fatalf("Dial to a testnet.Silent listener: %v, want a *ConnectTimeoutError (ErrConnectTimeout, ErrConnection)", err)
	}
	if te.Addr != addr || te.Timeout != shortTimeout || te.Stage != "handshake" {
		t.Errorf("ConnectTimeoutError %+v, want addr %s, timeout %v, stage handshake", te, addr, shortTimeout)
	}
	if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), shortTimeout.String()) {
		t.Errorf("error %q does not name %s and %v", err, addr, shortTimeout)
	}
	if ctx.Err() != nil {
		t.Fatalf("Dial returned only after the test's guard deadline")
	}
}

func TestDialClosedWithoutAnswer(t *testing.T) {
	addr := testnet.Listen(t, func(nc net.Conn) { nc.Close() })
	_, err := Dial(testCtx(t), ClientConfig{Addr: addr, DialTimeout: 30 * time.Second})
	if !errors.Is(err, ErrConnection) || errors.Is(err, ErrNotDataPlane) || errors.Is(err, ErrConnectTimeout) {
		t.Fatalf("Dial to a listener that closes: %v, want ErrConnection only", err)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("error %q does not name %s", err, addr)
	}
}

func TestDialCancelledDuringHandshake(t *testing.T) {
	addr := testnet.Listen(t, testnet.Silent)
	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := Dial(ctx, ClientConfig{Addr: addr, DialTimeout: time.Hour})
		errc <- err
	}()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Dial cancelled: %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Dial did not return after its context was cancelled")
	}
}

func TestAdminConnectNamesWhatAnswers(t *testing.T) {
	fake := newFakeServer(t)
	for _, tc := range []struct {
		name  string
		addr  func(t *testing.T) string
		wants string
	}{
		{"SQ data plane", func(*testing.T) string { return fake.addr }, SpeaksDataPlane},
		{"HTTP/1.1", func(t *testing.T) string { return httpServer(t, false) }, SpeaksHTTP1},
		{"gRPC without SQ", grpcServer, SpeaksGRPC},
		{"TLS, closing on a record that is no ClientHello", tlsServer, SpeaksTLS},
		{"SSH", sshServer, SpeaksSSH},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr(t)
			a, err := NewAdmin(AdminConfig{GrpcConfig: GrpcConfig{Addr: addr, ConnectTimeout: 30 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			err = a.Connect(testCtx(t))
			var wp *WrongProtocolError
			if !errors.As(err, &wp) || !errors.Is(err, ErrNotControlPlane) || errors.Is(err, ErrNotDataPlane) {
				t.Fatalf("Connect(%s): %v, want a *WrongProtocolError matching ErrNotControlPlane", addr, err)
			}
			hint := ""
			if tc.wants == SpeaksTLS {
				hint = tlsHint
			}
			want := "sdk: " + addr + " is not an SQ control plane (it speaks " + tc.wants + hint + "; the gRPC control plane is on port 6060 by default)"
			if err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
		})
	}
}

func TestAdminConnectSilentListenerTimesOut(t *testing.T) {
	addr := testnet.Listen(t, testnet.Silent)
	a, err := NewAdmin(AdminConfig{GrpcConfig: GrpcConfig{Addr: addr, ConnectTimeout: shortTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(testCtx(t), time.Minute) // guards against a hang only
	defer cancel()
	err = a.Connect(ctx)
	var te *ConnectTimeoutError
	if !errors.As(err, &te) || !errors.Is(err, ErrConnectTimeout) || !errors.Is(err, ErrConnection) {
		t.Fatalf("Connect to a testnet.Silent listener: %v, want a *ConnectTimeoutError", err)
	}
	if te.Addr != addr || te.Timeout != shortTimeout {
		t.Errorf("ConnectTimeoutError %+v, want addr %s, timeout %v", te, addr, shortTimeout)
	}
	if ctx.Err() != nil {
		t.Fatalf("Connect returned only after the test's guard deadline")
	}
}

func TestAdminConnectNothingListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a, err := NewAdmin(AdminConfig{GrpcConfig: GrpcConfig{Addr: addr, ConnectTimeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	err = a.Connect(testCtx(t))
	if !errors.Is(err, ErrConnection) || errors.Is(err, ErrConnectTimeout) || errors.Is(err, ErrNotControlPlane) {
		t.Fatalf("Connect with nothing listening: %v, want ErrConnection only", err)
	}
	if want := addr + ": dial tcp " + addr + ": connect: connection refused"; !strings.Contains(err.Error(), want) {
		t.Errorf("Connect with nothing listening: %q, want it to say %q", err, want)
	}
}

// TestAdminConnectNameDoesNotResolve: a host name that does not resolve is
// named with the resolver's answer, not gRPC's "produced zero addresses".
// (.invalid never resolves, RFC 6761 §6.4.)
func TestAdminConnectNameDoesNotResolve(t *testing.T) {
	const addr = "nosuchhost.invalid:6060"
	a, err := NewAdmin(AdminConfig{GrpcConfig: GrpcConfig{Addr: addr, ConnectTimeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	err = a.Connect(testCtx(t))
	if !errors.Is(err, ErrConnection) || errors.Is(err, ErrNotControlPlane) {
		t.Fatalf("Connect(%s): %v, want ErrConnection", addr, err)
	}
	if errors.Is(err, ErrConnectTimeout) {
		return // a resolver that does not answer at all: nothing more to check
	}
	if !strings.Contains(err.Error(), "lookup nosuchhost.invalid") || strings.Contains(err.Error(), "zero addresses") {
		t.Errorf("Connect(%s): %q, want the resolver's answer for nosuchhost.invalid", addr, err)
	}
}
