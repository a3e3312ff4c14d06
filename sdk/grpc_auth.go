package sdk

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// authenticateMethod is the one call made without a token: the exchange
// that yields it.
const authenticateMethod = "/sq.v1.Users/Authenticate"

// staleTokenText is in the server's refusal of a token it does not know
// (it restarted, or the token expired): the call is retried once with a
// new token.
const staleTokenText = "session token unknown"

// scramCreds are the per-RPC credentials of a gRPC client with a SASL
// mechanism (credentials.PerRPCCredentials): the first call to the node
// runs Users.Authenticate on the same connection, and every call carries
// "authorization: Bearer <token>"; the token is renewed when a tenth of
// its lifetime (at most a minute) is left, or when the node no longer
// knows it. One set of credentials serves one connection (one node).
type scramCreds struct {
	mech SASLMechanism

	mu   sync.Mutex
	conn *grpc.ClientConn // set once dialed
	tok  string
	renw time.Time // renew from then on
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (c *scramCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if ri, ok := credentials.RequestInfoFromContext(ctx); ok && ri.Method == authenticateMethod {
		return nil, nil
	}
	tok, err := c.token(ctx)
	if err != nil {
		return nil, authStatus(err)
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials:
// false, so that a plaintext server on a trusted network works too. The
// token is a bearer secret: use TLS beyond loopback (docs/security.md).
func (c *scramCreds) RequireTransportSecurity() bool { return false }

// token returns a valid token, authenticating when there is none.
func (c *scramCreds) token(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tok != "" && time.Now().Before(c.renw) {
		return c.tok, nil
	}
	c.tok = ""
	st, err := sqv1.NewUsersClient(c.conn).Authenticate(ctx)
	if err != nil {
		return "", fromStatus(err)
	}
	defer func() { _ = st.CloseSend() }()
	var last *sqv1.AuthenticateResponse
	err = runSASL(c.mech, func(mech string, msg []byte) ([]byte, bool, error) {
		if err := st.Send(&sqv1.AuthenticateRequest{Mechanism: mech, AuthBytes: msg}); err != nil {
			_, rerr := st.Recv()
			return nil, false, fromStatus(rerr)
		}
		r, err := st.Recv()
		if err != nil {
			return nil, false, fromStatus(err)
		}
		last = r
		return r.GetAuthBytes(), r.GetToken() != "", nil
	})
	if err != nil {
		return "", err
	}
	life := time.Duration(last.GetSessionLifetimeMs()) * time.Millisecond
	c.tok, c.renw = last.GetToken(), time.Now().Add(life-min(life/10, time.Minute))
	return c.tok, nil
}

// forget drops tok unless it was already replaced.
func (c *scramCreds) forget(tok string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tok == tok {
		c.tok = ""
	}
}

// retryUnary retries a unary call once with a new token when the node
// refused its token as unknown (it restarted, or the token expired).
func (c *scramCreds) retryUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unauthenticated && strings.Contains(st.Message(), staleTokenText) {
		c.mu.Lock()
		tok := c.tok
		c.mu.Unlock()
		c.forget(tok)
		err = invoker(ctx, method, req, reply, cc, opts...)
	}
	return err
}

// authStatus turns an authentication error into the gRPC status the
// call fails with, carrying the catalog code so that fromStatus gives
// back an error matching api.ErrAuthenticationFailed.
func authStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	e := api.AsError(err)
	code := codes.Unauthenticated
	if e.Code != api.CodeAuthenticationFailed {
		code = codes.Unavailable
	}
	st := status.New(code, e.Error())
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Domain: errorDomain, Reason: e.Code.String(),
		Metadata: map[string]string{"code": strconv.Itoa(int(e.Code))}}); derr == nil {
		st = d
	}
	return st.Err()
}
