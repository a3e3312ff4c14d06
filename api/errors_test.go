package api

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"

	"capnproto.org/go/capnp/v3"
)

// wireRoundTrip encodes err as a WireError in a Cap'n Proto message,
// serializes the message to bytes and decodes it again, as a data-plane
// response crosses the network.
func wireRoundTrip(t *testing.T, err error) error {
	t.Helper()
	msg, seg, merr := capnp.NewMessage(capnp.SingleSegment(nil))
	if merr != nil {
		t.Fatal(merr)
	}
	w, werr := NewRootWireError(seg)
	if werr != nil {
		t.Fatal(werr)
	}
	if err := ToWire(w, err); err != nil {
		t.Fatal(err)
	}
	b, berr := msg.Marshal()
	if berr != nil {
		t.Fatal(berr)
	}
	got, uerr := capnp.Unmarshal(b)
	if uerr != nil {
		t.Fatal(uerr)
	}
	r, rerr := ReadRootWireError(got)
	if rerr != nil {
		t.Fatal(rerr)
	}
	return FromWire(r)
}

// TestWrapErrorKeepsCause: a wrapped *Error matches both its code's sentinel
// and its cause (at any depth) locally, and prints the cause's text.
func TestWrapErrorKeepsCause(t *testing.T) {
	pathErr := &fs.PathError{Op: "sync", Path: "/data/t/0/0.log", Err: syscall.EIO}
	for _, tc := range []struct {
		name  string
		err   error
		code  *Error
		cause error
		text  string
	}{
		{"direct", WrapError(CodePartitionFailed, syscall.EIO, "fdatasync of %s failed", "/d"), ErrPartitionFailed, syscall.EIO, "fdatasync of /d failed: input/output error"},
		{"path error", WrapError(CodeStorageError, pathErr, "write to partition %s/%d", "t", 0), ErrStorageError, syscall.EIO, "write to partition t/0: sync /data/t/0/0.log: input/output error"},
		{"wrapped again", fmt.Errorf("engine: %w", WrapError(CodeDiskFull, syscall.ENOSPC, "append")), ErrDiskFull, syscall.ENOSPC, "append: no space left on device"},
		{"unknown", AsError(pathErr), ErrUnknown, syscall.EIO, "sync /data/t/0/0.log: input/output error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.code) {
				t.Errorf("errors.Is(%v, %v) = false", tc.err, tc.code.Code)
			}
			if !errors.Is(tc.err, tc.cause) {
				t.Errorf("errors.Is(%v, %v) = false: the cause was dropped", tc.err, tc.cause)
			}
			if !strings.Contains(tc.err.Error(), tc.text) {
				t.Errorf("text %q lacks %q", tc.err.Error(), tc.text)
			}
		})
	}
	if e := WrapError(CodeInvalidConfig, syscall.EINVAL, ""); e.Message != "invalid argument" || !errors.Is(e, syscall.EINVAL) {
		t.Fatalf("WrapError with an empty format = %+v, want the cause's text as the message", e)
	}
	if e := WrapError(CodeUnknown, nil, "no cause %d", 1); e.Unwrap() != nil || e.Message != "no cause 1" {
		t.Fatalf("WrapError with a nil cause = %+v, want NewError's", e)
	}
}

// TestWrapErrorNamesCodeOnce: wrapping an *Error (directly, behind
// fmt.Errorf, or decoded from the wire) with the same code prints that
// code once, for every code; a different code stays in the text.
func TestWrapErrorNamesCodeOnce(t *testing.T) {
	for _, entry := range Catalog[1:] {
		c := entry.Code
		inner := NewError(c, "inner reason")
		for name, cause := range map[string]error{
			"direct":  inner,
			"wrapped": fmt.Errorf("gossip: %w", inner),
			"wire":    wireRoundTrip(t, inner),
		} {
			e := WrapError(c, cause, "outer context")
			for _, text := range []string{e.Error(), e.WireText()} {
				if n := strings.Count(text, c.String()+": "); n != 1 || !strings.Contains(text, "outer context: ") || !strings.Contains(text, "inner reason") {
					t.Errorf("%s %s: %q, want the code once, the context and the reason", c, name, text)
				}
			}
			if !errors.Is(e, inner) {
				t.Errorf("%s %s: the cause's code no longer matches", c, name)
			}
		}
		other := CodeNoQuorum
		if c == other {
			other = CodeUnknown
		}
		if text := WrapError(other, inner, "outer").Error(); !strings.Contains(text, c.String()+": inner reason") {
			t.Errorf("%s wrapped as %s: %q lost the inner code", c, other, text)
		}
	}
}

