package engine

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/faultfs"
)

// TestErrorsKeepTheirCause: an append refused because of a disk error
// returns the catalog error of its code (for the client) that still
// unwraps, on the server, to the errno that caused it, and names it in its
// message; the partition failed by the error reports the same cause to
// later appends and to DescribeTopic.
func TestErrorsKeepTheirCause(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy string
		rule   faultfs.Rule
		code   api.Code
		errno  syscall.Errno
		failed bool // the partition stays failed
	}{
		{"fdatasync EIO", "", faultfs.Rule{Ops: faultfs.OpSync, Path: "*.log", Times: 1, Err: syscall.EIO}, api.CodePartitionFailed, syscall.EIO, true},
		{"sync at roll EIO", "none", faultfs.Rule{Ops: faultfs.OpSync, Path: "*.log", Times: 1, Err: syscall.EIO}, api.CodePartitionFailed, syscall.EIO, true},
		{"write EIO", "", faultfs.Rule{Ops: faultfs.OpWrite, Path: "*.log", Times: 1, Err: syscall.EIO}, api.CodeStorageError, syscall.EIO, false},
		{"write ENOSPC", "", faultfs.Rule{Ops: faultfs.OpWrite, Path: "*.log", Times: 1, Err: syscall.ENOSPC, Partial: true}, api.CodeDiskFull, syscall.ENOSPC, false},
		{"write EDQUOT", "", faultfs.Rule{Ops: faultfs.OpWrite, Path: "*.log", Times: 1, Err: syscall.EDQUOT}, api.CodeDiskFull, syscall.EDQUOT, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, fs := faultOptions(t.TempDir())
			e := openTest(t, opts)
			if _, err := e.CreateTopic("t", 1, TopicConfig{SyncPolicy: tc.policy, SegmentBytes: opts.SegmentBytes}); err != nil {
				t.Fatal(err)
			}
			fs.Inject(tc.rule)
			var err error
			// Under the none policy the only sync is at a segment
			// roll: append until one happens (the bound guards a hang).
			for i := 0; i < 10000 && err == nil; i++ {
				_, err = e.Append(context.Background(), "t", 0, mkBatch(t, strings.Repeat("x", 1000)))
			}
			checkCause(t, "append", err, tc.code, tc.errno)
			if !tc.failed {
				return
			}
			_, err = e.Append(context.Background(), "t", 0, mkBatch(t, "later"))
			checkCause(t, "later append", err, tc.code, tc.errno)
			info, derr := e.DescribeTopic("t")
			if derr != nil {
				t.Fatal(derr)
			}
			checkCause(t, "DescribeTopic", info.Partitions[0].Err, tc.code, tc.errno)
		})
	}
}

func checkCause(t *testing.T, what string, err error, code api.Code, errno syscall.Errno) {
	t.Helper()
	if !errors.Is(err, &api.Error{Code: code}) {
		t.Fatalf("%s = %v, want %v", what, err, code)
	}
	if !errors.Is(err, errno) {
		t.Errorf("%s = %v: errors.Is(err, %v) = false, the cause was dropped", what, err, errno.Error())
	}
	if !strings.Contains(err.Error(), errno.Error()) {
		t.Errorf("%s = %q does not say %q", what, err, errno.Error())
	}
}
