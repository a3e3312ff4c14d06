// Package audit writes the servers' audit lines: one line for every
// request that creates, alters or deletes something (topics, partitions,
// consumer groups and their offsets, cluster members, users), on either plane,
// with who asked, from where, and how it ended (docs/security.md,
// "Audit log").
//
// A line is a slog record at INFO with the message "audit" and the
// attributes action (for example "topic.create"), resource (the topic,
// group or node), principal, remote (the client's address), plane ("grpc"
// or "dataplane") and result ("ok", or the error code and text). The
// principal is Kafka's form: "User:" and the name of a SCRAM-authenticated
// user, else the subject of the client's verified TLS certificate under
// mutual TLS, else "User:ANONYMOUS". Audit
// lines are never dropped by the server's log rate limit.
package audit

import (
	"context"
	"crypto/tls"
	"log/slog"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/ratelog"
)

// Anonymous is the principal of a client without a verified certificate.
const Anonymous = "User:ANONYMOUS"

// Event is one audited request.
type Event struct {
	// Plane is "grpc" or "dataplane".
	Plane string
	// Action names the operation, "<resource kind>.<verb>": topic.create,
	// topic.alter, topic.delete, topic.restore, partitions.create,
	// group.delete, group.reset-offsets, cluster.remove-node, cluster.drain,
	// cluster.undrain, quota.set, quota.remove, acl.create, acl.delete,
	// user.create (a user created or its credential replaced), user.delete.
	Action string
	// Resource is the topic, group or node the request names.
	Resource string
	// Principal is who asked (Principal, or Anonymous).
	Principal string
	// Remote is the client's address, host:port.
	Remote string
	// Err is the request's error, nil when it succeeded.
	Err error
	// Result, when set, is written instead of Err's text (a plane that
	// holds the error in its own form, as a gRPC status).
	Result string
}

// Log writes e to l (slog.Default when nil) as one INFO line.
func Log(l *slog.Logger, e Event) {
	if l == nil {
		l = slog.Default()
	}
	result := "ok"
	switch {
	case e.Result != "":
		result = e.Result
	case e.Err != nil:
		result = api.AsError(e.Err).Error() // "CODE: text"
	}
	principal := e.Principal
	if principal == "" {
		principal = Anonymous
	}
	l.LogAttrs(ratelog.Unlimited(context.Background()), slog.LevelInfo, "audit",
		slog.String("action", e.Action), slog.String("resource", e.Resource),
		slog.String("principal", principal), slog.String("remote", e.Remote),
		slog.String("plane", e.Plane), slog.String("result", result))
}

// Principal returns the principal of a TLS connection's state: "User:"
// and the subject of the first verified peer certificate (mutual TLS), or
// Anonymous without one (no TLS, or no client certificate).
func Principal(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Anonymous
	}
	return "User:" + cs.VerifiedChains[0][0].Subject.String()
}
