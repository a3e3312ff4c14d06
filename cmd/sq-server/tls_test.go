package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/seedqueue/sq/internal/tlsconf"
	"github.com/seedqueue/sq/internal/tlstest"
	"github.com/seedqueue/sq/sdk"
)

// tlsServer is a running sq-server for the TLS tests.
type tlsServer struct {
	addrs map[string]string // plane -> bound address
	tls   *tlsconf.Reloader // nil without --tls-cert
	stop  func()
	logs  *logSink // the server's log
}

// logSink collects a server's log lines; safe for concurrent use.
type logSink struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServer runs sq-server on a temporary data directory with all three
// planes on free ports plus extra flags, and waits until the data plane
// listens. The test's cleanup stops it.
func startServer(t *testing.T, extra ...string) *tlsServer {
	t.Helper()
	return startServerPoll(t, 20*time.Millisecond, extra...)
}

// startServerPoll is startServer with the TLS files checked for changes
// every poll.
func startServerPoll(t *testing.T, poll time.Duration, extra ...string) *tlsServer {
	t.Helper()
	var c config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bindFlags(fs, &c)
	args := append([]string{"--data-dir", t.TempDir(), "--capnp-host", "127.0.0.1:0", "--http-host", "127.0.0.1:0",
		"--grpc-host", "127.0.0.1:0", "--io-backend", "portable"}, extra...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 3)
	s := &tlsServer{addrs: map[string]string{}, logs: &logSink{}}
	var loaded atomic.Pointer[tlsconf.Reloader]
	c.hooks = &hooks{listening: func(plane, addr string) { addrs <- [2]string{plane, addr} },
		tls: func(r *tlsconf.Reloader) { loaded.Store(r) }, tlsPoll: poll}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, &c, slog.New(slog.NewTextHandler(s.logs, nil))) }()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(s.stop)
	for s.addrs["capnp"] == "" {
		select {
		case a := <-addrs:
			s.addrs[a[0]] = a[1]
		case err := <-done:
			cancel()
			t.Fatalf("run: %v", err)
		}
	}
	s.tls = loaded.Load()
	return s
}

// tlsFiles writes a certificate issued by ca to dir and returns the flags
// that serve it.
func tlsFiles(t *testing.T, ca *tlstest.CA, dir string, o tlstest.Options) (*tlstest.Leaf, []string) {
	t.Helper()
	leaf := ca.Issue(t, o)
	cert, key := leaf.Write(t, dir)
	return leaf, []string{"--tls-cert", cert, "--tls-key", key}
}

// publishFetch creates topic, publishes value to it through a producer
// with tc and reads it back with a Fetch.
func publishFetch(t *testing.T, addr string, tc *tls.Config, topic, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: addr, TLSConfig: tc})
	if err != nil {
		t.Fatalf("producer over TLS: %v", err)
	}
	defer p.Close()
	if _, err := p.Client().CreateTopic(ctx, topic, 1, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, topic, nil, []byte(value)); err != nil {
		t.Fatalf("send over TLS: %v", err)
	}
	r, err := p.Client().Fetch(ctx, sdk.FetchRequest{Topic: topic, Partition: 0, Offset: 0})
	if err != nil {
		t.Fatalf("fetch over TLS: %v", err)
	}
	if len(r.Messages) != 1 || string(r.Messages[0].Value) != value {
		t.Fatalf("fetched %+v, want one record %q", r.Messages, value)
	}
}

// adminTopics lists the topics over gRPC with tc.
func adminTopics(addr string, tc *tls.Config) ([]sdk.TopicInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: addr, TLSConfig: tc}})
	if err != nil {
		return nil, err
	}
	defer a.Close()
	if err := a.Connect(ctx); err != nil {
		return nil, err
	}
	return a.ListTopics(ctx)
}

// healthz GETs https://addr/healthz with tc.
func healthz(addr string, tc *tls.Config) (int, error) {
	tr := &http.Transport{TLSClientConfig: tc}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	resp, err := c.Get("https://" + addr + "/healthz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// dialData opens a data-plane client with tc and returns its error.
func dialData(addr string, tc *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: addr, TLSConfig: tc, DialTimeout: 20 * time.Second})
	if err == nil {
		c.Close()
	}
	return err
}

