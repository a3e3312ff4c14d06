package authn

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xdg-go/scram"

	"github.com/seedqueue/sq/api"
)

// Store is where the Authenticator reads users' credentials: the
// replicated metadata of the cluster.
type Store interface {
	// Credential returns the credential of user name; ok is false for an
	// unknown user. err is set when users cannot be read at all (a node
	// without the metadata log); its text tells the client why.
	Credential(name string) (c Credential, ok bool, err error)
}

// ErrUnavailable is the Store error of a node that has no user store.
var ErrUnavailable = errors.New("users are unavailable on this node: it runs without the metadata log (the gRPC plane is off) or has not joined its cluster yet; without --grpc-host authenticate with a client certificate")

// Authenticator runs the server side of SCRAM-SHA-256 exchanges against a
// Store, slowing brute force with a Limiter. Safe for concurrent use.
type Authenticator struct {
	store   Store
	limiter *Limiter
	secret  []byte // per process: the fake salts of unknown users
}

// NewAuthenticator returns an Authenticator over store and limiter (a
// NewLimiter(nil) when nil).
func NewAuthenticator(store Store, limiter *Limiter) *Authenticator {
	if limiter == nil {
		limiter = NewLimiter(nil)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	return &Authenticator{store: store, limiter: limiter, secret: secret}
}

// Limiter returns the Authenticator's Limiter.
func (a *Authenticator) Limiter() *Limiter { return a.limiter }

// failed is the AUTHENTICATION_FAILED error of an exchange. It names the
// user but never says whether the user exists.
func failed(user string) error {
	if user == "" {
		return api.NewError(api.CodeAuthenticationFailed, "SCRAM authentication failed")
	}
	return api.NewError(api.CodeAuthenticationFailed, "SCRAM authentication of user %q failed: unknown user or wrong password", user)
}

// Start begins an exchange with mechanism from source (the client's
// host:port). AUTHENTICATION_FAILED for a mechanism other than
// MechanismSCRAMSHA256.
func (a *Authenticator) Start(mechanism, source string) (*Exchange, error) {
	if mechanism != MechanismSCRAMSHA256 {
		return nil, api.NewError(api.CodeAuthenticationFailed, "SASL mechanism %q is not supported; the server supports %s", mechanism, MechanismSCRAMSHA256)
	}
	e := &Exchange{a: a, source: source}
	srv, err := scram.SHA256.NewServer(e.lookup)
	if err != nil {
		return nil, fmt.Errorf("authn: %w", err)
	}
	e.conv = srv.NewConversation()
	return e, nil
}

// Exchange is one client's SCRAM exchange (RFC 5802 §3): Step takes the
// client-first message and answers the server-first one, then takes the
// client-final message and, after the Limiter's delay, answers the
// server-final one when the proof is right. Not safe for concurrent use.
type Exchange struct {
	a        *Authenticator
	conv     *scram.ServerConversation
	source   string
	user     string     // from the client-first message
	cred     Credential // the user's, when known
	known    bool
	storeErr error
	badName  error // the client-first message's user name is not a valid one
	steps    int
	ok       bool
}

// lookup is the exchange's scram.CredentialLookup. An unknown user gets a
// fake credential derived from the process secret (the same salt on every
// attempt, as a real user's), which no proof matches.
//
// A name no user can have (ValidateUserName: over MaxUserNameBytes, a
// control character) ends the exchange without being kept: neither the
// Limiter's records nor the error hold a client's megabyte-long name.
func (e *Exchange) lookup(name string) (scram.StoredCredentials, error) {
	if err := ValidateUserName(name); err != nil {
		e.badName = err
		return scram.StoredCredentials{}, err
	}
	e.user = name
	c, ok, err := e.a.store.Credential(name)
	if err != nil {
		e.storeErr = err
		return scram.StoredCredentials{}, err
	}
	if ok && c.Validate() == nil {
		e.cred, e.known = c, true
		return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(c.Salt), Iters: c.Iterations},
			StoredKey: c.StoredKey, ServerKey: c.ServerKey}, nil
	}
	mac := hmac.New(sha256.New, e.a.secret)
	mac.Write([]byte("salt\x00" + name))
	salt := mac.Sum(nil)[:SaltBytes]
	key := make([]byte, keyBytes)
	_, _ = rand.Read(key)
	return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(salt), Iters: DefaultIterations},
		StoredKey: key, ServerKey: key}, nil
}

