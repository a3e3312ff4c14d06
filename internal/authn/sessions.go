package authn

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// Defaults of Sessions.
const (
	// DefaultSessionLifetime is how long a token stays valid.
	DefaultSessionLifetime = time.Hour
	// DefaultMaxSessions bounds the tokens a node holds at once.
	DefaultMaxSessions = 65536
	// tokenBytes is the entropy of a token.
	tokenBytes = 32
)

// Sessions holds the bearer tokens a node issued after a successful SCRAM
// exchange on the gRPC plane (Authenticate): a token is 32 random bytes,
// base64url without padding; it is valid on the node that issued it for
// its lifetime, and is forgotten when the process stops. At most max
// tokens are held: a new one beyond drops the expired ones, then the one
// nearest its expiry. Tokens are kept by their SHA-256, so neither a map
// lookup's timing nor a memory dump gives one away. Safe for concurrent
// use.
type Sessions struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.Mutex
	m  map[[sha256.Size]byte]session
}

// session is what a token stands for.
type session struct {
	user      string
	storedKey string // the credential it was issued under
	expires   time.Time
}

// NewSessions returns a token store whose tokens live ttl (0:
// DefaultSessionLifetime), holding at most max (0: DefaultMaxSessions),
// with the clock now (nil: time.Now).
func NewSessions(ttl time.Duration, max int, now func() time.Time) *Sessions {
	if ttl <= 0 {
		ttl = DefaultSessionLifetime
	}
	if max <= 0 {
		max = DefaultMaxSessions
	}
	if now == nil {
		now = time.Now
	}
	return &Sessions{ttl: ttl, max: max, now: now, m: map[[sha256.Size]byte]session{}}
}

// Lifetime is how long a token stays valid after Issue.
func (s *Sessions) Lifetime() time.Duration { return s.ttl }

// Issue returns a new token for user, authenticated with the credential
// whose StoredKey is storedKey, and its expiry.
func (s *Sessions) Issue(user string, storedKey []byte) (string, time.Time) {
	raw := make([]byte, tokenBytes)
	_, _ = rand.Read(raw) // crypto/rand.Read never fails (Go 1.24+)
	token := base64.RawURLEncoding.EncodeToString(raw)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= s.max {
		s.evict(now)
	}
	exp := now.Add(s.ttl)
	s.m[sha256.Sum256([]byte(token))] = session{user: user, storedKey: string(storedKey), expires: exp}
	return token, exp
}

// evict drops the expired tokens, and the one nearest its expiry when
// none has expired.
func (s *Sessions) evict(now time.Time) {
	var first [sha256.Size]byte
	var firstExp time.Time
	for k, v := range s.m {
		if !now.Before(v.expires) {
			delete(s.m, k)
		} else if firstExp.IsZero() || v.expires.Before(firstExp) {
			first, firstExp = k, v.expires
		}
	}
	if len(s.m) >= s.max {
		delete(s.m, first)
	}
}

// Lookup returns the user of token and the StoredKey of the credential it
// was issued under; ok is false for a token this node did not issue or
// that expired.
func (s *Sessions) Lookup(token string) (user string, storedKey []byte, ok bool) {
	k := sha256.Sum256([]byte(token))
	s.mu.Lock()
	defer s.mu.Unlock()
	v, found := s.m[k]
	if !found {
		return "", nil, false
	}
	if !s.now().Before(v.expires) {
		delete(s.m, k)
		return "", nil, false
	}
	return v.user, []byte(v.storedKey), true
}

// Len returns the number of tokens held (expired ones included until
// they are dropped).
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
