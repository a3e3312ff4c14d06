package main

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/netip"
)

// validateAuth checks the authentication flags against the rest:
// --auth-required on a node that joins a cluster needs --tls-client-ca
// (nodes authenticate to each other by certificate: replica fetches,
// forwarded calls and joins carry no user), and on a node without the
// metadata log (no --grpc-host, so no users) it needs client
// certificates too, or nothing could authenticate.
func (c *config) validateAuth() []error {
	var errs []error
	if !c.AuthRequired {
		return nil
	}
	if c.TLSClientCA == "" && len(c.seeds()) > 0 {
		errs = append(errs, errors.New("--auth-required in a cluster (--seeds) needs --tls-client-ca: nodes authenticate to each other with their certificates (docs/security.md, \"Authentication\")"))
	}
	if c.TLSClientCA == "" && !c.clustered() {
		errs = append(errs, errors.New("--auth-required without --grpc-host needs --tls-client-ca: without the gRPC plane there is no metadata log and so no users, and clients can only authenticate by certificate"))
	}
	return errs
}

// warnAuth logs a WARN for each plane that listens beyond loopback while
// --auth-required is off: anyone who reaches it may publish, read and
// delete.
func (c *config) warnAuth(log *slog.Logger) {
	if c.AuthRequired {
		return
	}
	for _, l := range []struct{ plane, flag, addr string }{
		{"data plane", "--capnp-host", c.CapnpHost}, {"gRPC", "--grpc-host", c.GRPCHost},
	} {
		if l.addr != "" && !loopbackOnly(l.addr) {
			log.Warn("listening beyond loopback without --auth-required: any client that reaches this address can publish, read and delete (docs/security.md)",
				"plane", l.plane, "flag", l.flag, "addr", l.addr)
		}
	}
	if c.HTTPHost != "" && !loopbackOnly(c.HTTPHost) && !c.MetricsAuth {
		log.Info("/metrics is served beyond loopback without --metrics-auth", "addr", c.HTTPHost)
	}
}

// loopbackOnly reports whether a listen address host:port accepts only
// loopback connections: "localhost" or a loopback IP (an empty host,
// 0.0.0.0 and :: listen everywhere).
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// clientPlaneTLS is the server TLS configuration of the planes clients
// use (data plane, gRPC, HTTP): cfg, except that with --auth-required
// and --tls-client-ca a client certificate is verified when one is given
// but no longer required, so that a client without one may authenticate
// with SCRAM instead (--auth-required refuses it everything else until
// then). Nodes still present theirs, and Raft keeps requiring one.
func (c *config) clientPlaneTLS(cfg *tls.Config) *tls.Config {
	if !c.AuthRequired || c.TLSClientCA == "" || cfg == nil {
		return cfg
	}
	out := cfg.Clone()
	get := cfg.GetConfigForClient
	out.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		x, err := get(h)
		if err == nil && x != nil && x.ClientAuth == tls.RequireAndVerifyClientCert {
			x.ClientAuth = tls.VerifyClientCertIfGiven
		}
		return x, err
	}
	return out
}
