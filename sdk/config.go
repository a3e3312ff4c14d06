package sdk

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Named "off" values. A field that can be turned off takes its named
// value, never an arbitrary negative number: Validate refuses any other
// negative value, naming the field and the value to use instead. Each is
// -1 (one nanosecond below zero for a duration), so configurations written
// with -1 before these names existed keep their meaning.
const (
	// LingerNone, as BatchProducerConfig.Linger, sends a partition's open
	// batch as soon as the partition has no batch in flight, without
	// waiting for more records: it then holds the records sent while the
	// previous batch was in flight.
	LingerNone time.Duration = -1
	// RetriesNone, as ProducerConfig.Retries (and GrpcProducerConfig's),
	// sends each batch once: a retriable failure is returned at once.
	RetriesNone = -1
	// CloseTimeoutNone, as ConsumerConfig.CloseTimeout (and
	// GrpcConsumerConfig's), puts no bound on Close as a whole; each of
	// its requests is still bounded by RequestTimeout.
	CloseTimeoutNone time.Duration = -1
	// MaxPollIntervalNone, as ConsumerConfig.MaxPollInterval, lets a group
	// member go any time without calling Poll and keep its partitions.
	MaxPollIntervalNone time.Duration = -1
)

// The bounds within which the server keeps a group member's session
// timeout (sq-server's group coordinator, docs/architecture.md §6).
const (
	minSessionTimeout = 100 * time.Millisecond
	maxSessionTimeout = 5 * time.Minute
)

// configCheck collects the problems of one configuration struct, each an
// error wrapping ErrInvalidConfig that names the field ("ProducerConfig.
// Retries") and says what is accepted.
type configCheck struct {
	typ  string
	errs []error
}

func (c *configCheck) add(field, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: %s.%s %s", ErrInvalidConfig, c.typ, field, fmt.Sprintf(format, args...)))
}

// nonNegative refuses a negative duration: 0 takes the default.
func (c *configCheck) nonNegative(field string, d time.Duration) {
	if d < 0 {
		c.add(field, "is %v: want 0 (the default) or a positive duration", d)
	}
}

// count refuses a negative count: 0 takes the default.
func (c *configCheck) count(field string, n int) {
	if n < 0 {
		c.add(field, "is %d: want 0 (the default) or a positive count", n)
	}
}

// offValue refuses a negative duration other than the field's named "off"
// value.
func (c *configCheck) offValue(field string, d, off time.Duration, name, means string) {
	if d < 0 && d != off {
		c.add(field, "is %v: want 0 (the default), a positive duration, or sdk.%s for %s", d, name, means)
	}
}

// backoff refuses a negative backoff or a cap below an explicit first wait.
func (c *configCheck) backoff(field string, first, maxWait time.Duration) {
	c.nonNegative(field, first)
	c.nonNegative(field+"Max", maxWait)
	if first > 0 && maxWait > 0 && maxWait < first {
		c.add(field+"Max", "is %v, below %s %v: the cap must be at least the first wait (or 0 for the default)", maxWait, field, first)
	}
}

// utf8 refuses a string that is not valid UTF-8: the server refuses such
// names (they cross both planes as strings).
func (c *configCheck) utf8(field, s string) {
	if !utf8.ValidString(s) {
		c.add(field, "%q is not valid UTF-8", s)
	}
}

// maxIDLength is the longest group id, and client id of a gRPC group
// member, the server accepts, in bytes.
const maxIDLength = 255

// id refuses a string that is not valid UTF-8 or is longer than
// maxIDLength bytes, as the server would at the join.
func (c *configCheck) id(field, s string) {
	c.utf8(field, s)
	if len(s) > maxIDLength {
		c.add(field, "is %d bytes: want at most %d", len(s), maxIDLength)
	}
}

func (c *configCheck) err() error { return errors.Join(c.errs...) }

// connection checks the connection fields ProducerConfig and
// ConsumerConfig share with ClientConfig.
func (c *configCheck) connection(clientID string, dial, request, reconnect, reconnectMax time.Duration) {
	c.utf8("ClientID", clientID)
	c.nonNegative("DialTimeout", dial)
	c.nonNegative("RequestTimeout", request)
	c.backoff("ReconnectBackoff", reconnect, reconnectMax)
}

