package api

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Code is a numeric error code from the catalog, sent on the wire in
// Error.code. Codes are stable: never renumber one, only add.
type Code uint16

// The error catalog (docs/architecture.md §4). Code 0 means "no error" and is never sent.
const (
	CodeNone               Code = 0
	CodeUnknown            Code = 1
	CodeUnknownTopic       Code = 2
	CodeInvalidTopicName   Code = 3
	CodeOffsetOutOfRange   Code = 4
	CodeMessageTooLarge    Code = 5
	CodeCorruptBatch       Code = 6
	CodeNotLeader          Code = 7
	CodeDiskFull           Code = 8
	CodeThrottled          Code = 9
	CodeGroupRebalancing   Code = 10
	CodeFencedGeneration   Code = 11
	CodeUnsupportedVersion Code = 12
	CodeInvalidRequest     Code = 13
	CodeTopicExists        Code = 14
	CodeUnknownPartition   Code = 15
	CodePartitionFailed    Code = 16
	CodeShuttingDown       Code = 17
	CodeInvalidConfig      Code = 18
	CodeStorageError       Code = 19
	CodeTooManyRequests    Code = 20
	CodeUnknownGroup       Code = 21
	// CodeUnknownTopicID: the request carried a topic id that is not the
	// current id of the named topic (it was deleted, or deleted and created
	// again). Not retriable unchanged: the client re-reads the metadata
	// and starts over on the topic now under that name (KIP-516).
	CodeUnknownTopicID Code = 22
	// CodeLeaderNotAvailable: the partition has a leader in the cluster
	// metadata, but that node is not alive (or the partition has no leader
	// at all). Retriable: the client waits and reads the metadata again.
	CodeLeaderNotAvailable Code = 23
	// CodeNoQuorum: the cluster metadata cannot change because this side of
	// the cluster holds no Raft majority. Retriable: it succeeds once a
	// majority of the voters is reachable again.
	CodeNoQuorum Code = 24
	// CodeCoordinatorNotAvailable: the consumer group's coordinator (the
	// node the cluster metadata assigns the group to, docs/cluster.md) is
	// not alive or not reachable, or the node that received a forwarded
	// group call is not the group's coordinator. Retriable: the client
	// waits and retries; the group works again once its coordinator does.
	CodeCoordinatorNotAvailable Code = 25
	// CodeNotEnoughReplicas: the partition's in-sync replica set has fewer
	// members than the topic's min.insync.replicas, so a publish with acks
	// all is refused before it is written (or, after it was written, not
	// acknowledged: its records are not exposed to consumers until the
	// in-sync set holds them). Retriable: it succeeds once enough replicas
	// have caught up (docs/cluster.md).
	CodeNotEnoughReplicas Code = 26
	// CodeOutOfOrderSequence: an idempotent producer's batch does not carry
	// the next sequence number the partition's leader expects of it
	// (KIP-98): a batch before it was lost. Not retriable unchanged.
	CodeOutOfOrderSequence Code = 27
	// CodeInvalidProducerEpoch: an idempotent producer's epoch is older than
	// the one the partition's leader has seen for its producer id: a newer
	// instance of the producer has taken over (KIP-98). Not retriable.
	CodeInvalidProducerEpoch Code = 28
	// CodeUnknownProducerID: the partition's leader holds no state for the
	// producer id of a batch whose sequence is not 0 (the state expired or
	// the id was never granted). Not retriable unchanged: the producer asks
	// for a new id and starts its sequences again.
	CodeUnknownProducerID Code = 29
	// CodeFencedLeaderEpoch: a request carried a leader epoch older than
	// the partition's current one (a follower or client acting on stale
	// metadata, KIP-320). Retriable after reading the metadata again.
	CodeFencedLeaderEpoch Code = 30
	// CodeUnknownLeaderEpoch: a request carried a leader epoch newer than
	// the one this node knows for the partition (its metadata lags).
	// Retriable: the node catches up with the metadata log.
	CodeUnknownLeaderEpoch Code = 31
	// CodeAuthenticationFailed: the client gave no credentials where the
	// server requires them (--auth-required), or credentials it could not
	// verify (unknown user, wrong password, failed SCRAM exchange). Not
	// retriable with the same credentials.
	CodeAuthenticationFailed Code = 32
	// CodeAuthorizationFailed: the client's principal is authenticated
	// but no ACL allows the operation on the resource, or one denies it
	// (--authorization). Not retriable until an ACL changes.
	CodeAuthorizationFailed Code = 33
)

