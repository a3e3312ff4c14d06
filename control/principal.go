package control

import (
	"context"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/seedqueue/sq/internal/audit"
)

// requestPrincipal is the principal of the gRPC call ctx belongs to, in
// Kafka's form: "User:<name>" for a call with the session token of a
// SCRAM user (authn.go; it wins over a certificate), else "User:" and the
// subject of the client's verified certificate under mutual TLS, else
// audit.Anonymous. Every check that depends on who asked (audit) takes
// the principal from here.
func requestPrincipal(ctx context.Context) string {
	if u, ok := ctx.Value(userKey{}).(string); ok {
		return "User:" + u
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			return audit.Principal(&ti.State)
		}
	}
	return audit.Anonymous
}
