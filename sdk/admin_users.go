package sdk

import (
	"context"
	"crypto/rand"

	"github.com/xdg-go/scram"
	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// User is one user of SCRAM authentication as ListUsers describes it.
type User struct {
	Name       string
	Mechanism  string // "SCRAM-SHA-256"
	Iterations int    // PBKDF2 iterations of its credential
}

// scramSaltBytes is the salt CreateUser draws.
const scramSaltBytes = 16

// CreateUser creates user name, or replaces its credential, for the
// SCRAM-SHA-256 password password with iterations PBKDF2 rounds (0:
// 4096; 4096 to 16384). The credential (salt, StoredKey, ServerKey) is
// derived here, so the password never reaches the server. Errors:
// INVALID_REQUEST for a bad name, password or iteration count, those of
// the call.
func (a *Admin) CreateUser(ctx context.Context, name, password string, iterations int) error {
	if iterations == 0 {
		iterations = 4096
	}
	if password == "" {
		return api.NewError(api.CodeInvalidRequest, "user %q: empty password", name)
	}
	c, err := scram.SHA256.NewClient(name, password, "")
	if err != nil {
		return api.WrapError(api.CodeInvalidRequest, err, "user %q", name)
	}
	salt := make([]byte, scramSaltBytes)
	_, _ = rand.Read(salt)
	sc, err := c.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: iterations})
	if err != nil {
		return api.WrapError(api.CodeInvalidRequest, err, "user %q", name)
	}
	_, err = unary(ctx, a.cfg.RequestTimeout, sqv1.NewUsersClient(a.conn).CreateUser, &sqv1.CreateUserRequest{Name: name,
		Secret: &sqv1.CreateUserRequest_Credential{Credential: &sqv1.ScramCredential{Mechanism: scramMechanism,
			Iterations: int32(iterations), Salt: salt, StoredKey: sc.StoredKey, ServerKey: sc.ServerKey}}})
	return err
}

// DeleteUser deletes user name. INVALID_REQUEST for an unknown user.
func (a *Admin) DeleteUser(ctx context.Context, name string) error {
	_, err := unary(ctx, a.cfg.RequestTimeout, sqv1.NewUsersClient(a.conn).DeleteUser, &sqv1.DeleteUserRequest{Name: name})
	return err
}

// ListUsers lists the users in name order (never their credentials).
func (a *Admin) ListUsers(ctx context.Context) ([]User, error) {
	r, err := unary(ctx, a.cfg.RequestTimeout, sqv1.NewUsersClient(a.conn).ListUsers, &sqv1.ListUsersRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]User, len(r.GetUsers()))
	for i, u := range r.GetUsers() {
		out[i] = User{Name: u.GetName(), Mechanism: u.GetMechanism(), Iterations: int(u.GetIterations())}
	}
	return out, nil
}

// Conn returns the Admin's gRPC connection, with its TLS and SASL
// credentials, for the sq.v1 calls the Admin does not wrap.
func (a *Admin) Conn() *grpc.ClientConn { return a.conn }