// TestWireSendsNoCause: the Cap'n Proto encoding carries code, message and
// range; the cause's text survives in the message, the cause object never.
func TestWireSendsNoCause(t *testing.T) {
	for _, sent := range []*Error{
		WrapError(CodePartitionFailed, syscall.EIO, "partition t/0"),
		WrapError(CodeStorageError, &fs.PathError{Op: "write", Path: "x.log", Err: syscall.EIO}, "write to partition t/1"),
		AsError(fmt.Errorf("plain: %w", syscall.EROFS)),
		{Code: CodeOffsetOutOfRange, Message: "range", RangeStart: 3, RangeEnd: 9, HasRange: true, cause: syscall.EINVAL},
	} {
		got := wireRoundTrip(t, sent)
		var e *Error
		if !errors.As(got, &e) {
			t.Fatalf("decoded %T %v, want *Error", got, got)
		}
		if e.Code != sent.Code || e.Message != sent.Message || e.HasRange != sent.HasRange || e.RangeStart != sent.RangeStart || e.RangeEnd != sent.RangeEnd {
			t.Errorf("decoded %+v, sent %+v", e, sent)
		}
		if sent.cause != nil && !sent.HasRange && !strings.Contains(e.Message, sent.cause.Error()) {
			t.Errorf("message %q lost the cause's text %q", e.Message, sent.cause)
		}
		if e.Unwrap() != nil {
			t.Errorf("decoded error carries a cause %v; the wire must not", e.Unwrap())
		}
		if !errors.Is(got, sent) {
			t.Errorf("errors.Is(decoded, sent code %v) = false", sent.Code)
		}
		for _, c := range []error{syscall.EIO, syscall.EROFS, syscall.EINVAL} {
			if errors.Is(got, c) {
				t.Errorf("decoded %v matches %v: a cause crossed the wire", got, c)
			}
		}
	}
}

// TestWireCutsPaths: a server-side file path in a cause's chain reaches
// the peer cut to its last element, in every shape a cause takes, while
// the local Error text keeps it whole for the server's logs.
func TestWireCutsPaths(t *testing.T) {
	const dir = "/srv/sq-data/topics/orders-3"
	pe := &fs.PathError{Op: "write", Path: dir + "/00000000000000000000.log", Err: syscall.ENOSPC}
	for _, tc := range []struct {
		name string
		err  *Error
		want string // in the wire message
	}{
		{"path error", WrapError(CodeDiskFull, pe, "write to partition %s/%d", "orders", 3), "write to partition orders/3: write 00000000000000000000.log: no space left on device"},
		{"empty format", WrapError(CodeDiskFull, pe, ""), "write 00000000000000000000.log: no space left on device"},
		{"wrapped path error", WrapError(CodeStorageError, fmt.Errorf("roll segment: %w", pe), "append"), "append: roll segment: write 00000000000000000000.log"},
		{"joined", WrapError(CodeStorageError, errors.Join(syscall.EIO, pe), "close"), "close: input/output error\nwrite 00000000000000000000.log"},
		{"link error", WrapError(CodeStorageError, &os.LinkError{Op: "rename", Old: dir + "/a.tmp", New: dir + "/a.json", Err: syscall.EXDEV}, "meta"), "meta: rename a.tmp a.json: invalid cross-device link"},
		{"unknown", AsError(fmt.Errorf("open: %w", pe)), "open: write 00000000000000000000.log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for what, text := range map[string]string{"Message": tc.err.Message, "WireText": tc.err.WireText(), "decoded": wireRoundTrip(t, tc.err).Error()} {
				if strings.Contains(text, "/srv/") || !strings.Contains(text, tc.want) {
					t.Errorf("%s %q: want %q and no server path", what, text, tc.want)
				}
			}
			if !strings.Contains(tc.err.Error(), dir) {
				t.Errorf("local text %q lost the path %s", tc.err.Error(), dir)
			}
			if !errors.Is(tc.err, tc.err.Unwrap()) || tc.err.Unwrap() == nil {
				t.Errorf("cause dropped: %v", tc.err.Unwrap())
			}
		})
	}
	if e := WrapError(CodeStorageError, syscall.EIO, "no path"); e.Error() != e.WireText() {
		t.Errorf("without a path, local %q and wire %q differ", e.Error(), e.WireText())
	}
}

// TestClusterCodesRetriable: the codes of a cluster's transient states
// (a partition leader, the Raft majority or a group's coordinator not
// available) are retriable and keep their code and text across the wire.
func TestClusterCodesRetriable(t *testing.T) {
	for _, tc := range []struct {
		code Code
		name string
		sent *Error
	}{
		{CodeLeaderNotAvailable, "LEADER_NOT_AVAILABLE", ErrLeaderNotAvailable},
		{CodeNoQuorum, "NO_QUORUM", ErrNoQuorum},
		{CodeCoordinatorNotAvailable, "COORDINATOR_NOT_AVAILABLE", ErrCoordinatorNotAvailable},
	} {
		if tc.code.String() != tc.name || !tc.code.Retriable() {
			t.Errorf("code %d: %s retriable %v, want %s retriable", tc.code, tc.code, tc.code.Retriable(), tc.name)
		}
		err := NewError(tc.code, "group %q: node n2 is not alive", "g")
		got := wireRoundTrip(t, err)
		if !errors.Is(got, tc.sent) || !IsRetriable(got) || got.Error() != tc.name+`: group "g": node n2 is not alive` {
			t.Errorf("%s across the wire: %v (retriable %v)", tc.name, got, IsRetriable(got))
		}
	}
}
