package sdk

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// Errors of connecting to the wrong address or to an address that does not
// answer. Test them with errors.Is; errors.As gives the details
// (*WrongProtocolError, *ConnectTimeoutError).
var (
	// ErrNotDataPlane is matched by a *WrongProtocolError from Dial (and
	// from the Producer and Consumer, which dial the same way) when the
	// address answered the handshake in another protocol: HTTP/2 (the gRPC
	// control plane, port 6060 by default), HTTP/1.x (the metrics and
	// health port, 6062), TLS, or bytes that are no SQ frame. It is
	// permanent: redialing the same address does not help.
	ErrNotDataPlane = errors.New("sdk: not an SQ data plane")

	// ErrNotControlPlane is matched by a *WrongProtocolError from
	// Admin.Connect when the address is not SQ's gRPC control plane: the
	// Cap'n Proto data plane (port 6064 by default), HTTP/1.x, TLS, a gRPC
	// server without SQ's services, or anything else. It is permanent.
	ErrNotControlPlane = errors.New("sdk: not an SQ control plane")

	// ErrConnectTimeout is matched by a *ConnectTimeoutError: the dial
	// plus handshake (data plane) or the first call (Admin.Connect) got no
	// answer within the configured bound, for example from a listener that
	// accepts connections and never answers. Such an error also matches
	// ErrConnection, so it is retriable.
	ErrConnectTimeout = errors.New("sdk: no answer within the connect timeout")
)

// Default ports of sq-server, named in the messages of WrongProtocolError.
const (
	defaultDataPort    = "6064" // --capnp-host
	defaultControlPort = "6060" // --grpc-host
)

// What a WrongProtocolError says the address speaks.
const (
	SpeaksHTTP2     = "HTTP/2"
	SpeaksHTTP1     = "HTTP/1.x"
	SpeaksTLS       = "TLS"
	SpeaksSSH       = "SSH"
	SpeaksDataPlane = "SQ's data-plane protocol"
	SpeaksGRPC      = "gRPC without SQ's services"
	SpeaksUnknown   = "an unknown protocol"
)

// WrongProtocolError reports an address that answered in a protocol other
// than the one of the plane dialed. It matches ErrNotDataPlane or
// ErrNotControlPlane (errors.Is), by Plane.
type WrongProtocolError struct {
	Addr string // host:port dialed
	// Plane is the plane that was expected: "data" or "control".
	Plane string
	// Speaks names what answered: one of the Speaks* constants.
	Speaks string
}

// Message is the error text without the "sdk: " prefix, for example
// "127.0.0.1:6060 is not an SQ data plane (it speaks HTTP/2; the data plane
// is on port 6064 by default)".
//
// For Speaks SpeaksTLS the text also says how to connect with TLS: a
// server started with --tls-cert serves TLS only, and the client needs
// TLSConfig (the sq CLI: --tls-ca or --tls).
func (e *WrongProtocolError) Message() string {
	hint := ""
	if e.Speaks == SpeaksTLS {
		hint = tlsHint
	}
	if e.Plane == "control" {
		return fmt.Sprintf("%s is not an SQ control plane (it speaks %s%s; the gRPC control plane is on port %s by default)", e.Addr, e.Speaks, hint, defaultControlPort)
	}
	return fmt.Sprintf("%s is not an SQ data plane (it speaks %s%s; the data plane is on port %s by default)", e.Addr, e.Speaks, hint, defaultDataPort)
}

func (e *WrongProtocolError) Error() string { return "sdk: " + e.Message() }

// Is matches ErrNotDataPlane or ErrNotControlPlane, by Plane.
func (e *WrongProtocolError) Is(target error) bool {
	return (target == ErrNotDataPlane && e.Plane != "control") || (target == ErrNotControlPlane && e.Plane == "control")
}

// ConnectTimeoutError reports that Addr did not answer within Timeout. It
// matches ErrConnectTimeout and ErrConnection.
type ConnectTimeoutError struct {
	Addr    string
	Timeout time.Duration
	// Stage is what did not finish in time: "dial" (no TCP connection),
	// "handshake" (connected, no answer) or "first call" (gRPC).
	Stage string
}

func (e *ConnectTimeoutError) Error() string {
	return fmt.Sprintf("sdk: %s: no answer within %v (%s)", e.Addr, e.Timeout, e.Stage)
}

// Unwrap makes the error match ErrConnectTimeout and ErrConnection.
func (e *ConnectTimeoutError) Unwrap() []error { return []error{ErrConnectTimeout, ErrConnection} }

