// Package tlsconf holds the server's TLS material: a certificate and key
// pair (PEM files) and an optional client CA bundle for mutual TLS, loaded
// at start and reloaded from disk without a restart (Reload, called on
// SIGHUP, and Watch, which polls the files). Every plane builds its
// tls.Config from one Reloader, so a reload reaches new handshakes on all
// of them; connections already open keep the pair they were set up with.
package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// MinVersion is the lowest TLS version served and dialed: TLS 1.2.
const MinVersion = tls.VersionTLS12

// DefaultPollInterval is Watch's period when given 0.
const DefaultPollInterval = 2 * time.Second

// Files names the PEM files of a Reloader and the flags that set them,
// which errors name.
type Files struct {
	// CertFile holds the certificate chain, leaf first; KeyFile its
	// private key. Both required.
	CertFile, KeyFile string
	// ClientCAFile, when set, holds the CA certificates that client
	// certificates must chain to: every connection must then present one
	// (mutual TLS). Empty: no client certificate is asked for.
	ClientCAFile string
}

// material is one loaded generation of the files.
type material struct {
	cert     *tls.Certificate
	clientCA *x509.CertPool // nil without Files.ClientCAFile
}

// stamp is what Watch compares to tell a file changed.
type stamp struct {
	size    int64
	modTime time.Time
}

// Reloader serves the current certificate pair and client CAs to the
// tls.Configs it builds. Its methods are safe for concurrent use.
type Reloader struct {
	files Files
	log   *slog.Logger
	cur   atomic.Pointer[material]

	mu     sync.Mutex // serialises Reload
	stamps map[string]stamp
	// reloads counts successful reloads after the first load (tests).
	reloads atomic.Uint64
}

// New loads files and returns their Reloader; log receives reload events
// (nil: slog.Default()). Errors name the flag of the file that failed:
// "--tls-cert", "--tls-key" or "--tls-client-ca".
func New(files Files, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.Default()
	}
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("--tls-cert and --tls-key must be given together")
	}
	r := &Reloader{files: files, log: log}
	m, stamps, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur.Store(m)
	r.stamps = stamps
	return r, nil
}

// load reads the files. The error names the flag and the file.
func (r *Reloader) load() (*material, map[string]stamp, error) {
	stamps := map[string]stamp{}
	for _, f := range r.paths() {
		if fi, err := os.Stat(f); err == nil {
			stamps[f] = stamp{fi.Size(), fi.ModTime()}
		}
	}
	certPEM, err := os.ReadFile(r.files.CertFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert %s: %w", r.files.CertFile, err)
	}
	keyPEM, err := os.ReadFile(r.files.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-key %s: %w", r.files.KeyFile, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert %s and --tls-key %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	m := &material{cert: &cert}
	if r.files.ClientCAFile != "" {
		pem, err := os.ReadFile(r.files.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-client-ca %s: %w", r.files.ClientCAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--tls-client-ca %s: no PEM certificate in the file", r.files.ClientCAFile)
		}
		m.clientCA = pool
	}
	return m, stamps, nil
}

func (r *Reloader) paths() []string {
	p := []string{r.files.CertFile, r.files.KeyFile}
	if r.files.ClientCAFile != "" {
		p = append(p, r.files.ClientCAFile)
	}
	return p
}

// Reload reads the files again. On success new handshakes use the new
// pair and client CAs, and an INFO line names the new certificate's
// serial number and expiry; on failure the current ones stay and the
// error (naming the flag and file) is logged as an ERROR and returned.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked()
}

func (r *Reloader) reloadLocked() error {
	m, stamps, err := r.load()
	if err != nil {
		r.log.Error("TLS reload failed; keeping the current certificate", "err", err)
		// Record the stamps seen, so that Watch logs a broken file once
		// rather than at every poll.
		r.stamps = r.statAll()
		return err
	}
	r.cur.Store(m)
	r.stamps = stamps
	r.reloads.Add(1)
	attrs := []any{"cert", r.files.CertFile}
	if leaf := m.cert.Leaf; leaf != nil {
		attrs = append(attrs, "serial", fmt.Sprintf("%X", leaf.SerialNumber), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	r.log.Info("TLS certificate reloaded", attrs...)
	WarnValidity(r.log, m.cert.Leaf, time.Now())
	return nil
}

// expirySoon is how close to its NotAfter a certificate gets a WARN at
// load.
const expirySoon = 14 * 24 * time.Hour

// WarnValidity logs a WARN when leaf (nil: nothing) is expired, not valid
// yet, or expires within 14 days at now: clients refuse such a
// certificate, and the server starts or reloads anyway.
func WarnValidity(log *slog.Logger, leaf *x509.Certificate, now time.Time) {
	if leaf == nil {
		return
	}
	serial := fmt.Sprintf("%X", leaf.SerialNumber)
	switch {
	case now.After(leaf.NotAfter):
		log.Warn("the TLS certificate has expired: clients refuse it; replace the files (they are reloaded)",
			"serial", serial, "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		log.Warn("the TLS certificate is not valid yet: clients refuse it until then (is the clock right?)",
			"serial", serial, "not_before", leaf.NotBefore.UTC().Format(time.RFC3339))
	case leaf.NotAfter.Sub(now) < expirySoon:
		log.Warn("the TLS certificate expires soon: replace the files before then (they are reloaded)",
			"serial", serial, "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
}

func (r *Reloader) statAll() map[string]stamp {
	s := map[string]stamp{}
	for _, f := range r.paths() {
		if fi, err := os.Stat(f); err == nil {
			s[f] = stamp{fi.Size(), fi.ModTime()}
		}
	}
	return s
}

// changed reports whether any file's size or modification time differs
// from the last load or failed reload.
func (r *Reloader) changed() bool {
	now := r.statAll()
	if len(now) != len(r.stamps) {
		return true
	}
	for f, s := range now {
		if o, ok := r.stamps[f]; !ok || o.size != s.size || !o.modTime.Equal(s.modTime) {
			return true
		}
	}
	return false
}

// Poll reloads the files when one changed (size or modification time)
// since the last load or attempt, and reports whether it tried. Watch
// calls it periodically.
func (r *Reloader) Poll() (tried bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.changed() {
		return false, nil
	}
	return true, r.reloadLocked()
}

// Watch calls Poll every interval (0: DefaultPollInterval) until ctx ends.
func (r *Reloader) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = r.Poll()
		}
	}
}

// Certificate returns the current certificate pair.
func (r *Reloader) Certificate() *tls.Certificate { return r.cur.Load().cert }

// MutualTLS reports whether a client CA file is configured: servers
// require client certificates and nodes present theirs.
func (r *Reloader) MutualTLS() bool { return r.files.ClientCAFile != "" }

// ServerConfig returns a server tls.Config whose handshakes use the
// current pair and, with a client CA file, require and verify a client
// certificate against the current client CAs. nextProtos are its ALPN
// protocols ("h2" for gRPC). TLS 1.2 is the minimum.
func (r *Reloader) ServerConfig(nextProtos ...string) *tls.Config {
	base := &tls.Config{MinVersion: MinVersion, NextProtos: slices.Clone(nextProtos)}
	base.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.Certificate(), nil }
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m := r.cur.Load()
		c := &tls.Config{MinVersion: MinVersion, NextProtos: slices.Clone(nextProtos), Certificates: []tls.Certificate{*m.cert}}
		if m.clientCA != nil {
			c.ClientCAs = m.clientCA
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		return c, nil
	}
	return base
}

