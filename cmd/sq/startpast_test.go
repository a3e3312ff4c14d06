package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/seedqueue/sq/sdk"
)

// TestStartOffsetPastTheEnd: a start position past a partition's high
// watermark is kept (records are read from there once written) and said
// on stderr, so that a mistyped -o does not pass for an empty topic; one
// inside the log, or at its end, is silent.
func TestStartOffsetPastTheEnd(t *testing.T) {
	pi := sdk.PartitionInfo{Partition: 3, LogStartOffset: 10, HighWatermark: 100}
	for _, tc := range []struct {
		from   string
		follow bool
		want   uint64
		note   string
	}{
		{"200", false, 200, "sq: partition 3: start offset 200 is past the end of the log (high watermark 100); nothing to read there\n"},
		{"200", true, 200, "sq: partition 3: start offset 200 is past the end of the log (high watermark 100); waiting until the log reaches it\n"},
		{"+95", false, 105, "sq: partition 3: start offset 105 is past the end of the log (high watermark 100); nothing to read there\n"},
		{"100", false, 100, ""},
		{"latest", true, 100, ""},
		{"50", false, 50, ""},
		{"-500", false, 10, ""},
	} {
		start, err := parseFrom(tc.from)
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		s := &consumeSession{f: consumeFlags{follow: tc.follow}, start: start, stderr: &stderr}
		got, err := s.startOffset(context.Background(), pi.Partition, pi)
		if err != nil || got != tc.want || stderr.String() != tc.note {
			t.Errorf("-o %s (follow %v): start %d, %v, stderr %q; want %d and %q", tc.from, tc.follow, got, err, stderr.String(), tc.want, tc.note)
		}
	}
}