// sniffBytes is how much of an answer identifySpeaker looks at: an HTTP/2
// frame header is 9 bytes (RFC 9113 §4.1).
const sniffBytes = 9

// capnpMaxSegments bounds the segment count of a Cap'n Proto message
// that SQ sends (the decoder's own limit is 512): the first 4 bytes of
// every frame hold the segment count minus one, little-endian
// (https://capnproto.org/encoding.html#serialization-over-a-stream).
const capnpMaxSegments = 512

// identifySpeaker names the protocol of the first bytes b a server sent,
// or returns "" when they can start an SQ data-plane frame. b holds at
// least one byte; fewer than sniffBytes when the server sent no more.
//
//   - HTTP/2: a server's first frame is SETTINGS (RFC 9113 §3.4): a 9-byte
//     header with type 0x4 and stream identifier 0. gRPC servers send it
//     as soon as they accept, whatever the client sent.
//   - HTTP/1.x: a response starts "HTTP/1." (RFC 9112 §4).
//   - TLS: a record starts with its content type, alert 0x15 or handshake
//     0x16, then the major version 0x03 (RFC 8446 §5.1).
//   - SSH: a server sends its identification string first, "SSH-"
//     (RFC 4253 §4.2).
func identifySpeaker(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("SSH-")):
		return SpeaksSSH
	case len(b) >= sniffBytes && b[3] == 0x4 && binary.BigEndian.Uint32(b[5:9])&0x7fffffff == 0:
		return SpeaksHTTP2
	case bytes.HasPrefix(b, []byte("HTTP/1.")):
		return SpeaksHTTP1
	case len(b) >= 2 && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03:
		return SpeaksTLS
	case len(b) >= 4 && binary.LittleEndian.Uint32(b) < capnpMaxSegments:
		return ""
	}
	return SpeaksUnknown
}

// probeDelayMax bounds how long the handshake waits for an answer before it
// also asks, on a second connection, whether an HTTP/1.x server listens
// there (such a server waits for a request line and never answers the
// handshake frame).
const probeDelayMax = time.Second

// httpProbe is the request of the HTTP/1.x probe: OPTIONS * asks about
// the server itself and changes nothing (RFC 9110 §9.3.7).
const httpProbe = "OPTIONS * HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"

// probeHTTP1 sends an HTTP/1.1 request to addr and names what answered
// (SpeaksHTTP1, SpeaksTLS for an HTTPS server that says it got plain
// HTTP), or returns "" when nothing recognizable answered before ctx ended.
func probeHTTP1(ctx context.Context, dial DialFunc, addr string) string {
	nc, err := dial.dialContext(ctx, addr)
	if err != nil {
		return ""
	}
	defer nc.Close()
	defer context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })()
	if _, err := fmt.Fprintf(nc, httpProbe, addr); err != nil {
		return ""
	}
	// An HTTP status line and a few header bytes are plenty; Go's HTTPS
	// servers answer plain HTTP with a 400 whose body says so.
	b, _ := io.ReadAll(io.LimitReader(nc, 512))
	if !bytes.HasPrefix(b, []byte("HTTP/1.")) {
		return ""
	}
	if bytes.Contains(b, []byte("HTTPS server")) {
		return SpeaksTLS
	}
	return SpeaksHTTP1
}

// probeTLS starts a TLS handshake with addr and returns SpeaksTLS when a
// TLS server answered it (with its certificate, or with a TLS alert such
// as handshake_failure), or "" otherwise. The certificate is not checked:
// nothing is sent after the handshake.
func probeTLS(ctx context.Context, dial DialFunc, addr string) string {
	nc, err := dial.dialContext(ctx, addr)
	if err != nil {
		return ""
	}
	defer nc.Close()
	host, _, _ := net.SplitHostPort(addr)
	tc := tls.Client(nc, &tls.Config{ServerName: host, InsecureSkipVerify: true}) // #nosec G402 -- a probe that sends no data
	err = tc.HandshakeContext(ctx)
	var alert tls.AlertError
	if err == nil || errors.As(err, &alert) {
		return SpeaksTLS
	}
	return ""
}

// tlsHint follows "it speaks TLS" in a WrongProtocolError's text.
const tlsHint = "; a server with TLS on needs TLSConfig in the client's config, or sq's --tls-ca or --tls"

// ErrTLS is matched by a *TLSError: a TLS connection (the config's
// TLSConfig set) could not be set up.
var ErrTLS = errors.New("sdk: TLS failed")

