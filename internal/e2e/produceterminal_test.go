package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: master is the keyboard side, slave
// the terminal a child reads as its stdin. It skips the test where the
// system has no pseudo-terminals.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pseudo-terminal number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open /dev/pts/%d: %v", n, err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// TestProduceFromTerminalSaysHowToEnd: sq produce reading a terminal
// (records typed by hand) says on stderr, before any input, that it
// waits for records and that Ctrl-D ends them; the lines typed and then
// Ctrl-D are produced (with --delimiter the newline typed before Ctrl-D
// belongs to the last record). With stdin a pipe there is no such line.
func TestProduceFromTerminalSaysHowToEnd(t *testing.T) {
	srv := startServer(t, t.TempDir())
	sqOK(t, srv.addr, nil, "topic", "create", "tty")
	for _, tc := range []struct {
		args  []string
		typed string
		hint  string
		out   string
	}{
		{[]string{"produce", "-t", "tty"}, "first\nsecond\n\x04",
			"sq: reading records for tty from the terminal, one per line; Ctrl-D ends the input, Ctrl-C stops",
			"produced 2 records to tty: partition 0 offsets 0-1"},
		{[]string{"produce", "-t", "tty", "--file", "-", "--delimiter", ","}, "a,b\n\x04",
			"sq: reading records for tty from the terminal, split at --delimiter; Ctrl-D ends the input, Ctrl-C stops",
			"produced 2 records to tty: partition 0 offsets 2-3"},
		{[]string{"produce", "-t", "tty", "--value-file", "-"}, "whole\n\x04",
			"sq: reading one record for tty from the terminal; Ctrl-D ends the input, Ctrl-C stops",
			"produced 1 record to tty: partition 0 offset 4"},
	} {
		master, slave := openPTY(t)
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout) // guards against a hang only
		cmd := exec.CommandContext(ctx, bins.cli, append([]string{"--server", srv.addr}, tc.args...)...)
		cmd.Env = cleanEnv()
		stdout, stderr := newLogBuffer(), newLogBuffer()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, stdout, stderr
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		for {
			text, changed := stderr.Snapshot()
			if strings.Contains(text, tc.hint) {
				break
			}
			select {
			case <-changed:
			case <-ctx.Done():
				cancel()
				t.Fatalf("sq %v: no hint on stderr; stderr:\n%s", tc.args, text)
			}
		}
		// The terminal echoes what is typed: drain it so the echo never fills.
		go func() {
			buf := make([]byte, 4096)
			for {
				if _, err := master.Read(buf); err != nil {
					return
				}
			}
		}()
		if _, err := master.WriteString(tc.typed); err != nil {
			cancel()
			t.Fatal(err)
		}
		err := cmd.Wait()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut || err != nil {
			t.Fatalf("sq %v: %v (guard deadline hit: %v); stderr:\n%s", tc.args, err, timedOut, stderr)
		}
		if got := strings.TrimSpace(stdout.String()); got != tc.out {
			t.Errorf("sq %v: stdout %q, want %q", tc.args, got, tc.out)
		}
	}
	if got := sqOK(t, srv.addr, nil, "consume", "-t", "tty"); got != "first\nsecond\na\nb\n\nwhole\n\n" {
		t.Errorf("consumed %q", got)
	}
	for _, args := range [][]string{{"produce", "-t", "tty"}, {"produce", "-t", "tty", "--value-file", "-"}} {
		if r := runSQ(t, srv.addr, []byte("piped\n"), args...); r.code != 0 || strings.Contains(r.stderr, "terminal") {
			t.Errorf("sq %v from a pipe: status %d, stderr %q; want 0 and no terminal hint", args, r.code, r.stderr)
		}
	}
}