// Step feeds the next client message and returns the server's answer;
// done is true once the exchange succeeded (User and Credential are then
// set). Any failure ends the exchange with AUTHENTICATION_FAILED (counted
// by the Limiter), as does a step after the end; ctx bounds the Limiter's
// wait.
func (e *Exchange) Step(ctx context.Context, msg []byte) (resp []byte, done bool, err error) {
	e.steps++
	switch e.steps {
	case 1:
		out, err := e.conv.Step(string(msg))
		if err != nil {
			return nil, false, e.fail()
		}
		// Acting as another user (an authorization identity) is not
		// supported.
		if z := e.conv.AuthzID(); z != "" && z != e.user {
			return nil, false, e.fail()
		}
		return []byte(out), false, nil
	case 2:
		if err := e.wait(ctx); err != nil {
			return nil, false, err
		}
		out, err := e.conv.Step(string(msg))
		if err != nil || !e.conv.Valid() || !e.known {
			return nil, false, e.fail()
		}
		e.ok = true
		e.a.limiter.Succeeded(e.source, e.user)
		return []byte(out), true, nil
	}
	return nil, false, api.NewError(api.CodeAuthenticationFailed, "SCRAM exchange already ended")
}

// wait sleeps the Limiter's delay for the exchange's source and user.
func (e *Exchange) wait(ctx context.Context) error {
	d := e.a.limiter.Delay(e.source, e.user)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return api.WrapError(api.CodeAuthenticationFailed, ctx.Err(), "SCRAM authentication abandoned")
	}
}

// fail ends the exchange: the store's error when users are unavailable,
// else a failure the Limiter counts. The library's reason (a bad nonce, a
// wrong proof, an authorization identity other than the user) is not sent:
// it could tell a client which part of its message was wrong.
func (e *Exchange) fail() error {
	e.steps = 3
	if e.storeErr != nil {
		return api.WrapError(api.CodeAuthenticationFailed, e.storeErr, "%s", e.storeErr.Error())
	}
	e.a.limiter.Failed(e.source, e.user)
	if e.badName != nil {
		return api.NewError(api.CodeAuthenticationFailed, "SCRAM authentication failed: %s", strings.TrimPrefix(e.badName.Error(), ErrInvalid.Error()+": "))
	}
	return failed(e.user)
}

// User returns the authenticated user, "" until the exchange succeeded.
func (e *Exchange) User() string {
	if !e.ok {
		return ""
	}
	return e.user
}

// Credential returns the credential the user authenticated with (valid
// once the exchange succeeded).
func (e *Exchange) Credential() Credential { return e.cred }

// Store returns the Authenticator's Store.
func (a *Authenticator) Store() Store { return a.store }

// CheckPassword authenticates user with a plain password (HTTP Basic
// authentication of /metrics) under the same brute-force rules as an
// exchange: it waits the Limiter's delay for source and user, then
// compares. AUTHENTICATION_FAILED when the password is wrong, the user
// unknown or its name invalid (ValidateUserName), or the Store's error.
func (a *Authenticator) CheckPassword(ctx context.Context, source, user, password string) error {
	if err := ValidateUserName(user); err != nil {
		// A name no user can have is neither looked up nor kept by the
		// Limiter, as in an exchange.
		e := &Exchange{a: a, source: source, badName: err}
		return e.fail()
	}
	e := &Exchange{a: a, source: source, user: user}
	if err := e.wait(ctx); err != nil {
		return err
	}
	c, ok, err := a.store.Credential(user)
	if err != nil {
		return api.WrapError(api.CodeAuthenticationFailed, err, "%s", err.Error())
	}
	if !ok || !c.CheckPassword(password) {
		a.limiter.Failed(source, user)
		return failed(user)
	}
	a.limiter.Succeeded(source, user)
	return nil
}