// TestTLSEveryPlane: with --tls-cert and --tls-key, a producer publishes
// and fetches over TLS on the data plane, the gRPC admin lists topics and
// /healthz answers over TLS; a client trusting another CA is refused on
// each plane, and a plaintext data-plane client is told the port speaks
// TLS.
func TestTLSEveryPlane(t *testing.T) {
	ca := tlstest.NewCA(t, "SQ test CA")
	_, flags := tlsFiles(t, ca, t.TempDir(), tlstest.Options{})
	s := startServer(t, flags...)
	good := &tls.Config{RootCAs: ca.Pool()}

	publishFetch(t, s.addrs["capnp"], good, "tls-topic", "over TLS")
	topics, err := adminTopics(s.addrs["grpc"], good)
	if err != nil {
		t.Fatalf("gRPC admin over TLS: %v", err)
	}
	if len(topics) != 1 || topics[0].Name != "tls-topic" {
		t.Fatalf("gRPC topics %+v, want tls-topic", topics)
	}
	if code, err := healthz(s.addrs["http"], good); err != nil || code != http.StatusOK {
		t.Fatalf("GET /healthz over TLS: %d, %v", code, err)
	}

	other := &tls.Config{RootCAs: tlstest.NewCA(t, "another CA").Pool()}
	var verr *tls.CertificateVerificationError
	if err := dialData(s.addrs["capnp"], other); !errors.Is(err, sdk.ErrTLS) || !errors.As(err, &verr) {
		t.Errorf("data plane with another CA: %v, want a *sdk.TLSError with a certificate verification error", err)
	}
	if _, err := adminTopics(s.addrs["grpc"], other); !errors.Is(err, sdk.ErrTLS) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("gRPC with another CA: %v, want a *sdk.TLSError about an unknown authority", err)
	}
	if _, err := healthz(s.addrs["http"], other); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("HTTP with another CA: %v, want an unknown authority", err)
	}

	err = dialData(s.addrs["capnp"], nil)
	t.Logf("plaintext data-plane client of a TLS server: %v", err)
	var wp *sdk.WrongProtocolError
	if !errors.As(err, &wp) || wp.Speaks != sdk.SpeaksTLS || !strings.Contains(err.Error(), "TLSConfig") {
		t.Errorf("plaintext data-plane client: %v, want a WrongProtocolError saying it speaks TLS and naming TLSConfig", err)
	}
	if _, err := adminTopics(s.addrs["grpc"], nil); !errors.As(err, &wp) || wp.Speaks != sdk.SpeaksTLS {
		t.Errorf("plaintext gRPC client: %v, want a WrongProtocolError saying it speaks TLS", err)
	}
}

// TestTLSClientToPlaintextServer: a TLS client of a server without TLS
// gets a *sdk.TLSError that says the server does not speak TLS, on the
// data plane and on gRPC.
func TestTLSClientToPlaintextServer(t *testing.T) {
	s := startServer(t)
	tc := &tls.Config{RootCAs: tlstest.NewCA(t, "SQ test CA").Pool()}
	err := dialData(s.addrs["capnp"], tc)
	t.Logf("TLS data-plane client of a plaintext server: %v", err)
	var te *sdk.TLSError
	if !errors.As(err, &te) || !te.Plaintext {
		t.Errorf("TLS data-plane client of a plaintext server: %v, want a *sdk.TLSError saying the server does not speak TLS", err)
	}
	if _, err := adminTopics(s.addrs["grpc"], tc); !errors.As(err, &te) || !te.Plaintext {
		t.Errorf("TLS gRPC client of a plaintext server: %v, want a *sdk.TLSError with Plaintext", err)
	}
}

// TestTLSExpiredCertificate: a server certificate past its NotAfter is
// refused by clients of every plane.
func TestTLSExpiredCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "SQ test CA")
	_, flags := tlsFiles(t, ca, t.TempDir(), tlstest.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	s := startServer(t, flags...)
	tc := &tls.Config{RootCAs: ca.Pool()}
	var inv x509.CertificateInvalidError
	if err := dialData(s.addrs["capnp"], tc); !errors.Is(err, sdk.ErrTLS) || !errors.As(err, &inv) || inv.Reason != x509.Expired {
		t.Errorf("data plane with an expired certificate: %v, want an expired certificate error", err)
	}
	if _, err := adminTopics(s.addrs["grpc"], tc); !errors.Is(err, sdk.ErrTLS) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("gRPC with an expired certificate: %v", err)
	}
	if _, err := healthz(s.addrs["http"], tc); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("HTTP with an expired certificate: %v", err)
	}
}

