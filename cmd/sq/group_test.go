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

// TestPrintGroupUnknownLag: a partition whose lag the server could not
// compute (-1: its leader is not available) prints "-" in the table and
// null in JSON; a known lag of 0 stays 0.
func TestPrintGroupUnknownLag(t *testing.T) {
	d := groupDescriptionFixture()
	d.Offsets[0].Lag = -1
	d.Offsets[1].Lag = 0
	var out bytes.Buffer
	if err := printGroup(&out, d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"orders  0          5          9        -    m-1", "orders  1          -          2        0    -"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := printGroupJSON(&out, d); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Offsets []struct {
			Lag *int64 `json:"lag"`
		} `json:"offsets"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Offsets) != 2 || got.Offsets[0].Lag != nil || got.Offsets[1].Lag == nil || *got.Offsets[1].Lag != 0 {
		t.Fatalf("JSON lags: %s", out.String())
	}
	if !strings.Contains(out.String(), `"lag": null`) && !strings.Contains(out.String(), `"lag":null`) {
		t.Fatalf("unknown lag not null:\n%s", out.String())
	}
}
