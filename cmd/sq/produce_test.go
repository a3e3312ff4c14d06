package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/sdk"
)

// Bad produce flags fail before sq connects (the server address is
// unreachable, so any attempt to connect would fail differently), each
// problem on its own "sq: " line.
func TestProduceFlagsCheckedBeforeConnecting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // every one in the error; nil: the flags are valid
	}{
		{[]string{"-p", "-2"}, []string{"--partition -2: a partition is 0 or more, or -1 for any partition"}},
		{[]string{"--partition", "-100"}, []string{"--partition -100"}},
		{[]string{"-H", "k"}, []string{`-H "k": a header is name=value (name= for an empty value)`}},
		{[]string{"-H", "=v"}, []string{`-H "=v": the header name is empty`}},
		{[]string{"-k", "a", "--key-separator", ":"}, []string{"not both"}},
		{[]string{"--delimiter", `\z`}, []string{`unknown escape \z`}},
		{[]string{"--value-file", "f", "--file", "g", "--key-separator", ":"}, []string{"--file does not apply", "--key-separator does not apply"}},
		{[]string{"-p", "-3", "-H", "x", "--delimiter", ""}, []string{"--partition -3", "\nsq: -H \"x\"", "\nsq: --delimiter must not be empty"}},
		{[]string{"-p", "-1", "-k", "", "-H", "a=", "-H", "b=c=d", "--delimiter", `\r\n`}, nil},
		{[]string{"--file", "-"}, nil},
		{[]string{"--key-separator", `\t`}, nil},
		{[]string{"--key-separator", ""}, []string{"--key-separator must not be empty"}},
		{[]string{"--key-separator", `\y`, "--delimiter", `\y`}, []string{`--key-separator "\\y": unknown escape`, `--delimiter "\\y": unknown escape`}},
		{[]string{"-k", "", "--key-separator", ":"}, []string{"not both"}},
		{[]string{"--key-separator", `\n`}, []string{`--key-separator "\n" contains the record delimiter "\n", so no record can contain it`}},
		{[]string{"--key-separator", `a\0b`, "--delimiter", `\0`}, []string{`--key-separator "a\x00b" contains the record delimiter "\x00"`}},
		{[]string{"--key-separator", ":", "--delimiter", "::"}, nil},
		{[]string{"--value-file", "-"}, nil},
		{[]string{"--acks", "leader"}, nil},
		{[]string{"--acks", "all"}, nil},
		{[]string{"--acks", "1", "-p", "-2"}, []string{`--acks "1": want all or leader`, "--partition -2"}},
		{[]string{"--file", os.TempDir()}, []string{"--file " + os.TempDir() + " is a directory; give a file (or - for stdin)"}},
		{[]string{"--value-file", os.TempDir()}, []string{"--value-file " + os.TempDir() + " is a directory"}},
		{[]string{"--file", "/nonexistent/records"}, []string{"--file: open /nonexistent/records: no such file or directory"}},
		{[]string{"--value-file", "/nonexistent/logo.png"}, []string{"--value-file: open /nonexistent/logo.png"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			root := newRootCommand(strings.NewReader(""), &stdout, &stderr, func(string) string { return "" })
			root.SetArgs(append([]string{"--server", "127.0.0.1:1", "produce", "-t", "t"}, tc.args...))
			err := root.ExecuteContext(context.Background())
			if err == nil {
				t.Fatal("no error against an unreachable server")
			}
			if tc.want == nil {
				if !errors.Is(err, sdk.ErrConnection) {
					t.Fatalf("valid flags: error %v, want the connection error", err)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// The summary of failed records is one line: the count of those sent,
// their record numbers (the first few ranges), why, and the address when
// the server could not be reached.
func TestProduceNotAckedMessage(t *testing.T) {
	conn := fmt.Errorf("%w: 127.0.0.1:6064: dial tcp: connection refused", sdk.ErrConnection)
	for _, tc := range []struct {
		name   string
		first  error
		lines  []uint64
		sent   int
		unit   []byte // delimiter
		want   string
		wantIs error
	}{
		{"dead server", conn, []uint64{18767, 18768, 18769}, 20000, []byte("\n"),
			"3 of 20000 records not acknowledged (lines 18767-18769): server 127.0.0.1:6064 unreachable: ", sdk.ErrConnection},
		{"delivery timeout", &wrapTimeout{conn}, []uint64{5}, 9, []byte("\x00"),
			"1 of 9 records not acknowledged (record 5): server 127.0.0.1:6064 unreachable: ", sdk.ErrConnection},
		{"silent server", &wrapTimeout{errors.New("read tcp: i/o timeout")}, []uint64{401409, 401410}, 405504, []byte("\n"),
			"2 of 405504 records not acknowledged (lines 401409-401410): server 127.0.0.1:6064 did not acknowledge them in time: sdk: not acknowledged within", sdk.ErrDeliveryTimeout},
		{"silent server, -p", deliveryTimeout(nil), []uint64{1}, 1, []byte("\n"),
			"1 of 1 record not acknowledged (line 1): server 127.0.0.1:6064 did not acknowledge them in time: ", sdk.ErrDeliveryTimeout},
		{"interrupted", context.Canceled, []uint64{1, 2, 4, 6, 8, 10, 12, 14}, 14, []byte("\n"),
			"8 of 14 records not acknowledged (lines 1-2,4,6,8,10,...): the send to 127.0.0.1:6064 was interrupted; they may or may not be stored", nil},
		{"server error", api.NewError(api.CodeDiskFull, "no space"), []uint64{3}, 3, []byte("\n"),
			"1 of 3 records not acknowledged (line 3): DISK_FULL", api.ErrDiskFull},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &produceSession{addr: "127.0.0.1:6064", in: produceInput{delim: tc.unit}, sent: tc.sent, failed: len(tc.lines), firstErr: tc.first}
			for _, l := range tc.lines {
				s.failedAt.add(l)
			}
			err := s.notAcked()
			if !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("message %q, want one line starting %q", err, tc.want)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Fatalf("message %q does not wrap %v", err, tc.wantIs)
			}
		})
	}
}

// wrapTimeout stands for the SDK's delivery-timeout error, which wraps
// the last failure.
type wrapTimeout struct{ last error }

func (w *wrapTimeout) Error() string {
	return "sdk: not acknowledged within the delivery timeout of 30s: " + w.last.Error()
}
func (w *wrapTimeout) Unwrap() []error { return []error{sdk.ErrDeliveryTimeout, w.last} }

// After Ctrl-C, produce prints its one line itself (main prints no
// context.Canceled) and returns the context's error.
func TestProduceResultAfterInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stderr bytes.Buffer
	s := &produceSession{addr: "a:1", in: produceInput{delim: []byte("\n")}, stderr: &stderr, sent: 7}
	if err := s.result(ctx, context.Canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("result %v, want context.Canceled", err)
	}
	if got := stderr.String(); got != "sq: interrupted: all 7 records sent to a:1 acknowledged; the input after them was not sent\n" {
		t.Fatalf("stderr %q", got)
	}
	stderr.Reset()
	none := &produceSession{addr: "a:1", in: produceInput{delim: []byte("\n")}, stderr: &stderr}
	if err := none.result(ctx, context.Canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("result %v, want context.Canceled", err)
	}
	if got := stderr.String(); got != "sq: interrupted: no records were sent to a:1\n" {
		t.Fatalf("stderr with nothing sent %q", got)
	}
	stderr.Reset()
	s.failed, s.firstErr = 2, context.Canceled
	s.failedAt.add(6)
	s.failedAt.add(7)
	_ = s.result(ctx, errNotAcked)
	if got := stderr.String(); !strings.HasPrefix(got, "sq: interrupted: 2 of 7 records not acknowledged (lines 6-7): the send to a:1 was interrupted") || strings.Count(got, "\n") != 1 {
		t.Fatalf("stderr %q", got)
	}
}

// Opening a FIFO waits for a writer; Ctrl-C ends that wait (before, the
// first Ctrl-C was not noticed until a writer came), and sq says nothing
// was sent. A FIFO with a writer is read as any file.
func TestProduceOpenFIFOInterrupted(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, flag := range []string{"--file", "--value-file"} {
		t.Run(flag, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var stdout, stderr bytes.Buffer
			root := newRootCommand(strings.NewReader(""), &stdout, &stderr, func(string) string { return "" })
			root.SetArgs([]string{"--server", "127.0.0.1:1", "produce", "-t", "t", flag, fifo})
			done := make(chan error, 1)
			go func() { done <- root.ExecuteContext(ctx) }()
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("error %v, want context.Canceled", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("sq produce still waits for a FIFO writer after its context ended")
			}
			if want := "sq: interrupted while opening " + flag + " " + fifo; !strings.HasPrefix(stderr.String(), want) {
				t.Fatalf("stderr %q, want it to start %q", stderr.String(), want)
			}
		})
	}
	// With a writer, the open completes and sq goes on to connect.
	go func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			_, _ = w.Write([]byte("x"))
			w.Close()
		}
	}()
	fh, err := openInput(context.Background(), "file", fifo)
	if err != nil {
		t.Fatal(err)
	}
	fh.Close()
}