// TestMutualTLS: with --tls-client-ca, a client without a certificate is
// refused on every plane, and one with a certificate the CA signed is
// served.
func TestMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "SQ test CA")
	dir := t.TempDir()
	_, flags := tlsFiles(t, ca, dir, tlstest.Options{})
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	s := startServer(t, append(flags, "--tls-client-ca", caFile)...)

	anon := &tls.Config{RootCAs: ca.Pool()}
	err := dialData(s.addrs["capnp"], anon)
	t.Logf("data plane without a client certificate: %v", err)
	var te *sdk.TLSError
	if !errors.As(err, &te) || !te.Refused {
		t.Errorf("data plane without a client certificate: %v, want a *sdk.TLSError with Refused", err)
	}
	if _, err := adminTopics(s.addrs["grpc"], anon); !errors.As(err, &te) || !te.Refused {
		t.Errorf("gRPC without a client certificate: %v, want a *sdk.TLSError with Refused", err)
	}
	if _, err := healthz(s.addrs["http"], anon); err == nil {
		t.Error("HTTP without a client certificate was served")
	}
	stranger := tlstest.NewCA(t, "another CA").Issue(t, tlstest.Options{CommonName: "stranger"})
	foreign := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{stranger.TLS(t)}}
	if err := dialData(s.addrs["capnp"], foreign); !errors.Is(err, sdk.ErrTLS) {
		t.Errorf("data plane with a client certificate of another CA: %v, want ErrTLS", err)
	}
	if _, err := adminTopics(s.addrs["grpc"], foreign); !errors.As(err, &te) || !te.Refused {
		t.Errorf("gRPC with a client certificate of another CA: %v, want a *sdk.TLSError with Refused", err)
	}

	client := ca.Issue(t, tlstest.Options{CommonName: "client"})
	mtls := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLS(t)}}
	publishFetch(t, s.addrs["capnp"], mtls, "mtls-topic", "mutual")
	if _, err := adminTopics(s.addrs["grpc"], mtls); err != nil {
		t.Errorf("gRPC with a client certificate: %v", err)
	}
	if code, err := healthz(s.addrs["http"], mtls); err != nil || code != http.StatusOK {
		t.Errorf("HTTP with a client certificate: %d, %v", code, err)
	}
}

// servedSerial returns the serial number of the certificate a new TLS
// connection to addr is served.
func servedSerial(t *testing.T, addr string, pool *x509.CertPool) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestTLSCertificateRotation: while a producer publishes without pause,
// the certificate files are replaced twice; the first replacement is
// loaded by Reload (what SIGHUP calls), the second by the change check.
// New connections of every plane are served the new certificate, and no
// publish fails.
func TestTLSCertificateRotation(t *testing.T) {
	ca := tlstest.NewCA(t, "SQ test CA")
	dir := t.TempDir()
	first, flags := tlsFiles(t, ca, dir, tlstest.Options{})
	s := startServer(t, flags...)
	tc := &tls.Config{RootCAs: ca.Pool()}
	for _, plane := range []string{"capnp", "grpc", "http"} {
		if got := servedSerial(t, s.addrs[plane], ca.Pool()); got.Cmp(first.Cert.SerialNumber) != 0 {
			t.Fatalf("%s serves serial %v, want %v", plane, got, first.Cert.SerialNumber)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: s.addrs["capnp"], TLSConfig: tc})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Client().CreateTopic(ctx, "rotation", 1, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	stop := make(chan struct{})
	sendErr := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				sendErr <- nil
				return
			default:
			}
			if _, err := p.Send(ctx, "rotation", nil, fmt.Appendf(nil, "record %d", i)); err != nil {
				sendErr <- err
				return
			}
			sent.Add(1)
		}
	}()
	// waitSent waits until the producer has sent n more records.
	waitSent := func(what string) {
		from := sent.Load()
		poll(t, 30*time.Second, what, func() bool { return sent.Load() >= from+10 })
	}
	waitSent("publishes before the rotation")

	second, _ := tlsFiles(t, ca, dir, tlstest.Options{})
	if err := s.tls.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	for _, plane := range []string{"capnp", "grpc", "http"} {
		if got := servedSerial(t, s.addrs[plane], ca.Pool()); got.Cmp(second.Cert.SerialNumber) != 0 {
			t.Fatalf("after Reload %s serves serial %v, want %v", plane, got, second.Cert.SerialNumber)
		}
	}
	waitSent("publishes after the reload")
	// A fresh producer connects over the reloaded certificate.
	publishFetch(t, s.addrs["capnp"], tc, "after-reload", "new certificate")

	third, _ := tlsFiles(t, ca, dir, tlstest.Options{})
	poll(t, 30*time.Second, "the changed files to be served", func() bool {
		return servedSerial(t, s.addrs["capnp"], ca.Pool()).Cmp(third.Cert.SerialNumber) == 0
	})
	for _, plane := range []string{"grpc", "http"} {
		if got := servedSerial(t, s.addrs[plane], ca.Pool()); got.Cmp(third.Cert.SerialNumber) != 0 {
			t.Fatalf("after the file change %s serves serial %v, want %v", plane, got, third.Cert.SerialNumber)
		}
	}
	waitSent("publishes after the file change")
	close(stop)
	if err := <-sendErr; err != nil {
		t.Fatalf("a publish failed during the rotation: %v", err)
	}
}

