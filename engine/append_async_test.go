package engine

import (
	"context"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/faultfs"
)

// TestAppendAsyncChain: a batch chained behind one whose write failed is
// failed with the same error and never stored, while an unchained batch
// queued after them is stored; a new chain after the failure works.
func TestAppendAsyncChain(t *testing.T) {
	opts, fs := faultOptions(t.TempDir())
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	appendValues(t, e, "t", 0, "a")
	fs.Inject(faultfs.Rule{Ops: faultfs.OpWrite, Path: "*.log", Times: 1, Err: syscall.ENOSPC})
	var chain []*Pending
	var prev *Pending
	for _, v := range []string{"x1", "x2", "x3"} {
		pd, err := e.AppendAsync(ctx, "t", 0, mkBatch(t, v), prev)
		if err != nil {
			t.Fatalf("AppendAsync %s: %v", v, err)
		}
		chain, prev = append(chain, pd), pd
	}
	for i, pd := range chain {
		if _, err := pd.Wait(ctx); codeOf(err) != api.CodeDiskFull {
			t.Fatalf("batch %d of the chain: %v, want DISK_FULL", i, err)
		}
	}
	prev = nil
	for _, v := range []string{"b", "c"} {
		pd, err := e.AppendAsync(ctx, "t", 0, mkBatch(t, v), prev)
		if err != nil {
			t.Fatal(err)
		}
		prev = pd
	}
	if res, err := prev.Wait(ctx); err != nil || res.BaseOffset != 2 {
		t.Fatalf("new chain: %+v, %v; want base offset 2", res, err)
	}
	if got := readAll(t, e, "t", 0); !equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("stored %v, want [a b c]", got)
	}
}

// TestAppendAsyncOtherPartition: after must belong to the same partition.
func TestAppendAsyncOtherPartition(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pd, err := e.AppendAsync(ctx, "t", 0, mkBatch(t, "a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AppendAsync(ctx, "t", 1, mkBatch(t, "b"), pd); codeOf(err) != api.CodeInvalidRequest {
		t.Fatalf("chained across partitions: %v, want INVALID_REQUEST", err)
	}
}
