package outcome

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/api"
)

func TestClientGone(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{context.Canceled, Canceled},
		{fmt.Errorf("wait: %w", context.Canceled), Canceled},
		{context.DeadlineExceeded, DeadlineExceeded},
		{fmt.Errorf("fetch: %w", context.DeadlineExceeded), DeadlineExceeded},
		{io.EOF, Canceled},
		{&net.OpError{Op: "read", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}, Canceled},
		{&net.OpError{Op: "write", Err: &os.SyscallError{Syscall: "writev", Err: syscall.EPIPE}}, Canceled},
		{syscall.ECONNABORTED, Canceled},
		// The server's own faults and refusals are errors.
		{api.NewError(api.CodeDiskFull, "full"), ""},
		{api.NewError(api.CodeUnknown, "boom"), ""},
		{errors.New("boom"), ""},
		{syscall.EIO, ""},
		{syscall.ENOSPC, ""},
		// A read deadline of the server's (os.ErrDeadlineExceeded) is not the
		// client's deadline.
		{os.ErrDeadlineExceeded, ""},
		{io.ErrUnexpectedEOF, ""},
	} {
		if got := ClientGone(tc.err); got != tc.want {
			t.Errorf("ClientGone(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
