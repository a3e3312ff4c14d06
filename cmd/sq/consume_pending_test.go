package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/testutil"
)

// startSQ runs sq with args in the background; done yields its error.
func startSQ(t *testing.T, args ...string) (out, errOut *testutil.LogBuffer, done <-chan error) {
	t.Helper()
	out, errOut = testutil.NewLogBuffer(), testutil.NewLogBuffer()
	ch := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // guards against a hang only
	t.Cleanup(cancel)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		root := newRootCommand(strings.NewReader(""), out, errOut, func(string) string { return "" })
		root.SetArgs(args)
		ch <- root.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	return out, errOut, ch
}

// produceSplit writes n records to each partition of orders through node a.
func produceSplit(t *testing.T, c *splitCluster, n int) {
	t.Helper()
	for p := range 2 {
		var in strings.Builder
		for i := range n {
			fmt.Fprintf(&in, "p%d-%d\n", p, i)
		}
		if _, errOut, err := runSQInput(t, in.String(), "--server", c.nodes[0].DataAddr, "produce", "-t", "orders", "-p", fmt.Sprint(p)); err != nil {
			t.Fatalf("produce to partition %d: %v\n%s", p, err, errOut)
		}
	}
}

// testPendingPartition runs sq consume (with extra args) while partition 1
// cannot be described: sq warns once, and reads it once it can be.
func testPendingPartition(t *testing.T, extra ...string) {
	c := startSplitCluster(t)
	produceSplit(t, c, 3)
	c.hide(1, true)
	out, errOut, done := startSQ(t, append([]string{"--server", c.nodes[0].DataAddr, "consume", "-t", "orders"}, extra...)...)
	waitUntil(t, "the warning about partition 1", func() bool {
		return strings.Contains(errOut.String(), "WARN: partition 1 of orders cannot be described yet")
	})
	waitUntil(t, "partition 0's records", func() bool { return strings.Count(out.String(), "\n") == 3 })
	// Described again and again, still failing: one warning only.
	before := describes(c)
	waitUntil(t, "partition 1 described again", func() bool { return describes(c) > before+1 })
	c.hide(1, false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sq consume %v: %v\n%s", extra, err, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("sq consume %v did not end once partition 1 could be described:\n%s", extra, errOut.String())
	}
	for i := range 3 {
		for p := range 2 {
			if v := fmt.Sprintf("p%d-%d\n", p, i); !strings.Contains(out.String(), v) {
				t.Errorf("missing %q in:\n%s", v, out.String())
			}
		}
	}
	if n := strings.Count(errOut.String(), "WARN"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, errOut.String())
	}
}

// describes counts the describes of orders that hid partition 1.
func describes(c *splitCluster) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hiddenDescribes
}

// TestFollowRetriesAPartitionItCannotDescribe: with --follow, a partition
// whose describe fails for a retriable reason is warned about once and
// read from when it can be described, along with the others.
func TestFollowRetriesAPartitionItCannotDescribe(t *testing.T) {
	testPendingPartition(t, "--follow", "--count", "6")
}

// TestConsumeWaitsForAPartitionItCannotDescribe: without --follow, sq
// reads the partitions it can describe, then waits for the one it cannot
// and reads it up to its high watermark once it can.
func TestConsumeWaitsForAPartitionItCannotDescribe(t *testing.T) {
	testPendingPartition(t)
}