// CatalogEntry describes one code: its NAME as printed in logs and by the
// CLI, whether a client may retry the same request unchanged, and the
// default message.
type CatalogEntry struct {
	Code      Code
	Name      string
	Retriable bool
	Message   string
}

// Catalog lists every code. Index by code: Catalog[CodeUnknownTopic].
var Catalog = [...]CatalogEntry{
	CodeNone:                    {CodeNone, "NONE", false, "no error"},
	CodeUnknown:                 {CodeUnknown, "UNKNOWN", false, "unexpected server error"},
	CodeUnknownTopic:            {CodeUnknownTopic, "UNKNOWN_TOPIC", false, "topic does not exist"},
	CodeInvalidTopicName:        {CodeInvalidTopicName, "INVALID_TOPIC_NAME", false, "invalid topic name"},
	CodeOffsetOutOfRange:        {CodeOffsetOutOfRange, "OFFSET_OUT_OF_RANGE", false, "offset outside the partition's valid range"},
	CodeMessageTooLarge:         {CodeMessageTooLarge, "MESSAGE_TOO_LARGE", false, "record, batch or frame over its limit"},
	CodeCorruptBatch:            {CodeCorruptBatch, "CORRUPT_BATCH", false, "batch failed validation"},
	CodeNotLeader:               {CodeNotLeader, "NOT_LEADER", true, "this node does not lead the partition"},
	CodeDiskFull:                {CodeDiskFull, "DISK_FULL", true, "free disk space below the floor"},
	CodeThrottled:               {CodeThrottled, "THROTTLED", true, "request throttled"},
	CodeGroupRebalancing:        {CodeGroupRebalancing, "GROUP_REBALANCING", true, "consumer group is rebalancing"},
	CodeFencedGeneration:        {CodeFencedGeneration, "FENCED_GENERATION", false, "stale consumer group generation"},
	CodeUnsupportedVersion:      {CodeUnsupportedVersion, "UNSUPPORTED_VERSION", false, "unsupported protocol version"},
	CodeInvalidRequest:          {CodeInvalidRequest, "INVALID_REQUEST", false, "malformed or invalid request"},
	CodeTopicExists:             {CodeTopicExists, "TOPIC_EXISTS", false, "topic already exists"},
	CodeUnknownPartition:        {CodeUnknownPartition, "UNKNOWN_PARTITION", false, "partition does not exist"},
	CodePartitionFailed:         {CodePartitionFailed, "PARTITION_FAILED", false, "partition is failed (corruption or I/O error); see the server log"},
	CodeShuttingDown:            {CodeShuttingDown, "SHUTTING_DOWN", true, "server is shutting down"},
	CodeInvalidConfig:           {CodeInvalidConfig, "INVALID_CONFIG", false, "invalid configuration value"},
	CodeStorageError:            {CodeStorageError, "STORAGE_ERROR", true, "storage write failed"},
	CodeTooManyRequests:         {CodeTooManyRequests, "TOO_MANY_REQUESTS", true, "too many requests in flight on this connection"},
	CodeUnknownGroup:            {CodeUnknownGroup, "UNKNOWN_GROUP", false, "consumer group has no members and no committed offsets"},
	CodeUnknownTopicID:          {CodeUnknownTopicID, "UNKNOWN_TOPIC_ID", false, "topic id is not the current id of the topic (deleted or created again)"},
	CodeLeaderNotAvailable:      {CodeLeaderNotAvailable, "LEADER_NOT_AVAILABLE", true, "the partition's leader is not alive"},
	CodeNoQuorum:                {CodeNoQuorum, "NO_QUORUM", true, "no Raft majority reachable: cluster metadata cannot change"},
	CodeCoordinatorNotAvailable: {CodeCoordinatorNotAvailable, "COORDINATOR_NOT_AVAILABLE", true, "the consumer group's coordinator is not available"},
	CodeNotEnoughReplicas:       {CodeNotEnoughReplicas, "NOT_ENOUGH_REPLICAS", true, "fewer in-sync replicas than min.insync.replicas"},
	CodeOutOfOrderSequence:      {CodeOutOfOrderSequence, "OUT_OF_ORDER_SEQUENCE", false, "idempotent producer's sequence number is not the next expected"},
	CodeInvalidProducerEpoch:    {CodeInvalidProducerEpoch, "INVALID_PRODUCER_EPOCH", false, "producer epoch is older than the partition's: a newer producer took over"},
	CodeUnknownProducerID:       {CodeUnknownProducerID, "UNKNOWN_PRODUCER_ID", false, "no state for this producer id; ask for a new one"},
	CodeFencedLeaderEpoch:       {CodeFencedLeaderEpoch, "FENCED_LEADER_EPOCH", true, "leader epoch older than the partition's current one"},
	CodeUnknownLeaderEpoch:      {CodeUnknownLeaderEpoch, "UNKNOWN_LEADER_EPOCH", true, "leader epoch newer than this node knows"},
	CodeAuthenticationFailed:    {CodeAuthenticationFailed, "AUTHENTICATION_FAILED", false, "authentication required or failed"},
	CodeAuthorizationFailed:     {CodeAuthorizationFailed, "AUTHORIZATION_FAILED", false, "not authorized for this operation on this resource"},
}

