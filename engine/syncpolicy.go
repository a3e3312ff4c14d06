package engine

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seedqueue/sq/segment"
)

// SyncMode says when a partition fdatasyncs its log.
type SyncMode uint8

const (
	// SyncEveryBatch fdatasyncs before acknowledging (group commit).
	SyncEveryBatch SyncMode = iota
	// SyncInterval acknowledges after the write and syncs on a timer.
	SyncInterval
	// SyncNone acknowledges after the write and never syncs explicitly
	// (only at a clean stop and segment roll).
	SyncNone
)

// SyncPolicy is a parsed sync policy. The zero value is every-batch.
type SyncPolicy struct {
	Mode     SyncMode
	Interval time.Duration // SyncInterval only; > 0
}

// maxSyncInterval bounds an interval policy: one day.
const maxSyncInterval = 24 * time.Hour

// ParseSyncPolicy parses "every-batch", "none", or an interval in
// milliseconds written "N" or "Nms" (N >= 1, at most one day). Errors name
// the accepted forms.
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	switch strings.TrimSpace(strings.ToLower(s)) {
	case "every-batch":
		return SyncPolicy{Mode: SyncEveryBatch}, nil
	case "none":
		return SyncPolicy{Mode: SyncNone}, nil
	}
	num := strings.TrimSuffix(strings.TrimSpace(s), "ms")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 1 || time.Duration(n)*time.Millisecond > maxSyncInterval {
		return SyncPolicy{}, fmt.Errorf("invalid sync policy %q: want every-batch, none, or an interval in milliseconds like 100 or 100ms (1ms to 24h)", s)
	}
	return SyncPolicy{Mode: SyncInterval, Interval: time.Duration(n) * time.Millisecond}, nil
}

// String returns the canonical form: "every-batch", "none" or "Nms".
func (p SyncPolicy) String() string {
	switch p.Mode {
	case SyncNone:
		return "none"
	case SyncInterval:
		return fmt.Sprintf("%dms", p.Interval.Milliseconds())
	default:
		return "every-batch"
	}
}

// durability is what recovery may assume about data written under p
// (segment.Durability).
func (p SyncPolicy) durability() segment.Durability {
	switch p.Mode {
	case SyncNone:
		return segment.DurableNone
	case SyncInterval:
		return segment.DurableInterval
	default:
		return segment.DurableEveryBatch
	}
}
