package control_test

import (
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/control"
)

// TestStatusCutsPaths: a gRPC status built from an error whose cause holds
// a server-side file path names only the file, with the code's reason,
// while the local error keeps the whole path.
func TestStatusCutsPaths(t *testing.T) {
	pe := &fs.PathError{Op: "write", Path: "/srv/sq-data/orders-0/00000000000000000000.log", Err: syscall.ENOSPC}
	for _, err := range []error{
		api.WrapError(api.CodeDiskFull, pe, "write to partition orders/0"),
		api.WrapError(api.CodePartitionFailed, pe, "partition orders/0"),
		pe,
	} {
		st, _ := status.FromError(control.ToStatus(err))
		if strings.Contains(st.Message(), "/srv/") || !strings.Contains(st.Message(), "write 00000000000000000000.log") {
			t.Errorf("status message %q: want the file name and no server path", st.Message())
		}
		if errorReason(st) != api.AsError(err).Code.String() {
			t.Errorf("status %v: reason %q, want %v", st, errorReason(st), api.AsError(err).Code)
		}
		if !strings.Contains(err.Error(), "/srv/sq-data/") {
			t.Errorf("local text %q lost the path", err.Error())
		}
	}
}
