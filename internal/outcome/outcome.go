package outcome

import (
	"context"
	"errors"
	"io"
	"syscall"
)

// Labels of requests that ended because the client went away: the value of
// the code label of the sq_*_canceled_total counters, and of the sq.outcome
// attribute of spans.
const (
	// Canceled: the client cancelled the request or closed or reset its
	// connection (gRPC CANCELLED).
	Canceled = "CANCELED"
	// DeadlineExceeded: the client's deadline passed before the request
	// ended (gRPC DEADLINE_EXCEEDED).
	DeadlineExceeded = "DEADLINE_EXCEEDED"
)

// ClientGone returns Canceled or DeadlineExceeded when err (wrapped or
// not) says the client went away, and "" for nil and for every other
// error, which is the server's to count.
func ClientGone(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	case errors.Is(err, context.Canceled), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return Canceled
	}
	return ""
}