// Validate reports every impossible value of c, each as an error wrapping
// ErrInvalidConfig that names the field; zero fields are valid (they take
// their defaults). Dial calls it.
func (c ClientConfig) Validate() error {
	ck := configCheck{typ: "ClientConfig"}
	ck.connection(c.ClientID, c.DialTimeout, c.RequestTimeout, c.ReconnectBackoff, c.ReconnectBackoffMax)
	return ck.err()
}

// Validate reports every impossible value of c, as ClientConfig.Validate
// does: a negative duration or count, Retries below zero other than
// RetriesNone, RetryBackoffMax below RetryBackoff, an Acks other than
// AcksAll and AcksLeader. NewProducer calls it.
func (c ProducerConfig) Validate() error {
	ck := configCheck{typ: "ProducerConfig"}
	c.check(&ck)
	return ck.err()
}

func (c ProducerConfig) check(ck *configCheck) {
	ck.connection(c.ClientID, c.DialTimeout, c.RequestTimeout, c.ReconnectBackoff, c.ReconnectBackoffMax)
	if c.Retries < 0 && c.Retries != RetriesNone {
		ck.add("Retries", "is %d: want 0 (the default, %d), a positive count, or sdk.RetriesNone to send each batch once", c.Retries, DefaultRetries)
	}
	ck.backoff("RetryBackoff", c.RetryBackoff, c.RetryBackoffMax)
	ck.nonNegative("MetadataMaxAge", c.MetadataMaxAge)
	ck.nonNegative("DeliveryTimeout", c.DeliveryTimeout)
	ck.acks(c.Acks)
}

// Validate reports every impossible value of c: those of its
// ProducerConfig, a Linger below zero other than LingerNone, and a
// negative size or count. NewBatchProducer calls it.
func (c BatchProducerConfig) Validate() error {
	ck := configCheck{typ: "BatchProducerConfig"}
	c.ProducerConfig.check(&ck)
	ck.offValue("Linger", c.Linger, LingerNone, "LingerNone", "no linger")
	ck.count("BatchBytes", c.BatchBytes)
	ck.count("BatchRecords", c.BatchRecords)
	ck.count("MaxInFlight", c.MaxInFlight)
	ck.count("MaxInFlightPerPartition", c.MaxInFlightPerPartition)
	ck.count("BufferBytes", c.BufferBytes)
	return ck.err()
}

// Validate reports every impossible value of c: an empty Topic, a
// ConsumerGroup that is not valid UTF-8 or longer than 255 bytes, a
// ClientID that is not valid UTF-8, a SessionTimeout
// outside the server's bounds (100ms to 5m), a negative duration or
// count, MaxPollInterval or CloseTimeout below zero other than their
// named values (MaxPollIntervalNone, CloseTimeoutNone), and Partitions,
// StartOffsets or EndOffsets set with a ConsumerGroup, a partition listed
// twice in Partitions, or a start or end offset of a partition not in
// Partitions. NewConsumer calls it.
func (c ConsumerConfig) Validate() error {
	ck := configCheck{typ: "ConsumerConfig"}
	if c.Topic == "" {
		ck.add("Topic", "is required")
	}
	ck.id("ConsumerGroup", c.ConsumerGroup)
	ck.connection(c.ClientID, c.DialTimeout, c.RequestTimeout, c.ReconnectBackoff, c.ReconnectBackoffMax)
	ck.nonNegative("MetadataMaxAge", c.MetadataMaxAge)
	ck.nonNegative("AutoCommitInterval", c.AutoCommitInterval)
	if c.SessionTimeout != 0 && (c.SessionTimeout < minSessionTimeout || c.SessionTimeout > maxSessionTimeout) {
		ck.add("SessionTimeout", "is %v: want 0 (the server's default) or %v to %v (the server's bounds)", c.SessionTimeout, minSessionTimeout, maxSessionTimeout)
	}
	ck.nonNegative("HeartbeatInterval", c.HeartbeatInterval)
	ck.offValue("MaxPollInterval", c.MaxPollInterval, MaxPollIntervalNone, "MaxPollIntervalNone", "no bound")
	ck.count("MaxPollRecords", c.MaxPollRecords)
	ck.nonNegative("MaxWait", c.MaxWait)
	ck.offValue("CloseTimeout", c.CloseTimeout, CloseTimeoutNone, "CloseTimeoutNone", "no bound")
	c.checkPartitions(&ck)
	return ck.err()
}

