package meta

import (
	"maps"
	"slices"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/authn"
)

// The operations of the user store (docs/security.md, "Authentication").
const (
	// OpUpsertUser creates user Command.Name, or replaces its credential,
	// with Command.Credential (an authn.Credential: salt, iterations,
	// StoredKey, ServerKey; never a password). INVALID_REQUEST for a bad
	// name or credential, or a new user beyond MaxUsers.
	OpUpsertUser Op = "upsert-user"
	// OpDeleteUser deletes user Command.Name; INVALID_REQUEST when it does
	// not exist.
	OpDeleteUser Op = "delete-user"
)

// MaxUsers bounds State.Users.
const MaxUsers = 10000

// applyUpsertUser stores c.Credential under c.Name.
func (s *State) applyUpsertUser(c Command) Result {
	if err := authn.ValidateUserName(c.Name); err != nil {
		return refused(api.CodeInvalidRequest, "upsert-user: %v", err)
	}
	if c.Credential == nil {
		return refused(api.CodeInvalidRequest, "upsert-user %q without a credential", c.Name)
	}
	if err := c.Credential.Validate(); err != nil {
		return refused(api.CodeInvalidRequest, "upsert-user %q: %v", c.Name, err)
	}
	if _, ok := s.Users[c.Name]; !ok && len(s.Users) >= MaxUsers {
		return refused(api.CodeInvalidRequest, "upsert-user %q: the cluster has %d users, the maximum", c.Name, MaxUsers)
	}
	if s.Users == nil {
		s.Users = map[string]authn.Credential{}
	}
	s.Users[c.Name] = c.Credential.Clone()
	return Result{}
}

// applyDeleteUser deletes c.Name.
func (s *State) applyDeleteUser(c Command) Result {
	if _, ok := s.Users[c.Name]; !ok {
		return refused(api.CodeInvalidRequest, "delete-user: user %q does not exist", c.Name)
	}
	delete(s.Users, c.Name)
	if len(s.Users) == 0 {
		s.Users = nil
	}
	return Result{}
}

// cloneUsers deep-copies users; empty gives nil, so a State without users
// encodes (and hashes) as it did before users existed.
func cloneUsers(users map[string]authn.Credential) map[string]authn.Credential {
	if len(users) == 0 {
		return nil
	}
	c := make(map[string]authn.Credential, len(users))
	for name, cred := range users {
		c[name] = cred.Clone()
	}
	return c
}

// UserNames returns the names of the users in s, sorted.
func (s *State) UserNames() []string {
	return slices.Sorted(maps.Keys(s.Users))
}