// Entry returns the catalog entry of c, or the UNKNOWN entry for a code this
// build does not know (a newer server).
func (c Code) Entry() CatalogEntry {
	if int(c) < len(Catalog) && Catalog[c].Name != "" {
		return Catalog[c]
	}
	return CatalogEntry{Code: c, Name: fmt.Sprintf("CODE_%d", uint16(c)), Message: "error code unknown to this client"}
}

// String returns the code's NAME.
func (c Code) String() string { return c.Entry().Name }

// Retriable reports whether the same request may succeed when retried.
func (c Code) Retriable() bool { return c.Entry().Retriable }

// Error is an error from the catalog with a specific message and, for range
// errors (OFFSET_OUT_OF_RANGE, commit beyond the high watermark), the valid
// range [RangeStart, RangeEnd]. Test for a code with errors.Is against the
// sentinel of that code, for example errors.Is(err, api.ErrUnknownTopic).
//
// An Error built with WrapError also keeps the error that caused it (an
// fdatasync's syscall.EIO, say), reachable with errors.Is and errors.As
// through Unwrap on the side that built it. The cause never crosses the
// wire: ToWire and the gRPC status send only the code, Message (which
// holds the cause's text with every server-side file path cut to its last
// element, see WrapError) and the range. Error, on the side that built
// it, shows the cause's full text, paths included, for the server's logs.
type Error struct {
	Code       Code
	Message    string
	RangeStart uint64
	RangeEnd   uint64
	HasRange   bool
	// LeaderID and LeaderAddr are set on NOT_LEADER when the node knows
	// the partition's leader: its node id and data-plane address
	// (host:port), so a client can go there without reading the metadata
	// first.
	LeaderID   string
	LeaderAddr string

	cause error  // local only; never encoded
	local string // Message with the cause's full text; local only
}

