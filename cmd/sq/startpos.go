package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/seedqueue/sq/sdk"
)

// startKind is the form of a --from/-o start position.
type startKind int

const (
	startEarliest  startKind = iota // earliest, beginning
	startLatest                     // latest, end
	startOffset                     // N: offset N in every partition
	startFromEnd                    // -N: N records before the high watermark
	startFromStart                  // +N: N records after the log start offset
)

// startSpec is a parsed --from/-o value.
type startSpec struct {
	kind startKind
	n    uint64
}

// fromForms lists what --from/-o accepts, for help and error messages.
const fromForms = "earliest (or beginning), latest (or end), an offset N, -N (the last N records of each partition) or +N (N records after each partition's log start)"

// parseFrom parses --from/-o. The forms follow kcat's -o (beginning, end,
// N, -N) and rpk's --offset (start, end, +N, -N); names are case-insensitive.
func parseFrom(s string) (startSpec, error) {
	switch strings.ToLower(s) {
	case "earliest", "beginning", "start", "oldest":
		return startSpec{kind: startEarliest}, nil
	case "latest", "end", "newest":
		return startSpec{kind: startLatest}, nil
	}
	kind, digits := startOffset, s
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		kind, digits = startFromEnd, rest
	} else if rest, ok := strings.CutPrefix(s, "+"); ok {
		kind, digits = startFromStart, rest
	}
	if !isDigits(digits) {
		return startSpec{}, fmt.Errorf("--from/-o %q: want %s", s, fromForms)
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return startSpec{}, fmt.Errorf("--from/-o %q: offset out of range", s)
	}
	return startSpec{kind: kind, n: n}, nil
}

// offset resolves the position in a partition whose log starts at
// logStart and whose high watermark is hw. -N starts at
// max(logStart, hw-N); +N at logStart+N; an offset is used as it is (the
// caller handles one outside the log).
func (sp startSpec) offset(logStart, hw uint64) uint64 {
	switch sp.kind {
	case startLatest:
		return hw
	case startOffset:
		return sp.n
	case startFromEnd:
		if hw < sp.n {
			return logStart
		}
		return max(logStart, hw-sp.n)
	case startFromStart:
		if logStart > ^uint64(0)-sp.n {
			return ^uint64(0)
		}
		return logStart + sp.n
	}
	return logStart
}

// errRelativeWithGroup refuses -N and +N with --group.
var errRelativeWithGroup = errors.New("--from/-o -N or +N with --group: a group member is handed its partitions by the group, " +
	"and starts each one without a committed offset at one position shared by all; use earliest, latest, an offset or --from-time")

// groupStart is the start position of a group member's partitions that
// have no committed offset: --from-time (ms, when fromTime is set), else
// the --from/-o position, which must not be relative.
func (sp startSpec) groupStart() (sdk.StartPosition, error) {
	switch sp.kind {
	case startEarliest:
		return sdk.StartEarliest, nil
	case startLatest:
		return sdk.StartLatest, nil
	case startOffset:
		return sdk.StartAt(sp.n), nil
	}
	return 0, errRelativeWithGroup
}

// allPartitions is the value of --partition that reads every partition.
const allPartitions = "all"

// partitionFlag is --partition/-p of consume: "all" (the default), or a
// partition number. -1 is accepted as "all", as earlier releases
// documented; other negative numbers are refused.
type partitionFlag struct {
	all bool
	p   uint32
}

// String returns "all" or the partition number.
func (f *partitionFlag) String() string {
	if f.all {
		return allPartitions
	}
	return strconv.FormatUint(uint64(f.p), 10)
}

// Set parses "all", -1 or a partition number.
func (f *partitionFlag) Set(s string) error {
	if strings.EqualFold(s, allPartitions) || s == "-1" {
		f.all = true
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > int64(^uint32(0)) {
		return fmt.Errorf("want a partition number (0 or more) or %q", allPartitions)
	}
	f.all, f.p = false, uint32(n)
	return nil
}

// Type names the flag's values in --help.
func (f *partitionFlag) Type() string { return "N|all" }
