package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/seedqueue/sq/sdk"
)

func TestParseResetTo(t *testing.T) {
	cases := []struct {
		in    string
		mode  sdk.ResetMode
		value int64
		bad   bool
	}{
		{"earliest", sdk.ResetEarliest, 0, false},
		{"latest", sdk.ResetLatest, 0, false},
		{"1200", sdk.ResetToOffset, 1200, false},
		{"", 0, 0, true},
		{"-1", 0, 0, true},
		{"soon", 0, 0, true},
	}
	for _, tc := range cases {
		mode, value, err := parseResetTo(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && (mode != tc.mode || value != tc.value)) {
			t.Errorf("parseResetTo(%q) = %v, %d, %v", tc.in, mode, value, err)
		}
	}
}

func TestPrintGroup(t *testing.T) {
	var out bytes.Buffer
	err := printGroup(&out, groupDescriptionFixture())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"State: stable", "orders:0,1", "COMMITTED", "orders  0          5          9        4    m-1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// groupDescriptionFixture is a group with one member holding both
// partitions of orders, a commit on partition 0 and none on partition 1.
func groupDescriptionFixture() sdk.GroupDescription {
	return sdk.GroupDescription{
		Summary: sdk.GroupSummary{Group: "billing", State: "stable", Members: 1, Generation: 3},
		Members: []sdk.GroupMember{{MemberID: "m-1", ClientID: "app", Assignment: sdk.Assignment{"orders": {1, 0}}}},
		Offsets: []sdk.GroupPartitionLag{
			{Topic: "orders", Partition: 0, CommittedOffset: 5, LogEndOffset: 9, Lag: 4, MemberID: "m-1"},
			{Topic: "orders", Partition: 1, CommittedOffset: -1, LogEndOffset: 2, Lag: 2},
		},
	}
}

// TestPrintGroupUnknownLag: a partition whose statistics the server could
// not read (lag -1: its leader is not available; log end and high
// watermark then come as 0) prints "-" for log end and lag in the table
// and null for log_end_offset, high_watermark and lag in JSON; a known
// empty partition (log end, high watermark and lag 0) stays 0.
func TestPrintGroupUnknownLag(t *testing.T) {
	d := groupDescriptionFixture()
	d.Offsets[0].Lag, d.Offsets[0].LogEndOffset, d.Offsets[0].HighWatermark = -1, 0, 0
	d.Offsets[1].Lag, d.Offsets[1].LogEndOffset, d.Offsets[1].HighWatermark = 0, 0, 0
	var out bytes.Buffer
	if err := printGroup(&out, d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"orders  0          5          -        -    m-1", "orders  1          -          0        0    -"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := printGroupJSON(&out, d); err != nil {
		t.Fatal(err)
	}
	type offsetJSON struct {
		LogEnd *uint64 `json:"log_end_offset"`
		HW     *uint64 `json:"high_watermark"`
		Lag    *int64  `json:"lag"`
	}
	var got struct {
		Offsets []offsetJSON `json:"offsets"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Offsets) != 2 {
		t.Fatalf("JSON offsets: %s", out.String())
	}
	if o := got.Offsets[0]; o.LogEnd != nil || o.HW != nil || o.Lag != nil {
		t.Errorf("unknown statistics not null: %s", out.String())
	}
	if o := got.Offsets[1]; o.LogEnd == nil || *o.LogEnd != 0 || o.HW == nil || *o.HW != 0 || o.Lag == nil || *o.Lag != 0 {
		t.Errorf("known zero statistics not 0: %s", out.String())
	}
	for _, key := range []string{"log_end_offset", "high_watermark", "lag"} {
		if !strings.Contains(out.String(), `"`+key+`": null`) {
			t.Errorf("unknown %s not null:\n%s", key, out.String())
		}
	}
}
