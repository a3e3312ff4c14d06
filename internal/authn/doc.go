// Package authn authenticates SQ's clients with SCRAM-SHA-256 (RFC 5802,
// "Salted Challenge Response Authentication Mechanism"; RFC 7677 for the
// SHA-256 variant) on both planes (docs/security.md, "Authentication";
// docs/architecture.md, "Authentication").
//
// A user's Credential is what the server stores: a random salt, an
// iteration count (at least MinIterations), StoredKey = H(HMAC(SaltedPassword,
// "Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"); never
// the password. The server side of the exchange is github.com/xdg-go/scram's
// ServerConversation; this package adds what a broker needs around it:
//
//   - Authenticator runs one exchange per client (Exchange.Step for each
//     client message), looks credentials up in a Store (the replicated
//     metadata), answers an unknown user with a fake salt derived from a
//     per-process secret so that the exchange does not reveal which users
//     exist (RFC 5802 §5.1), and refuses a proof after a Limiter delay.
//   - Limiter slows brute force: every failed authentication makes the next
//     attempt from the same source address, and for the same user, wait
//     longer (doubling from DefaultBaseDelay up to DefaultMaxDelay), until
//     one succeeds.
//   - Sessions issues the bearer tokens of the gRPC plane: random, bounded
//     in lifetime and count, held in memory by the node that issued them.
package authn
