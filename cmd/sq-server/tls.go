package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/seedqueue/sq/internal/tlsconf"
)

// validateTLS checks that --tls-cert and --tls-key come together, that
// --tls-client-ca comes with them, and that --gossip-key-file comes with
// --grpc-host. The files are read at start (loadTLS, gossipKey).
func (c *config) validateTLS() []error {
	var errs []error
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key must be given together"))
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		errs = append(errs, errors.New("--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS first"))
	}
	if c.GossipKeyFile != "" && !c.clustered() {
		errs = append(errs, errors.New("--gossip-key-file needs --grpc-host: without it the node runs alone and gossips with no one"))
	}
	return errs
}

// tlsOn reports whether the planes serve TLS.
func (c *config) tlsOn() bool { return c.TLSCert != "" }

// loadTLS loads --tls-cert, --tls-key and --tls-client-ca; nil without
// --tls-cert. The error names the flag and file that did not load.
func (c *config) loadTLS(log *slog.Logger) (*tlsconf.Reloader, error) {
	if !c.tlsOn() {
		return nil, nil
	}
	r, err := tlsconf.New(tlsconf.Files{CertFile: c.TLSCert, KeyFile: c.TLSKey, ClientCAFile: c.TLSClientCA}, log)
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	cert := r.Certificate()
	log.Info("TLS on for every plane", "cert", c.TLSCert, "serial", fmt.Sprintf("%X", cert.Leaf.SerialNumber),
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339), "mutual_tls", r.MutualTLS())
	tlsconf.WarnValidity(log, cert.Leaf, time.Now())
	return r, nil
}

// watchTLS reloads the certificate pair and client CAs until ctx ends: on
// SIGHUP (through r.Reload) and when a file's size or modification time
// changes (polled every interval). A failed reload keeps the current
// pair and logs an ERROR. Without TLS (r nil) a SIGHUP is logged and
// otherwise left to the settings' reload (reload.go): SIGHUP's default
// action would end the process.
func watchTLS(ctx context.Context, r *tlsconf.Reloader, interval time.Duration, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if r == nil {
					log.Info("SIGHUP: no TLS certificate to reload (no --tls-cert)")
					continue
				}
				log.Info("SIGHUP: reloading the TLS certificate")
				_ = r.Reload() // logs its outcome
			}
		}
	}()
	if r != nil {
		go r.Watch(ctx, interval)
	}
}

// gossipKey reads --gossip-key-file: an AES key of 16, 24 or 32 bytes,
// raw (the file holds exactly the key) or base64 (surrounding white space
// ignored); nil without the flag.
func (c *config) gossipKey() ([]byte, error) {
	if c.GossipKeyFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.GossipKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	return parseGossipKey(b, c.GossipKeyFile)
}

// parseGossipKey decodes a gossip key file's contents b: the raw key when
// b is 16, 24 or 32 bytes long, else base64 (standard, with or without
// padding) of such a key, around white space (the output of openssl rand
// -base64 32).
func parseGossipKey(b []byte, file string) ([]byte, error) {
	okLen := func(n int) bool { return n == 16 || n == 24 || n == 32 }
	if okLen(len(b)) {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		if k, err := enc.DecodeString(s); err == nil && okLen(len(k)) {
			return k, nil
		}
	}
	return nil, fmt.Errorf("--gossip-key-file %s: want an AES key of 16, 24 or 32 bytes, raw or base64 (e.g. openssl rand -base64 32)", file)
}