// NewError returns an *Error with code c and a formatted message.
func NewError(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

// WrapError returns an *Error with code c that keeps cause for errors.Is
// and errors.As (through Unwrap). Its Message, what the peer receives, is
// the formatted text, then ": " and cause's text, so the peer still reads
// why; with an empty format the message is the cause's text alone. In that
// text the path of every *fs.PathError and *os.LinkError in cause's chain
// is cut to its last element ("write 00000000000000000000.log: no space
// left on device"), so a client never learns the server's directory
// layout; Error keeps the full paths for the server's own logs. When
// cause is or wraps an *Error with the same code c, that code's "NAME: "
// is dropped from the cause's text, so the code shows once
// ("NO_QUORUM: metadata change not committed within 10s: no controller
// ..."). A nil cause gives the same error as NewError.
func WrapError(c Code, cause error, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if cause == nil {
		return &Error{Code: c, Message: msg}
	}
	join := func(text string) string {
		if msg == "" {
			return text
		}
		return msg + ": " + text
	}
	full := withoutCode(c, cause, cause.Error())
	e := &Error{Code: c, Message: join(withoutPaths(cause, full)), cause: cause}
	if e.Message != join(full) {
		e.local = join(full)
	}
	return e
}

// withoutCode returns text (err's text) without the first "NAME: " of
// code c when err's chain holds an *Error with code c, so a wrapper with
// the same code does not repeat it.
func withoutCode(c Code, err error, text string) string {
	for _, e := range chain(err) {
		if ae, ok := e.(*Error); ok && ae.Code == c {
			return strings.Replace(text, c.String()+": ", "", 1)
		}
	}
	return text
}

// withoutPaths returns text (err's text) with the path of every
// *fs.PathError and *os.LinkError in err's chain cut to its last element.
func withoutPaths(err error, text string) string {
	var paths []string
	for _, e := range chain(err) {
		switch pe := e.(type) {
		case *fs.PathError:
			paths = append(paths, pe.Path)
		case *os.LinkError:
			paths = append(paths, pe.Old, pe.New)
		}
	}
	for _, p := range paths {
		if base := filepath.Base(p); p != "" && base != p {
			text = strings.ReplaceAll(text, p, base)
		}
	}
	return text
}

// chain returns err and every error it wraps, depth first (errors.Join and
// fmt.Errorf with several %w included).
func chain(err error) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		for e != nil && len(out) < 64 {
			out = append(out, e)
			switch u := e.(type) {
			case interface{ Unwrap() []error }:
				for _, x := range u.Unwrap() {
					walk(x)
				}
				return
			case interface{ Unwrap() error }:
				e = u.Unwrap()
			default:
				return
			}
		}
	}
	walk(err)
	return out
}

// NewRangeError returns an *Error carrying the valid range [start, end].
func NewRangeError(c Code, start, end uint64, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...), RangeStart: start, RangeEnd: end, HasRange: true}
}

// Error formats as "NAME: message". On the side that built e with
// WrapError the message holds the cause's full text, server-side file
// paths included; WireText is what a peer receives.
func (e *Error) Error() string {
	if e.local != "" {
		return e.Code.String() + ": " + e.local
	}
	return e.WireText()
}

// WireText formats e as a peer receives it: "NAME: message" with Message
// (or the catalog's text when Message is empty), never the local cause's
// full text.
func (e *Error) WireText() string {
	msg := e.Message
	if msg == "" {
		msg = e.Code.Entry().Message
	}
	return e.Code.String() + ": " + msg
}

// Unwrap returns the local cause given to WrapError, or nil (always nil
// for an error decoded from the wire).
func (e *Error) Unwrap() error { return e.cause }

// Retriable reports whether the request may be retried unchanged.
func (e *Error) Retriable() bool { return e.Code.Retriable() }

// Is matches any *Error with the same code, so errors.Is(err, ErrDiskFull)
// works for errors built with NewError.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	return false
}