// PeerConfig returns the client tls.Config a node dials other nodes with:
// it presents the current certificate pair as its client certificate and
// verifies the peer's certificate against the current client CAs when a
// client CA file is configured (a cluster's nodes share one CA), else
// against the system roots; both follow reloads. The peer's name is
// checked against ServerName, which the dial sets from the address (see
// Dialer); its certificate needs the address's IP or name among its SANs,
// and both serverAuth and clientAuth extended key usages with mutual TLS.
// nextProtos are its ALPN protocols.
func (r *Reloader) PeerConfig(nextProtos ...string) *tls.Config {
	c := &tls.Config{MinVersion: MinVersion, NextProtos: slices.Clone(nextProtos)}
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.Certificate(), nil }
	if r.files.ClientCAFile != "" {
		// crypto/tls verifies against a fixed RootCAs; the client CAs
		// change with reloads, so VerifyConnection does the whole
		// verification (chain and name) against the current ones, as the
		// crypto/tls documentation's example of VerifyConnection does.
		c.InsecureSkipVerify = true // #nosec G402 -- verified in VerifyConnection
		c.VerifyConnection = func(cs tls.ConnectionState) error { return r.verifyPeer(cs) }
	}
	return c
}

// verifyPeer verifies a peer's certificate chain against the current
// client CAs and its name against cs.ServerName.
func (r *Reloader) verifyPeer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tlsconf: the peer sent no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         r.cur.Load().clientCA,
		DNSName:       cs.ServerName,
		Intermediates: x509.NewCertPool(),
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

// WithServerName returns cfg, or a clone of it with ServerName set to
// addr's host when cfg has none, as crypto/tls.Dial does.
func WithServerName(cfg *tls.Config, addr string) *tls.Config {
	if cfg.ServerName != "" {
		return cfg
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	c := cfg.Clone()
	c.ServerName = host
	return c
}

// Dialer returns a dial function that dials addr with dial (nil:
// net.Dialer) and completes a TLS handshake with cfg (ServerName from
// addr unless set) within ctx.
func Dialer(cfg *tls.Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var nc net.Conn
		var err error
		if dial != nil {
			nc, err = dial(ctx, network, addr)
		} else {
			var d net.Dialer
			nc, err = d.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, err
		}
		tc := tls.Client(nc, WithServerName(cfg, addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		return tc, nil
	}
}

// NewListener returns a listener that serves TLS with cfg over inner's
// connections, as tls.NewListener does, except that each connection's
// handshake, run at its first Read or Write, must finish within timeout
// (0: no bound) or the connection is closed: a client that starts a
// handshake and stalls does not hold its connection beyond it.
func NewListener(inner net.Listener, cfg *tls.Config, timeout time.Duration) net.Listener {
	return &listener{Listener: inner, cfg: cfg, timeout: timeout}
}

type listener struct {
	net.Listener
	cfg     *tls.Config
	timeout time.Duration
}

// Accept implements net.Listener.
func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &boundedConn{Conn: tls.Server(c, l.cfg), timeout: l.timeout}, nil
}

// boundedConn runs its handshake within timeout before its first Read or
// Write.
type boundedConn struct {
	*tls.Conn
	timeout time.Duration
	once    sync.Once
	err     error
}

func (c *boundedConn) handshake() error {
	c.once.Do(func() {
		ctx := context.Background()
		if c.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.timeout)
			defer cancel()
		}
		c.err = c.Conn.HandshakeContext(ctx)
	})
	return c.err
}

// Read implements net.Conn.
func (c *boundedConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

// Write implements net.Conn.
func (c *boundedConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
