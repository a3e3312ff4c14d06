package dataplane

import (
	"crypto/tls"

	"github.com/seedqueue/sq/internal/audit"
)

// audit writes the audit line of a request that created, altered or
// deleted something (internal/audit): action on resource, by the
// connection's principal, ended with err (nil: ok).
func (c *conn) audit(action, resource string, err error) {
	audit.Log(c.srv.opts.Logger, audit.Event{Plane: "dataplane", Action: action, Resource: resource,
		Principal: connPrincipal(c), Remote: c.remote, Err: err})
}

// connPrincipal is the principal of c: "User:<name>" once a SCRAM
// exchange authenticated it (sasl.go; it wins over a certificate), else
// the subject of its verified client certificate under mutual TLS, else
// audit.Anonymous.
func connPrincipal(c *conn) string {
	if u := c.user.Load(); u != nil {
		return "User:" + *u
	}
	if t, ok := c.nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		cs := t.ConnectionState()
		return audit.Principal(&cs)
	}
	return audit.Anonymous
}
