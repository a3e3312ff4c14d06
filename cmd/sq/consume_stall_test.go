package main

import (
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestFetchStallsSaidOnce: a partition that cannot be read is said once
// however many fetches fail, said read again at its next record, and said
// again if it stalls later; records of other partitions say nothing.
func TestFetchStallsSaidOnce(t *testing.T) {
	var out strings.Builder
	var f fetchStalls
	f.to(&out)
	down := api.NewError(api.CodeLeaderNotAvailable, "the leader of t/2 is not alive")
	f.failed(2, down)
	f.failed(2, down)
	f.read(1, 7)
	f.read(2, 40)
	f.read(2, 41)
	f.failed(2, down)
	want := "sq: partition 2 cannot be read for now, retrying (the other partitions are read meanwhile): LEADER_NOT_AVAILABLE: the leader of t/2 is not alive\n" +
		"sq: partition 2 is read again, from offset 40\n" +
		"sq: partition 2 cannot be read for now, retrying (the other partitions are read meanwhile): LEADER_NOT_AVAILABLE: the leader of t/2 is not alive\n"
	if got := out.String(); got != want {
		t.Fatalf("stderr:\n%s\nwant:\n%s", got, want)
	}
}
