package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"
)

// The TLS flags, each with its environment variable (the flag wins).
const (
	tlsEnv           = "SQ_TLS"
	tlsCAEnv         = "SQ_TLS_CA"
	tlsCertEnv       = "SQ_TLS_CERT"
	tlsKeyEnv        = "SQ_TLS_KEY"
	tlsServerNameEnv = "SQ_TLS_SERVER_NAME"
)

// tlsFlags are the persistent TLS flags of the root command.
type tlsFlags struct {
	on         bool   // --tls: TLS with the system roots
	ca         string // --tls-ca: PEM CA bundle; turns TLS on
	cert, key  string // --tls-cert, --tls-key: client certificate (mutual TLS)
	serverName string // --tls-server-name: the name checked in the server's certificate
}

func bindTLSFlags(cmd *cobra.Command, f *tlsFlags) {
	pf := cmd.PersistentFlags()
	pf.BoolVar(&f.on, "tls", false, "connect to both planes over TLS, verifying the server's certificate against the system roots (env "+tlsEnv+"=true; implied by --tls-ca)")
	pf.StringVar(&f.ca, "tls-ca", "", "PEM file of the CA certificates that verify the server's certificate; turns TLS on (env "+tlsCAEnv+"; the flag wins)")
	pf.StringVar(&f.cert, "tls-cert", "", "PEM client certificate, for a server with --tls-client-ca; with --tls-key (env "+tlsCertEnv+"; the flag wins)")
	pf.StringVar(&f.key, "tls-key", "", "PEM private key of --tls-cert (env "+tlsKeyEnv+"; the flag wins)")
	pf.StringVar(&f.serverName, "tls-server-name", "", "name the server's certificate must hold (default: the host of --server or --control) (env "+tlsServerNameEnv+"; the flag wins)")
}

// tlsConfig returns the client TLS configuration of the flags and their
// variables, or nil when TLS is off (none of --tls, --tls-ca, --tls-cert
// given). Errors name the flag or variable and the file.
func (g *globals) tlsConfig(cmd *cobra.Command) (*tls.Config, error) {
	val := func(flag, env string, v string) (string, string) {
		if f := cmd.Flags().Lookup(flag); f != nil && f.Changed {
			return v, "--" + flag
		}
		if e := g.getenv(env); e != "" {
			return e, env
		}
		return v, "--" + flag
	}
	ca, caName := val("tls-ca", tlsCAEnv, g.tls.ca)
	cert, certName := val("tls-cert", tlsCertEnv, g.tls.cert)
	key, keyName := val("tls-key", tlsKeyEnv, g.tls.key)
	serverName, _ := val("tls-server-name", tlsServerNameEnv, g.tls.serverName)
	on := g.tls.on
	if f := cmd.Flags().Lookup("tls"); (f == nil || !f.Changed) && g.getenv(tlsEnv) != "" {
		b, err := strconv.ParseBool(g.getenv(tlsEnv))
		if err != nil {
			return nil, fmt.Errorf("%s=%q: want true or false", tlsEnv, g.getenv(tlsEnv))
		}
		on = b
	}
	if !on && ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caName, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s: no PEM certificate in the file", caName, ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("%s and %s must be given together", certName, keyName)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s %s and %s %s: %w", certName, cert, keyName, key, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