// TestTLSStartErrors: a certificate or key that does not load fails the
// start with the flag named; --tls-cert without --tls-key and
// --tls-client-ca without a certificate are refused by validate.
func TestTLSStartErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "SQ test CA")
	_, flags := tlsFiles(t, ca, dir, tlstest.Options{})
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", missing, "--tls-key", flags[3]}, "--tls-cert " + missing},
		{[]string{"--tls-cert", flags[1], "--tls-key", missing}, "--tls-key " + missing},
		{[]string{"--tls-cert", flags[1], "--tls-key", flags[3], "--tls-client-ca", missing}, "--tls-client-ca " + missing},
	} {
		var c config
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		bindFlags(fs, &c)
		if err := fs.Parse(append([]string{"--data-dir", t.TempDir(), "--capnp-host", "127.0.0.1:0", "--http-host", "127.0.0.1:0",
			"--grpc-host", "127.0.0.1:0", "--io-backend", "portable"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // guards against a hang only
		err := run(ctx, &c, slog.New(slog.NewTextHandler(io.Discard, nil)))
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run with %v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"SQ_TLS_CERT": flags[1]}, nil, "--tls-cert and --tls-key must be given together"},
		{map[string]string{"SQ_TLS_CLIENT_CA": flags[1]}, nil, "--tls-client-ca needs --tls-cert"},
		{map[string]string{"SQ_GOSSIP_KEY_FILE": flags[1]}, []string{"--grpc-host", ""}, "--gossip-key-file needs --grpc-host"},
	} {
		if _, err := parseConfig(t, tc.env, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config with %v %v: %v, want %q", tc.env, tc.args, err, tc.want)
		}
	}
}

// TestGossipKeyFile: a key file holds 16, 24 or 32 bytes, raw or base64;
// anything else is refused with the flag named.
func TestGossipKeyFile(t *testing.T) {
	raw := []byte("0123456789abcdef0123456789abcdef")
	for _, tc := range []struct {
		in   string
		want int
	}{
		{string(raw[:16]), 16},
		{string(raw), 32},
		{"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n", 32},
		{"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3\n", 24},
		{"short", 0},
	} {
		k, err := parseGossipKey([]byte(tc.in), "key")
		if tc.want == 0 {
			if err == nil || !strings.Contains(err.Error(), "--gossip-key-file") {
				t.Errorf("%q: %v, want an error naming --gossip-key-file", tc.in, err)
			}
			continue
		}
		if err != nil || len(k) != tc.want {
			t.Errorf("%q: %d bytes, %v; want %d", tc.in, len(k), err, tc.want)
		}
	}
}

// TestTLSCluster: two nodes with --tls-cert, --tls-client-ca and
// --gossip-key-file form a cluster: the second joins through the first's
// gRPC plane, follows the Raft log and fetches replicas from the leader's
// data plane, all over mutual TLS (the nodes' certificate, signed by the
// client CA, serves as client certificate too) and encrypted gossip; a
// record published with min.insync.replicas 2 is acknowledged once both
// replicas hold it.
func TestTLSCluster(t *testing.T) {
	ca := tlstest.NewCA(t, "SQ test CA")
	dir := t.TempDir()
	_, flags := tlsFiles(t, ca, dir, tlstest.Options{})
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	keyFile := filepath.Join(dir, "gossip.key")
	tlstest.WriteFile(t, keyFile, []byte("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"))
	flags = append(flags, "--tls-client-ca", caFile, "--gossip-key-file", keyFile)
	n1 := startServer(t, append(flags, "--node-id", "n1")...)
	n2 := startServer(t, append(flags, "--node-id", "n2", "--seeds", n1.addrs["grpc"])...)

	client := ca.Issue(t, tlstest.Options{CommonName: "client"})
	tc := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLS(t)}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: n2.addrs["grpc"], TLSConfig: tc}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateTopic(ctx, "replicated", 2, sdk.TopicConfig{ReplicationFactor: 2, MinInsyncReplicas: 2}); err != nil {
		t.Fatalf("create a topic through the joined node: %v", err)
	}
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n1.addrs["capnp"], TLSConfig: tc})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Keys spread the records over both partitions, which placement
	// spreads over both nodes as leaders.
	var msgs []sdk.ProducerMessage
	for i := range 8 {
		msgs = append(msgs, sdk.ProducerMessage{Topic: "replicated", Key: fmt.Appendf(nil, "k%d", i), Value: []byte("both nodes")})
	}
	var last error
	poll(t, 45*time.Second, "an acknowledged publish with 2 in-sync replicas", func() bool {
		_, last = p.SendBatch(ctx, msgs)
		return last == nil
	})
	md, err := p.Client().Metadata(ctx, "replicated")
	if err != nil || len(md.Topics) != 1 {
		t.Fatalf("metadata: %+v, %v", md, err)
	}
	leaders := map[string]bool{}
	for _, pi := range md.Topics[0].PartitionInfos {
		leaders[pi.Leader] = true
		if len(pi.ISR) != 2 {
			t.Errorf("partition %d: ISR %v, want both nodes", pi.Partition, pi.ISR)
		}
	}
	t.Logf("partition leaders: %v", leaders)
}

