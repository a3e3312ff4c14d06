package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/sdk"
)

// bareMillisMin is the least bare number --from-time accepts, read as Unix
// milliseconds: 100000000000 ms is 1973-03-03, while as seconds it would
// be the year 5138, so a number this large is unambiguously milliseconds.
// A smaller bare number (other than 0, the epoch either way) could be
// seconds or milliseconds and is refused.
const bareMillisMin = 100_000_000_000

// fromTimeForms lists what --from-time accepts, for error messages.
const fromTimeForms = "an RFC 3339 time (2026-01-02T15:04:05Z), a duration before now (-1h, -30m, -1h30m), " +
	"Unix seconds or milliseconds with their unit (1796079000s, 1796079000000ms), " +
	"or a bare number of Unix milliseconds of 12 digits or more"

// parseFromTime parses --from-time relative to now and returns Unix ms
// (times before 1970 count as 0). It accepts:
//   - an RFC 3339 time, fractional seconds allowed: 2026-01-02T15:04:05Z;
//   - a negative Go duration, that long before now: -1h, -30m, -1h30m, -90s;
//   - a count of Unix seconds or milliseconds with its unit: 1796079000s,
//     1796079000000ms;
//   - a bare number of at least bareMillisMin, read as Unix ms, and 0.
//
// A bare number below bareMillisMin is refused as ambiguous, saying when
// it looks like seconds; so is a positive duration (-1h is meant).
func parseFromTime(s string, now time.Time) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("--from-time is empty: want %s", fromTimeForms)
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return max(t.UnixMilli(), 0), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return bareFromTime(s, n)
	}
	if digits, ok := strings.CutSuffix(s, "ms"); ok && isDigits(digits) {
		n, err := strconv.ParseInt(digits, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("--from-time %s: out of range", s)
		}
		return n, nil
	}
	if digits, ok := strings.CutSuffix(s, "s"); ok && isDigits(digits) {
		n, err := strconv.ParseInt(digits, 10, 64)
		if err != nil || n > (1<<63-1)/1000 {
			return 0, fmt.Errorf("--from-time %s: out of range", s)
		}
		return n * 1000, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d > 0 {
			return 0, positiveDurationError(s)
		}
		return max(now.Add(d).UnixMilli(), 0), nil
	}
	if err := zonelessTimeError(s); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("--from-time %q: want %s", s, fromTimeForms)
}

// positiveDurationError explains a duration without a minus sign. A count
// of microseconds or nanoseconds (1796079000000000us) is most likely a
// Unix time in another unit, so its message says which units a Unix time
// takes; any other is a duration missing its minus sign.
func positiveDurationError(s string) error {
	for _, u := range []struct {
		suffix string
		perMs  int64
	}{{"us", 1000}, {"µs", 1000}, {"μs", 1000}, {"ns", 1000_000}} {
		digits, ok := strings.CutSuffix(s, u.suffix)
		if !ok || !isDigits(digits) {
			continue
		}
		n, err := strconv.ParseInt(digits, 10, 64)
		if err != nil {
			break
		}
		return fmt.Errorf("--from-time %s: a Unix time takes the unit s or ms (%dms), and a duration before now takes a minus sign (-%s)",
			s, n/u.perMs, s)
	}
	return fmt.Errorf("--from-time %s: a duration is a time before now and takes a minus sign: -%s", s, strings.TrimPrefix(s, "+"))
}

// zonelessLayouts are date and time forms without a zone that --from-time
// refuses with a hint rather than read in an assumed zone.
var zonelessLayouts = []string{"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04", "2006-01-02"}

// zonelessTimeError returns the error for a date or time without a zone
// (RFC 3339 requires one: Z for UTC or an offset), or nil when s is not
// such a time.
func zonelessTimeError(s string) error {
	for _, layout := range zonelessLayouts {
		t, err := time.Parse(layout, s)
		if err != nil {
			continue
		}
		utc := t.Format("2006-01-02T15:04:05Z07:00")
		return fmt.Errorf("--from-time %q: a time needs its zone, as RFC 3339 writes it: %s (UTC) or %s+01:00 (an offset)",
			s, utc, strings.TrimSuffix(utc, "Z"))
	}
	return nil
}

// bareFromTime applies the rule for a bare number n (the text s).
func bareFromTime(s string, n int64) (int64, error) {
	switch {
	case n == 0:
		return 0, nil
	case n < 0:
		return 0, fmt.Errorf("--from-time %s: a bare number is Unix milliseconds and cannot be negative; for a time before now write a duration such as -1h", s)
	case n >= bareMillisMin:
		return n, nil
	case n >= 100_000_000 && n < 10_000_000_000: // 1973 to 2286 as seconds, 1970 as ms
		return 0, fmt.Errorf("--from-time %s: a bare number is ambiguous; looks like seconds — write %ss or %s000ms", s, s, s)
	}
	return 0, fmt.Errorf("--from-time %s: a bare number is ambiguous; write its unit: %ss (seconds) or %sms (milliseconds)", s, s, s)
}

// isDigits reports whether s is one or more ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// checkFromTime checks --from-time before connecting: it must parse and
// cannot be combined with --from/-o. It returns the time in Unix ms, fixed
// once so every partition starts from the same instant (0 when unset).
func checkFromTime(cmd *cobra.Command, f consumeFlags, now time.Time) (int64, error) {
	if !cmd.Flags().Changed("from-time") {
		return 0, nil
	}
	if cmd.Flags().Changed("from") {
		return 0, errors.New("--from/-o and --from-time cannot be combined: give one start position")
	}
	return parseFromTime(f.fromTime, now)
}

// timeStart resolves --from-time for partition p with a ListOffsets
// request to the partition's leader: the first offset appended at or after the time, or the high
// watermark when nothing is that recent.
func (s *consumeSession) timeStart(ctx context.Context, p uint32) (uint64, error) {
	off, err := onLeader(ctx, s.r, s.f.topic, p, func(c *sdk.Client) (uint64, error) {
		off, _, err := c.ListOffsets(ctx, s.f.topic, p, s.fromMs)
		return off, err
	})
	if err != nil {
		return 0, fmt.Errorf("partition %d: look up --from-time: %w", p, err)
	}
	return off, nil
}
