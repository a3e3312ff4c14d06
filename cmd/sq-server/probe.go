package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// defaultProbeTimeout bounds one probe: connection, TLS handshake and
// answer (a container health check runs it every few seconds).
const defaultProbeTimeout = 3 * time.Second

// probeBodyMax bounds how much of the answer's body the probe reads: its
// first line is the reason printed.
const probeBodyMax = 4 << 10

// newProbeCommand returns `sq-server probe`: it asks the node's own HTTP
// listener (--http-host, SQ_HTTP_HOST) for /readyz (--ready, the default)
// or /healthz (--live), prints one line and exits 0 when the answer is
// 200, else 1. It is the HEALTHCHECK of the container image, which has no
// curl.
func newProbeCommand(c *config) *cobra.Command {
	var live, ready bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "probe [--ready|--live]",
		Short: "Ask this node's HTTP listener for /readyz (--ready) or /healthz (--live); exit 0 when 200, else 1",
		Long: `probe asks the node's HTTP listener (--http-host, SQ_HTTP_HOST) for /readyz
(--ready, the default) or /healthz (--live) and prints one line: the URL, the
status and the first line of the answer. It exits 0 on 200, 1 otherwise.
A listener on 0.0.0.0 or :: is asked on the loopback address. With
--tls-cert it speaks HTTPS and accepts only the certificate in that file
(the node's own); with --tls-client-ca it presents --tls-cert and --tls-key
as its client certificate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := c.resolve(cmd.Root().PersistentFlags(), os.Getenv); err != nil {
				return err
			}
			if live && ready {
				return errors.New("probe: --ready and --live exclude each other")
			}
			path := "/readyz"
			if live {
				path = "/healthz"
			}
			line, err := probe(cmd.Context(), c, path, timeout)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	}
	cmd.Flags().BoolVar(&ready, "ready", false, "ask /readyz: storage recovered and, in a cluster, joined and caught up (the default)")
	cmd.Flags().BoolVar(&live, "live", false, "ask /healthz: the process serves HTTP")
	cmd.Flags().DurationVar(&timeout, "timeout", defaultProbeTimeout, "bound of the whole probe")
	return cmd
}

// probe asks path of the node's HTTP listener and returns the line to
// print on 200, or an error holding that line otherwise.
func probe(ctx context.Context, c *config, path string, timeout time.Duration) (string, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	u, err := probeURL(c, path)
	if err != nil {
		return "", err
	}
	tc, err := probeTLS(c)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", fmt.Errorf("probe: %w", err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true, Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("probe: %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, probeBodyMax))
	first, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	line := fmt.Sprintf("%s %d %s", u, resp.StatusCode, first)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("probe: %s", line)
	}
	return line, nil
}

// probeURL is the URL of path on the node's HTTP listener: the loopback
// address for an unspecified or empty host, https with TLS.
func probeURL(c *config, path string) (string, error) {
	if c.HTTPHost == "" {
		return "", errors.New("probe: HTTP is off (--http-host is empty): nothing to ask")
	}
	host, port, err := net.SplitHostPort(c.HTTPHost)
	if err != nil {
		return "", fmt.Errorf("probe: --http-host %q: %w", c.HTTPHost, err)
	}
	if port == "0" {
		return "", fmt.Errorf("probe: --http-host %q: port 0 is picked at start; give the port the node listens on", c.HTTPHost)
	}
	switch ip := net.ParseIP(host); {
	case host == "" || (ip != nil && ip.To4() != nil && ip.IsUnspecified()):
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	scheme := "http"
	if c.tlsOn() {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + path, nil
}

// probeTLS is the probe's TLS configuration, nil without --tls-cert: the
// node's answer must carry the leaf certificate of --tls-cert (the probe
// asks its own node, whose certificate names the host others reach it
// at, not the loopback address), and with --tls-client-ca the probe
// presents --tls-cert and --tls-key.
func probeTLS(c *config) (*tls.Config, error) {
	if !c.tlsOn() {
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("probe: --tls-cert %s, --tls-key %s: %w", c.TLSCert, c.TLSKey, err)
	}
	want := pair.Certificate[0]
	tc := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is not verified by name: the probe pins the leaf
		// instead, in VerifyConnection.
		InsecureSkipVerify: true, //nolint:gosec // pinned to --tls-cert's leaf below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, want) {
				return fmt.Errorf("the node's certificate is not the one in --tls-cert %s", c.TLSCert)
			}
			return nil
		},
	}
	if c.TLSClientCA != "" {
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}
