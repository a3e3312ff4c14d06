package dataplane

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
)

// TestCloseReasonLevels: a client that closes, resets or breaks its
// connection is logged at DEBUG (it is not a fault); a read timeout and
// other read errors stay at WARN.
func TestCloseReasonLevels(t *testing.T) {
	c := &conn{}
	for _, tc := range []struct {
		err  error
		want slog.Level
	}{
		{io.EOF, slog.LevelDebug},
		{fmt.Errorf("read frame: %w", io.EOF), slog.LevelDebug},
		{&net.OpError{Op: "read", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}, slog.LevelDebug},
		{&net.OpError{Op: "read", Err: &os.SyscallError{Syscall: "read", Err: syscall.EPIPE}}, slog.LevelDebug},
		{fmt.Errorf("%w: bad version", errHandshakeFailed), slog.LevelInfo},
		{os.ErrDeadlineExceeded, slog.LevelWarn},
		{io.ErrUnexpectedEOF, slog.LevelWarn},
		{errors.New("frame too large"), slog.LevelWarn},
	} {
		if _, got := c.classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) level = %v, want %v", tc.err, got, tc.want)
		}
	}
}
