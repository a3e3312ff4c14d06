package meta

import (
	"encoding/json"
	"fmt"
)

// CommandVersion is the first byte of every encoded Command and Result:
// the version of the JSON that follows. A node refuses entries of another
// version rather than apply them differently from its peers.
const CommandVersion byte = 1

// knownOps lists every Op that Decode accepts.
var knownOps = map[Op]bool{
	OpRegisterNode: true, OpRemoveNode: true, OpCreateTopic: true,
	OpDeleteTopic: true, OpAlterTopic: true, OpCreatePartitions: true,
	OpSetLeaders: true, OpMarkData: true, OpImport: true,
	OpAssignGroup: true, OpUnassignGroup: true, OpSetISR: true,
	OpAllocateProducerIDs: true, OpDrainNode: true, OpUndrainNode: true,
	OpSetQuota: true, OpRemoveQuota: true, OpCreateACLs: true, OpDeleteACLs: true,
	OpUpsertUser: true, OpDeleteUser: true,
}

// Encode returns the log entry of c: the byte CommandVersion (1), then
// c as JSON. It refuses an unknown Op.
func Encode(c Command) ([]byte, error) {
	if !knownOps[c.Op] {
		return nil, fmt.Errorf("meta: encoding a command: unknown op %q", c.Op)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("meta: encoding a %s command: %w", c.Op, err)
	}
	return append([]byte{CommandVersion}, b...), nil
}

// Decode reads a log entry written by Encode. It returns an error (never
// panics) for an empty entry, another version, JSON that does not decode
// into a Command (unknown fields and trailing data included) and an
// unknown Op. Decode checks the encoding only; Apply checks the content.
func Decode(b []byte) (Command, error) {
	if len(b) == 0 {
		return Command{}, fmt.Errorf("meta: empty command")
	}
	if b[0] != CommandVersion {
		return Command{}, fmt.Errorf("meta: command version %d, want %d", b[0], CommandVersion)
	}
	var c Command
	if err := decodeStrict(b[1:], &c); err != nil {
		return Command{}, fmt.Errorf("meta: decoding a command: %w", err)
	}
	if !knownOps[c.Op] {
		return Command{}, fmt.Errorf("meta: decoding a command: unknown op %q", c.Op)
	}
	return c, nil
}

// EncodeResult returns the byte CommandVersion, then r as JSON (an
// Error's code, message, range and leader hint; never its local cause):
// the answer the controller sends to a node that forwarded a command.
func EncodeResult(r Result) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("meta: encoding a result: %w", err)
	}
	return append([]byte{CommandVersion}, b...), nil
}

// DecodeResult reads a Result written by EncodeResult; it returns an
// error for an empty input, another version, or JSON that does not
// decode into a Result.
func DecodeResult(b []byte) (Result, error) {
	if len(b) == 0 {
		return Result{}, fmt.Errorf("meta: empty result")
	}
	if b[0] != CommandVersion {
		return Result{}, fmt.Errorf("meta: result version %d, want %d", b[0], CommandVersion)
	}
	var r Result
	if err := decodeStrict(b[1:], &r); err != nil {
		return Result{}, fmt.Errorf("meta: decoding a result: %w", err)
	}
	return r, nil
}
