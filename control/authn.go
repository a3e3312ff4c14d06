package control

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/audit"
)

// userKey is the context key of the SCRAM user a call authenticated as
// (its session token); requestPrincipal reads it.
type userKey struct{}

// anonymousMethod reports whether method may be called without
// credentials even with Options.AuthRequired: health checks and the
// exchange that yields the credentials.
func anonymousMethod(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") || method == "/sq.v1.Users/Authenticate"
}

// bearerToken returns the token of the call's "authorization: Bearer
// <token>" metadata, "" without one. The scheme's case does not matter
// (RFC 7235 §2.1: "bearer" is "Bearer").
func bearerToken(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
	}
	return ""
}

// authenticate resolves who made the call: a session token (which must be
// one this node issued, unexpired, for a user whose credential has not
// changed since) puts its user in the returned context. With
// Options.AuthRequired a call without a valid token or a verified client
// certificate is refused, but anonymousMethod's. A wrong token is refused
// whatever the setting: the client believes it is someone.
func (s *Server) authenticate(ctx context.Context, method string) (context.Context, error) {
	if tok := bearerToken(ctx); tok != "" && method != "/sq.v1.Users/Authenticate" {
		user, ok := s.sessionUser(tok)
		if !ok {
			return ctx, ToStatus(api.NewError(api.CodeAuthenticationFailed, "session token unknown to this node or expired: authenticate again"))
		}
		return context.WithValue(ctx, userKey{}, user), nil
	}
	if !s.opts.AuthRequired || anonymousMethod(method) || requestPrincipal(ctx) != audit.Anonymous {
		return ctx, nil
	}
	return ctx, ToStatus(api.NewError(api.CodeAuthenticationFailed,
		"authentication required: authenticate with SCRAM-SHA-256 (sq --user, SDK SASL) or a client certificate"))
}

// sessionUser returns the user of a token this node issued, while the
// user's credential is the one it authenticated with.
func (s *Server) sessionUser(tok string) (string, bool) {
	user, key, ok := s.opts.Sessions.Lookup(tok)
	if !ok || s.opts.Authenticator == nil {
		return "", false
	}
	c, ok, err := s.opts.Authenticator.Store().Credential(user)
	if err != nil || !ok || string(c.StoredKey) != string(key) {
		return "", false
	}
	return user, true
}

// authUnary is the first unary interceptor: authenticate.
func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := s.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// authStream is the first stream interceptor: authenticate.
func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := s.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &ctxStream{ServerStream: ss, ctx: ctx})
}

// ctxStream is a ServerStream with another context.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *ctxStream) Context() context.Context { return c.ctx }

// metricsAuth wraps the /metrics handler: with Options.MetricsAuth a
// request needs a verified client certificate or HTTP Basic credentials
// of a user (checked under the brute-force rules of authn); 401 with a
// Basic challenge otherwise.
func (s *Server) metricsAuth(h http.Handler) http.Handler {
	if !s.opts.MetricsAuth {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && audit.Principal(r.TLS) != audit.Anonymous {
			h.ServeHTTP(w, r)
			return
		}
		user, password, ok := r.BasicAuth()
		if ok && s.opts.Authenticator != nil {
			err := s.opts.Authenticator.CheckPassword(r.Context(), r.RemoteAddr, user, password)
			if err == nil {
				h.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="sq", charset="UTF-8"`)
		http.Error(w, "authentication required: a client certificate or the credentials of a user", http.StatusUnauthorized)
	})
}

// peerAddr returns the client's address of the call, "" when unknown.
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