// Validate reports every impossible value of c: a negative RequestTimeout
// or ConnectTimeout. NewAdmin, NewGrpcProducer and NewGrpcConsumer call it
// (through their own Validate).
func (c GrpcConfig) Validate() error {
	ck := configCheck{typ: "GrpcConfig"}
	c.check(&ck)
	return ck.err()
}

func (c GrpcConfig) check(ck *configCheck) {
	ck.nonNegative("RequestTimeout", c.RequestTimeout)
	ck.nonNegative("ConnectTimeout", c.ConnectTimeout)
}

// Validate reports every impossible value of c, as GrpcConfig.Validate.
// NewAdmin calls it.
func (c AdminConfig) Validate() error {
	ck := configCheck{typ: "AdminConfig"}
	c.GrpcConfig.check(&ck)
	return ck.err()
}

// Validate reports every impossible value of c: those of its GrpcConfig,
// Retries below zero other than RetriesNone, a negative duration or size,
// RetryBackoffMax below RetryBackoff, an Acks other than AcksAll and
// AcksLeader. NewGrpcProducer calls it.
func (c GrpcProducerConfig) Validate() error {
	ck := configCheck{typ: "GrpcProducerConfig"}
	c.GrpcConfig.check(&ck)
	if c.Retries < 0 && c.Retries != RetriesNone {
		ck.add("Retries", "is %d: want 0 (the default, %d), a positive count, or sdk.RetriesNone to send each request once", c.Retries, DefaultRetries)
	}
	ck.backoff("RetryBackoff", c.RetryBackoff, c.RetryBackoffMax)
	ck.nonNegative("MetadataMaxAge", c.MetadataMaxAge)
	ck.count("BatchBytesMax", c.BatchBytesMax)
	ck.nonNegative("DeliveryTimeout", c.DeliveryTimeout)
	ck.acks(c.Acks)
	return ck.err()
}

// Validate reports every impossible value of c: those of its GrpcConfig,
// an empty Topic, a ConsumerGroup or ClientID that is not valid UTF-8 or
// longer than 255 bytes (the server's bound), a
// SessionTimeout outside the server's bounds (100ms to 5min), a StartFrom
// made by StartAtTime (not supported over gRPC), a negative duration or
// count, and CloseTimeout below zero other than CloseTimeoutNone.
// NewGrpcConsumer calls it.
func (c GrpcConsumerConfig) Validate() error {
	ck := configCheck{typ: "GrpcConsumerConfig"}
	c.GrpcConfig.check(&ck)
	if c.Topic == "" {
		ck.add("Topic", "is required")
	}
	ck.id("ConsumerGroup", c.ConsumerGroup)
	ck.id("ClientID", c.ClientID)
	if c.SessionTimeout != 0 && (c.SessionTimeout < minSessionTimeout || c.SessionTimeout > maxSessionTimeout) {
		ck.add("SessionTimeout", "is %v: want 0 (the server's default) or %v to %v (the server's bounds)", c.SessionTimeout, minSessionTimeout, maxSessionTimeout)
	}
	ck.nonNegative("HeartbeatInterval", c.HeartbeatInterval)
	ck.nonNegative("AutoCommitInterval", c.AutoCommitInterval)
	if _, ok := c.StartFrom.Time(); ok {
		ck.add("StartFrom", "is %v: StartAtTime is not supported over gRPC; want StartEarliest, StartLatest or StartAt(offset)", c.StartFrom)
	}
	ck.count("MaxPollRecords", c.MaxPollRecords)
	ck.nonNegative("MaxWait", c.MaxWait)
	ck.backoff("RetryBackoff", c.RetryBackoff, c.RetryBackoffMax)
	ck.offValue("MaxPollInterval", c.MaxPollInterval, MaxPollIntervalNone, "MaxPollIntervalNone", "no bound")
	ck.nonNegative("MetadataMaxAge", c.MetadataMaxAge)
	ck.offValue("CloseTimeout", c.CloseTimeout, CloseTimeoutNone, "CloseTimeoutNone", "no bound")
	return ck.err()
}