// TLSError reports a data-plane TLS handshake that failed: the server's
// certificate did not verify (unknown CA, expired, another name), the
// server refused this client (mutual TLS without an accepted client
// certificate), or the server does not speak TLS. It matches ErrTLS and
// Err (errors.Is, errors.As: *tls.CertificateVerificationError,
// x509.CertificateInvalidError, tls.RecordHeaderError...). Every kind but
// Closed is permanent: redialing does not help.
type TLSError struct {
	Addr string // host:port dialed
	// Plaintext is true when the server does not speak TLS: it answered
	// the ClientHello with bytes that are not TLS, or it closed the
	// connection and answers an SQ handshake without TLS (a server
	// without --tls-cert).
	Plaintext bool
	// Refused is true when the server ended the handshake with a TLS
	// alert, such as "certificate required" or "bad certificate" from a
	// server with --tls-client-ca.
	Refused bool
	// Closed is true when the server closed the connection during the
	// handshake without a TLS alert, and is not known to be a plaintext
	// SQ server.
	Closed bool
	Err    error
}

func (e *TLSError) Error() string {
	switch {
	case e.Plaintext:
		return fmt.Sprintf("sdk: %s: TLS handshake failed: the server does not speak TLS (a server without --tls-cert: connect without TLSConfig; sq: without --tls and --tls-ca): %v", e.Addr, e.Err)
	case e.Refused:
		return fmt.Sprintf("sdk: %s: TLS handshake failed: the server refused it (a server with --tls-client-ca needs a client certificate signed by that CA in TLSConfig.Certificates; sq: --tls-cert and --tls-key): %v", e.Addr, e.Err)
	case e.Closed:
		return fmt.Sprintf("sdk: %s: TLS handshake failed: the server closed the connection: %v", e.Addr, e.Err)
	}
	return fmt.Sprintf("sdk: %s: TLS handshake failed: %v", e.Addr, e.Err)
}

// Unwrap makes the error match ErrTLS and Err.
func (e *TLSError) Unwrap() []error { return []error{ErrTLS, e.Err} }

// tlsError classifies err, the failure of a TLS handshake (or of the
// first read after it: TLS 1.3 servers refuse a client certificate then)
// with addr: a permanent *TLSError, or a retriable one when the server
// closed the connection without saying why and does not answer an SQ
// handshake without TLS either (probed on a new connection with dial
// within ctx).
func tlsError(ctx context.Context, dial DialFunc, addr string, err error) error {
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		return permanent{&TLSError{Addr: addr, Plaintext: true, Err: err}}
	}
	var ne *net.OpError
	if errors.As(err, &ne) && ne.Op == "remote error" {
		// crypto/tls reports an alert from the server so.
		return permanent{&TLSError{Addr: addr, Refused: true, Err: err}}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || (ne != nil && !ne.Timeout()) {
		timeout := DefaultDialTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		if timeout > 0 {
			if nc, _, _, perr := dialHandshake(ctx, dial, nil, addr, "sq-go-probe", timeout); perr == nil {
				nc.Close()
				return permanent{&TLSError{Addr: addr, Plaintext: true, Err: err}}
			}
		}
		return &TLSError{Addr: addr, Closed: true, Err: err}
	}
	return permanent{&TLSError{Addr: addr, Err: err}}
}

