package control

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/internal/authn"
)

// UserBackend is the user store of the replicated metadata
// (gossip.Node implements it): the Users service reads and changes it.
// Its errors are catalog errors (INVALID_REQUEST, NO_QUORUM).
type UserBackend interface {
	authn.Store
	// Users returns every user's credential (do not modify).
	Users() map[string]authn.Credential
	// UpsertUser creates user name or replaces its credential.
	UpsertUser(ctx context.Context, name string, c authn.Credential) error
	// DeleteUser deletes user name.
	DeleteUser(ctx context.Context, name string) error
}

// SetUsers attaches the user store; until then (and on a node without the
// metadata log) the Users service answers FailedPrecondition.
func (s *Server) SetUsers(b UserBackend) { s.users.Store(&b) }

// userBackend returns the store or the error that says it is missing.
func (s *Server) userBackend() (UserBackend, error) {
	if p := s.users.Load(); p != nil {
		return *p, nil
	}
	return nil, status.Error(codes.FailedPrecondition, authn.ErrUnavailable.Error())
}

// authExchangeTimeout bounds one Authenticate stream.
const authExchangeTimeout = 30 * time.Second

// usersService implements sq.v1.Users.
type usersService struct {
	sqv1.UnimplementedUsersServer
	s *Server
}

// invalidText is the text of a refusal of authn (ErrInvalid's "authn:
// invalid: " left out: the code says it), said once.
func invalidText(err error) string {
	return strings.TrimPrefix(err.Error(), authn.ErrInvalid.Error()+": ")
}

// CreateUser implements sq.v1.Users.
func (u *usersService) CreateUser(ctx context.Context, req *sqv1.CreateUserRequest) (*sqv1.CreateUserResponse, error) {
	b, err := u.s.userBackend()
	if err != nil {
		return nil, err
	}
	if err := authn.ValidateUserName(req.GetName()); err != nil {
		return nil, ToStatus(api.NewError(api.CodeInvalidRequest, "%s", invalidText(err)))
	}
	var cred authn.Credential
	switch {
	case req.GetCredential() != nil:
		c := req.GetCredential()
		cred = authn.Credential{Mechanism: c.GetMechanism(), Iterations: int(c.GetIterations()),
			Salt: c.GetSalt(), StoredKey: c.GetStoredKey(), ServerKey: c.GetServerKey()}
		err = cred.Validate()
	case req.GetPassword() != "":
		it := int(req.GetIterations())
		if it != 0 && (it < authn.MinIterations || it > authn.MaxIterations) {
			err = errors.New("iterations must be 4096 to 16384")
		} else {
			cred, err = authn.NewCredential(req.GetPassword(), it)
		}
	default:
		err = errors.New("a password or a credential is required")
	}
	if err != nil {
		return nil, ToStatus(api.NewError(api.CodeInvalidRequest, "user %q: %s", req.GetName(), invalidText(err)))
	}
	if err := b.UpsertUser(ctx, req.GetName(), cred); err != nil {
		return nil, ToStatus(err)
	}
	return &sqv1.CreateUserResponse{}, nil
}

// DeleteUser implements sq.v1.Users.
func (u *usersService) DeleteUser(ctx context.Context, req *sqv1.DeleteUserRequest) (*sqv1.DeleteUserResponse, error) {
	b, err := u.s.userBackend()
	if err != nil {
		return nil, err
	}
	if err := b.DeleteUser(ctx, req.GetName()); err != nil {
		return nil, ToStatus(err)
	}
	return &sqv1.DeleteUserResponse{}, nil
}

// ListUsers implements sq.v1.Users.
func (u *usersService) ListUsers(context.Context, *sqv1.ListUsersRequest) (*sqv1.ListUsersResponse, error) {
	b, err := u.s.userBackend()
	if err != nil {
		return nil, err
	}
	users := b.Users()
	out := &sqv1.ListUsersResponse{}
	for name, c := range users {
		out.Users = append(out.Users, &sqv1.UserInfo{Name: name, Mechanism: c.Mechanism, Iterations: int32(c.Iterations)})
	}
	slices.SortFunc(out.Users, func(a, b *sqv1.UserInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Authenticate implements sq.v1.Users: one SCRAM exchange, then a session
// token.
func (u *usersService) Authenticate(stream sqv1.Users_AuthenticateServer) error {
	a := u.s.opts.Authenticator
	if a == nil {
		return ToStatus(api.NewError(api.CodeAuthenticationFailed, "authentication is not available on this server: it has no user store"))
	}
	ctx, cancel := context.WithTimeout(stream.Context(), authExchangeTimeout)
	defer cancel()
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	ex, err := a.Start(req.GetMechanism(), peerAddr(ctx))
	if err != nil {
		return ToStatus(err)
	}
	for {
		out, done, err := ex.Step(ctx, req.GetAuthBytes())
		if err != nil {
			return ToStatus(err)
		}
		resp := &sqv1.AuthenticateResponse{AuthBytes: out}
		if done {
			tok, _ := u.s.opts.Sessions.Issue(ex.User(), ex.Credential().StoredKey)
			resp.Token = tok
			resp.SessionLifetimeMs = u.s.opts.Sessions.Lifetime().Milliseconds()
			return stream.Send(resp)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		if req, err = stream.Recv(); err != nil {
			return err
		}
	}
}