// TestTLSReloadOnSIGHUP: with the change check far off, a SIGHUP to the
// process reloads the replaced files.
func TestTLSReloadOnSIGHUP(t *testing.T) {
	ca := tlstest.NewCA(t, "SQ test CA")
	dir := t.TempDir()
	_, flags := tlsFiles(t, ca, dir, tlstest.Options{})
	s := startServerPoll(t, time.Hour, flags...)
	next, _ := tlsFiles(t, ca, dir, tlstest.Options{})
	// The server's handler is registered (watchTLS runs before the
	// planes listen), so the signal does not end the test process.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "the certificate reloaded on SIGHUP", func() bool {
		return servedSerial(t, s.addrs["capnp"], ca.Pool()).Cmp(next.Cert.SerialNumber) == 0
	})
}

// TestSIGHUPWithoutTLS: a server without TLS handles SIGHUP too (its
// default action would end the process): it logs that there is nothing
// to reload and keeps serving.
func TestSIGHUPWithoutTLS(t *testing.T) {
	s := startServer(t)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "the SIGHUP logged", func() bool {
		return strings.Contains(s.logs.String(), "SIGHUP: no TLS certificate to reload")
	})
	publishFetch(t, s.addrs["capnp"], nil, "after-hup", "still served")
}

// TestTLSEveryClientType: BatchProducer, Consumer, GrpcProducer and
// GrpcConsumer reach a TLS server through their TLSConfig.
func TestTLSEveryClientType(t *testing.T) {
	ca := tlstest.NewCA(t, "SQ test CA")
	_, flags := tlsFiles(t, ca, t.TempDir(), tlstest.Options{})
	s := startServer(t, flags...)
	tc := &tls.Config{RootCAs: ca.Pool()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	bp, err := sdk.NewBatchProducer(ctx, sdk.BatchProducerConfig{ProducerConfig: sdk.ProducerConfig{Addr: s.addrs["capnp"], TLSConfig: tc}})
	if err != nil {
		t.Fatalf("BatchProducer over TLS: %v", err)
	}
	defer bp.Close()
	if _, err := bp.Client().CreateTopic(ctx, "clients", 1, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := bp.Send(ctx, "clients", nil, []byte("batch")); err != nil {
		t.Fatal(err)
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatalf("BatchProducer flush over TLS: %v", err)
	}
	gp, err := sdk.NewGrpcProducer(sdk.GrpcProducerConfig{GrpcConfig: sdk.GrpcConfig{Addr: s.addrs["grpc"], TLSConfig: tc}})
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	if _, err := gp.Send(ctx, "clients", nil, []byte("grpc")); err != nil {
		t.Fatalf("GrpcProducer over TLS: %v", err)
	}

	c, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: s.addrs["capnp"], TLSConfig: tc, Topic: "clients", StartFrom: sdk.StartEarliest})
	if err != nil {
		t.Fatalf("Consumer over TLS: %v", err)
	}
	defer c.Close()
	gc, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: s.addrs["grpc"], TLSConfig: tc}, Topic: "clients", StartFrom: sdk.StartEarliest})
	if err != nil {
		t.Fatalf("GrpcConsumer over TLS: %v", err)
	}
	defer gc.Close()
	for name, pollFn := range map[string]func(context.Context) ([]sdk.Message, error){"Consumer": c.Poll, "GrpcConsumer": gc.Poll} {
		var got []string
		for len(got) < 2 {
			msgs, err := pollFn(ctx)
			if err != nil {
				t.Fatalf("%s.Poll over TLS: %v", name, err)
			}
			for _, m := range msgs {
				got = append(got, string(m.Value))
			}
		}
		if strings.Join(got, ",") != "batch,grpc" {
			t.Errorf("%s read %v, want batch, grpc", name, got)
		}
	}
}
