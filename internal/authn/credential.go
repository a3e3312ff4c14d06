package authn

import (
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/xdg-go/scram"
)

// MechanismSCRAMSHA256 is the SASL name of SCRAM-SHA-256 (RFC 7677), the
// one mechanism SQ offers.
const MechanismSCRAMSHA256 = "SCRAM-SHA-256"

// Bounds of Credential.Iterations. MinIterations is RFC 7677's minimum;
// MaxIterations is Kafka's (a higher count costs the server as much as the
// client at every login).
const (
	MinIterations     = 4096
	MaxIterations     = 16384
	DefaultIterations = MinIterations
)

// Sizes of the fields of a Credential, in bytes.
const (
	// SaltBytes is the size of a salt NewCredential draws.
	SaltBytes = 16
	// MaxSaltBytes bounds a salt given with pre-salted credentials.
	MaxSaltBytes = 64
	// keyBytes is the size of StoredKey and ServerKey (SHA-256).
	keyBytes = 32
	// MaxUserNameBytes bounds a user name.
	MaxUserNameBytes = 255
)

// ErrInvalid is the class of the errors of a malformed user name or
// credential (errors.Is).
var ErrInvalid = errors.New("authn: invalid")

// Credential is a user's stored SCRAM credential (RFC 5802 §3): what the
// server needs to check a proof, from which the password cannot be
// recovered short of a brute-force search over Iterations rounds of
// PBKDF2 per guess.
type Credential struct {
	// Mechanism is MechanismSCRAMSHA256.
	Mechanism string `json:"mechanism"`
	// Iterations is the PBKDF2 iteration count, MinIterations to
	// MaxIterations.
	Iterations int `json:"iterations"`
	// Salt is the random salt, 1 to MaxSaltBytes bytes.
	Salt []byte `json:"salt"`
	// StoredKey is H(ClientKey), 32 bytes.
	StoredKey []byte `json:"stored_key"`
	// ServerKey is HMAC(SaltedPassword, "Server Key"), 32 bytes.
	ServerKey []byte `json:"server_key"`
}

// NewCredential derives the credential of password with a fresh random
// salt of SaltBytes and iterations rounds (0: DefaultIterations). The
// password is normalized with SASLprep (RFC 4013) as RFC 5802 requires;
// an empty password or one SASLprep refuses is an error of class
// ErrInvalid.
func NewCredential(password string, iterations int) (Credential, error) {
	if iterations == 0 {
		iterations = DefaultIterations
	}
	if password == "" {
		return Credential{}, fmt.Errorf("%w: empty password", ErrInvalid)
	}
	salt := make([]byte, SaltBytes)
	if _, err := rand.Read(salt); err != nil {
		return Credential{}, fmt.Errorf("authn: salt: %w", err)
	}
	c, err := derive(password, salt, iterations)
	if err != nil {
		return Credential{}, err
	}
	return c, c.Validate()
}

// derive computes the credential of password, salt and iterations.
func derive(password string, salt []byte, iterations int) (Credential, error) {
	cl, err := scram.SHA256.NewClient("", password, "")
	if err != nil {
		return Credential{}, fmt.Errorf("%w: password: %v", ErrInvalid, err)
	}
	sc, err := cl.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: iterations})
	if err != nil {
		return Credential{}, fmt.Errorf("%w: password: %v", ErrInvalid, err)
	}
	return Credential{Mechanism: MechanismSCRAMSHA256, Iterations: iterations,
		Salt: salt, StoredKey: sc.StoredKey, ServerKey: sc.ServerKey}, nil
}

// CheckPassword reports whether password is the one c was derived from
// (HTTP Basic authentication of /metrics). It costs c.Iterations rounds
// of PBKDF2 and compares in constant time.
func (c Credential) CheckPassword(password string) bool {
	if c.Validate() != nil {
		return false
	}
	d, err := derive(password, c.Salt, c.Iterations)
	if err != nil {
		return false
	}
	return hmac.Equal(d.StoredKey, c.StoredKey)
}

// Validate returns an error of class ErrInvalid naming what is wrong
// with c: the mechanism, the iteration count, the salt's or a key's size.
func (c Credential) Validate() error {
	switch {
	case c.Mechanism != MechanismSCRAMSHA256:
		return fmt.Errorf("%w: mechanism %q, want %s", ErrInvalid, c.Mechanism, MechanismSCRAMSHA256)
	case c.Iterations < MinIterations || c.Iterations > MaxIterations:
		return fmt.Errorf("%w: %d iterations, want %d to %d", ErrInvalid, c.Iterations, MinIterations, MaxIterations)
	case len(c.Salt) == 0 || len(c.Salt) > MaxSaltBytes:
		return fmt.Errorf("%w: salt of %d bytes, want 1 to %d", ErrInvalid, len(c.Salt), MaxSaltBytes)
	case len(c.StoredKey) != keyBytes:
		return fmt.Errorf("%w: stored key of %d bytes, want %d", ErrInvalid, len(c.StoredKey), keyBytes)
	case len(c.ServerKey) != keyBytes:
		return fmt.Errorf("%w: server key of %d bytes, want %d", ErrInvalid, len(c.ServerKey), keyBytes)
	}
	return nil
}

// Clone returns a copy of c that shares no slice with it.
func (c Credential) Clone() Credential {
	c.Salt = append([]byte(nil), c.Salt...)
	c.StoredKey = append([]byte(nil), c.StoredKey...)
	c.ServerKey = append([]byte(nil), c.ServerKey...)
	return c
}

// AnonymousUserName is the name no user may take: User:ANONYMOUS is the
// principal of clients without credentials (Kafka's), so a user of that
// name would authenticate and still be treated as anonymous.
const AnonymousUserName = "ANONYMOUS"

// ValidateUserName returns an error of class ErrInvalid unless name is 1
// to MaxUserNameBytes bytes of valid UTF-8 without control characters
// or spaces at either end, and not AnonymousUserName.
func ValidateUserName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty user name", ErrInvalid)
	case name == AnonymousUserName:
		return fmt.Errorf("%w: user name %q is reserved: User:%s is the principal of clients without credentials", ErrInvalid, name, name)
	case len(name) > MaxUserNameBytes:
		return fmt.Errorf("%w: user name of %d bytes, at most %d", ErrInvalid, len(name), MaxUserNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: user name %q is not valid UTF-8", ErrInvalid, name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: user name %q holds a control character", ErrInvalid, name)
		}
	}
	first, _ := utf8.DecodeRuneInString(name)
	last, _ := utf8.DecodeLastRuneInString(name)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return fmt.Errorf("%w: user name %q begins or ends with a space", ErrInvalid, name)
	}
	return nil
}
