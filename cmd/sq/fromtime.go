package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

// parseFromTime parses --from-time: Unix milliseconds, or an RFC 3339 time
// (fractional seconds allowed). It returns Unix ms.
func parseFromTime(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 {
			return 0, fmt.Errorf("--from-time %d: want Unix milliseconds of 0 or more", ms)
		}
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("--from-time %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or Unix milliseconds", s)
	}
	return max(t.UnixMilli(), 0), nil
}

// checkFromTime checks --from-time before connecting: it must parse and
// cannot be combined with --from.
func checkFromTime(cmd *cobra.Command, f consumeFlags) error {
	if f.fromTime == "" {
		return nil
	}
	if cmd.Flags().Changed("from") {
		return errors.New("--from and --from-time cannot be combined")
	}
	_, err := parseFromTime(f.fromTime)
	return err
}

// timeStart resolves --from-time for partition p with a ListOffsets
// request: the first offset appended at or after the time, or the high
// watermark when nothing is that recent.
func (s *consumeSession) timeStart(ctx context.Context, p uint32) (uint64, error) {
	ms, err := parseFromTime(s.f.fromTime)
	if err != nil {
		return 0, err
	}
	off, _, err := s.c.ListOffsets(ctx, s.f.topic, p, ms)
	if err != nil {
		return 0, fmt.Errorf("partition %d: look up --from-time: %w", p, err)
	}
	return off, nil
}