// Sentinels, one per code, for errors.Is.
var (
	ErrUnknown                 = &Error{Code: CodeUnknown}
	ErrUnknownTopic            = &Error{Code: CodeUnknownTopic}
	ErrInvalidTopicName        = &Error{Code: CodeInvalidTopicName}
	ErrOffsetOutOfRange        = &Error{Code: CodeOffsetOutOfRange}
	ErrMessageTooLarge         = &Error{Code: CodeMessageTooLarge}
	ErrCorruptBatch            = &Error{Code: CodeCorruptBatch}
	ErrNotLeader               = &Error{Code: CodeNotLeader}
	ErrDiskFull                = &Error{Code: CodeDiskFull}
	ErrThrottled               = &Error{Code: CodeThrottled}
	ErrGroupRebalancing        = &Error{Code: CodeGroupRebalancing}
	ErrFencedGeneration        = &Error{Code: CodeFencedGeneration}
	ErrUnsupportedVersion      = &Error{Code: CodeUnsupportedVersion}
	ErrInvalidRequest          = &Error{Code: CodeInvalidRequest}
	ErrTopicExists             = &Error{Code: CodeTopicExists}
	ErrUnknownPartition        = &Error{Code: CodeUnknownPartition}
	ErrPartitionFailed         = &Error{Code: CodePartitionFailed}
	ErrShuttingDown            = &Error{Code: CodeShuttingDown}
	ErrInvalidConfig           = &Error{Code: CodeInvalidConfig}
	ErrStorageError            = &Error{Code: CodeStorageError}
	ErrTooManyRequests         = &Error{Code: CodeTooManyRequests}
	ErrUnknownGroup            = &Error{Code: CodeUnknownGroup}
	ErrUnknownTopicID          = &Error{Code: CodeUnknownTopicID}
	ErrLeaderNotAvailable      = &Error{Code: CodeLeaderNotAvailable}
	ErrNoQuorum                = &Error{Code: CodeNoQuorum}
	ErrCoordinatorNotAvailable = &Error{Code: CodeCoordinatorNotAvailable}
	ErrNotEnoughReplicas       = &Error{Code: CodeNotEnoughReplicas}
	ErrOutOfOrderSequence      = &Error{Code: CodeOutOfOrderSequence}
	ErrInvalidProducerEpoch    = &Error{Code: CodeInvalidProducerEpoch}
	ErrUnknownProducerID       = &Error{Code: CodeUnknownProducerID}
	ErrFencedLeaderEpoch       = &Error{Code: CodeFencedLeaderEpoch}
	ErrUnknownLeaderEpoch      = &Error{Code: CodeUnknownLeaderEpoch}
	ErrAuthenticationFailed    = &Error{Code: CodeAuthenticationFailed}
	ErrAuthorizationFailed     = &Error{Code: CodeAuthorizationFailed}
)

// AsError converts err into an *Error: an *Error anywhere in its chain is
// returned as is; anything else becomes CodeUnknown with err as its cause,
// as WrapError(CodeUnknown, err, "") (file paths cut in Message).
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return WrapError(CodeUnknown, err, "")
}

// IsRetriable reports whether err carries a retriable catalog code.
func IsRetriable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retriable()
}

// ToWire fills the wire Error w from err (which must be non-nil): code,
// message and range only; a local cause is never encoded.
func ToWire(w WireError, err error) error {
	e := AsError(err)
	w.SetCode(uint16(e.Code))
	w.SetRangeStart(e.RangeStart)
	w.SetRangeEnd(e.RangeEnd)
	w.SetHasRange(e.HasRange)
	msg := e.Message
	if msg == "" {
		msg = e.Code.Entry().Message
	}
	if e.LeaderID != "" {
		if err := w.SetLeaderId(e.LeaderID); err != nil {
			return err
		}
	}
	if e.LeaderAddr != "" {
		if err := w.SetLeaderAddress(e.LeaderAddr); err != nil {
			return err
		}
	}
	return w.SetText(msg)
}

// FromWire returns the error carried by w, or nil when w is unset or code 0.
func FromWire(w WireError) error {
	if !w.IsValid() || w.Code() == 0 {
		return nil
	}
	msg, _ := w.Text()
	e := &Error{Code: Code(w.Code()), Message: msg, RangeStart: w.RangeStart(), RangeEnd: w.RangeEnd()}
	e.HasRange = w.HasRange() || e.RangeStart != 0 || e.RangeEnd != 0
	e.LeaderID, _ = w.LeaderId()
	e.LeaderAddr, _ = w.LeaderAddress()
	return e
}