// awaitAnswer waits for the first bytes of the answer to the handshake on
// br (read from nc), until deadline. Past probeAt with nothing read, it
// also runs probeHTTP1 on a second connection; so it does when the server
// closes the connection without a byte. It returns the bytes seen
// (up to sniffBytes, none on failure) or the error: a *WrongProtocolError,
// a *ConnectTimeoutError, or the connection's read error.
func awaitAnswer(ctx context.Context, dial DialFunc, nc net.Conn, peek func(int) ([]byte, error), addr string, timeout time.Duration, probeAt, deadline time.Time) ([]byte, error) {
	_ = nc.SetReadDeadline(probeAt)
	b, err := peek(sniffBytes)
	if len(b) == 0 && isTimeout(err) && ctx.Err() == nil && probeAt.Before(deadline) {
		pctx, cancel := context.WithDeadline(ctx, deadline)
		probed := make(chan string, 1)
		go func() {
			speaks := probeHTTP1(pctx, dial, addr)
			if speaks != "" {
				// End the wait on the handshake: the answer is in.
				_ = nc.SetReadDeadline(time.Unix(1, 0))
			}
			probed <- speaks
		}()
		_ = nc.SetReadDeadline(deadline)
		b, err = peek(sniffBytes)
		if len(b) != 0 {
			cancel() // the handshake got an answer: stop the probe
		}
		// With nothing on the handshake, the probe's answer is what there
		// is; a silent listener makes both wait until the deadline.
		speaks := <-probed
		cancel()
		if len(b) == 0 && speaks != "" {
			return nil, permanent{&WrongProtocolError{Addr: addr, Plane: "data", Speaks: speaks}}
		}
	}
	if _, isTLS := nc.(*tls.Conn); isTLS && len(b) == 0 && err != nil && !isTimeout(err) && ctx.Err() == nil {
		// A TLS server that refuses this client's certificate says so
		// with an alert read here (TLS 1.3).
		pctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		return nil, tlsError(pctx, dial, addr, err)
	}
	if len(b) == 0 && !isTimeout(err) && ctx.Err() == nil {
		// Closed without a byte: Go's TLS servers do that to a first
		// record that is not a ClientHello, yet answer plain HTTP with a
		// 400 that says so; OpenSSL's close or reset the connection and
		// answer only a ClientHello.
		pctx, cancel := context.WithDeadline(ctx, deadline)
		speaks := probeHTTP1(pctx, dial, addr)
		if speaks == "" {
			speaks = probeTLS(pctx, dial, addr)
		}
		cancel()
		if speaks != "" {
			return nil, permanent{&WrongProtocolError{Addr: addr, Plane: "data", Speaks: speaks}}
		}
	}
	if len(b) == 0 {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case isTimeout(err):
			return nil, &ConnectTimeoutError{Addr: addr, Timeout: timeout, Stage: "handshake"}
		case errors.Is(err, io.EOF):
			return nil, errors.New("handshake: the server closed the connection without answering")
		}
		return nil, fmt.Errorf("handshake: %w", err)
	}
	if speaks := identifySpeaker(b); speaks != "" {
		return nil, permanent{&WrongProtocolError{Addr: addr, Plane: "data", Speaks: speaks}}
	}
	return b, nil
}

// isTimeout reports whether err is a deadline passing on a connection.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// identifyAddr names what answers at addr when it is not a gRPC server
// (see Admin.Connect): SpeaksDataPlane when an SQ data-plane handshake
// succeeds, what the handshake's sniffing found (HTTP/1.x, TLS, ...), or ""
// when nothing could be told before ctx ended (give ctx a deadline). With
// "", dialErr is the error of the TCP dial when that is what failed (no
// such host, connection refused), for a message more precise than gRPC's.
func identifyAddr(ctx context.Context, dial DialFunc, addr string) (speaks string, dialErr error) {
	timeout := DefaultDialTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return "", nil
	}
	nc, _, _, err := dialHandshake(ctx, dial, nil, addr, "sq-go-probe", timeout)
	if err == nil {
		nc.Close()
		return SpeaksDataPlane, nil
	}
	var wp *WrongProtocolError
	if errors.As(err, &wp) && wp.Speaks != SpeaksHTTP2 {
		return wp.Speaks, nil
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return "", err
	}
	return "", nil
}

// probeTLSRefusal dials addr and runs a TLS handshake with cfg (ServerName
// defaulting to addr's host), then waits briefly for the server's first
// bytes: a TLS 1.3 server refuses a client certificate with an alert
// after the client's side of the handshake is done. It returns a
// *TLSError with Refused when the server sent an alert, nil otherwise (the
// handshake passed and the server waits for the client, or the dial or
// handshake failed for a reason the caller names itself).
func probeTLSRefusal(ctx context.Context, dial DialFunc, addr string, cfg *tls.Config) error {
	nc, err := dial.dialContext(ctx, addr)
	if err != nil {
		return nil
	}
	defer nc.Close()
	wait := 500 * time.Millisecond
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	if wait <= 0 {
		return nil
	}
	_ = nc.SetDeadline(time.Now().Add(wait))
	c := withServerName(cfg, addr).Clone()
	c.NextProtos = []string{"h2"}
	tc := tls.Client(nc, c)
	err = tc.HandshakeContext(ctx)
	if err == nil {
		var b [1]byte
		_, err = tc.Read(b[:])
	}
	var ne *net.OpError
	if errors.As(err, &ne) && ne.Op == "remote error" {
		return &TLSError{Addr: addr, Refused: true, Err: err}
	}
	return nil
}
