package sdk

import (
	"errors"
	"strings"

	"github.com/seedqueue/sq/api"
)

// Errors of the SDK itself. Errors from the server are *api.Error values from
// the catalog in package api: test them with errors.Is against the api
// sentinels (for example errors.Is(err, api.ErrUnknownTopic)).
var (
	// ErrClosed is returned by every method called on, or in flight during,
	// Close of a Client, Producer or Consumer.
	ErrClosed = errors.New("sdk: closed")

	// ErrConnection wraps every failure to reach the server: a failed dial
	// or handshake, or a connection lost while a request was in flight. It
	// is retriable: the next request redials (with backoff). A request
	// whose connection was lost may or may not have been carried out by the
	// server.
	ErrConnection = errors.New("sdk: connection failed")

	// ErrNoGroup is returned by Consumer.Commit when the consumer has no
	// ConsumerGroup, so there is nowhere to commit to.
	ErrNoGroup = errors.New("sdk: consumer has no consumer group")

	// ErrInvalidConfig reports a configuration the SDK rejects before
	// contacting the server: every error of a Config's Validate (which
	// Dial and each NewX call) wraps it and names the field, for example
	// "sdk: invalid configuration: ConsumerConfig.Topic is required".
	ErrInvalidConfig = errors.New("sdk: invalid configuration")

	// ErrMaxPollIntervalExceeded is the cause a Consumer reports (wrapped
	// by the next Commit, or Close with AutoCommit) for the positions it
	// could not store because it left its group: the application did not
	// call Poll for longer than ConsumerConfig.MaxPollInterval (as Kafka's
	// max.poll.interval.ms, KIP-62).
	ErrMaxPollIntervalExceeded = errors.New("sdk: no Poll within the max poll interval; the consumer left its group")

	// ErrNotAssigned is returned by Consumer.MarkProcessed and
	// Consumer.CommitOffsets for a partition the consumer does not hold:
	// never assigned, of another topic, revoked and released to another
	// member, or dropped when the member was removed from its group. Its
	// records are another member's to commit now.
	ErrNotAssigned = errors.New("sdk: partition not assigned to this consumer")

	// ErrInvalidPosition is returned by Consumer.MarkProcessed for a
	// record Poll has not returned, and by Consumer.CommitOffsets for a
	// list that names a partition twice.
	ErrInvalidPosition = errors.New("sdk: invalid position")

	// ErrUnexpectedResponse reports a response frame of the wrong kind for
	// its request: a server speaking another protocol revision.
	ErrUnexpectedResponse = errors.New("sdk: unexpected response")
)

// IsRetriable reports whether a request that failed with err may succeed when
// sent again unchanged: a connection failure (ErrConnection) or a catalog
// error whose code is retriable (api.IsRetriable: NOT_LEADER,
// LEADER_NOT_AVAILABLE, NO_QUORUM, DISK_FULL, THROTTLED, SHUTTING_DOWN,
// STORAGE_ERROR, TOO_MANY_REQUESTS, ...).
func IsRetriable(err error) bool {
	return errors.Is(err, ErrConnection) || api.IsRetriable(err)
}

// textError decodes a catalog error the gRPC API sends as a string field
// ("NAME: message", the text of an *api.Error, as in a per-partition
// commit or describe result): a NAME from the catalog gives its code and
// the message after it; any other text gives code def with the whole text.
func textError(s string, def api.Code) *api.Error {
	if name, msg, ok := strings.Cut(s, ": "); ok {
		for _, e := range api.Catalog {
			if e.Name == name && e.Code != api.CodeNone {
				return &api.Error{Code: e.Code, Message: msg}
			}
		}
	}
	return &api.Error{Code: def, Message: s}
}
