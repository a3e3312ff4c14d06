package e2e

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// exitGuard only keeps a broken program from hanging the tests that wait
// for it; they never assert how long anything takes.
const exitGuard = 2 * time.Minute

// cliProc is a program (sq, or an example) running in the background with
// its stdout and stderr collected, for tests that wait for its output and
// signal it.
type cliProc struct {
	cmd            *exec.Cmd
	stdout, stderr *logBuffer
	exited         chan struct{}
	err            error // Wait's result, set before exited is closed
}

// startProcess starts bin with args in the test environment (cleanEnv);
// stdin may be nil. The process is killed at the end of the test if it
// still runs.
func startProcess(t *testing.T, bin string, stdin io.Reader, args ...string) *cliProc {
	t.Helper()
	c := &cliProc{cmd: exec.Command(bin, args...), stdout: newLogBuffer(), stderr: newLogBuffer(), exited: make(chan struct{})}
	c.cmd.Env = cleanEnv()
	c.cmd.Stdout, c.cmd.Stderr, c.cmd.Stdin = c.stdout, c.stderr, stdin
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start %s %v: %v", bin, args, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	})
	return c
}

// startCLI starts sq against addr with args; stdin may be nil.
func startCLI(t *testing.T, addr string, stdin io.Reader, args ...string) *cliProc {
	t.Helper()
	return startProcess(t, bins.cli, stdin, append([]string{"--server", addr}, args...)...)
}

// waitFor waits until the text of buf (c.stdout or c.stderr) satisfies
// ok and returns it; it fails the test when the process exits first or
// exitGuard passes.
func (c *cliProc) waitFor(t *testing.T, buf *logBuffer, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.After(exitGuard)
	for {
		text, changed := buf.Snapshot()
		if ok(text) {
			return text
		}
		select {
		case <-changed:
		case <-c.exited:
			if text := buf.String(); ok(text) {
				return text
			}
			t.Fatalf("%s exited (%v) before %s; stdout:\n%s\nstderr:\n%s", c.cmd.Path, c.err, what, truncate(c.stdout.String(), 2000), c.stderr)
		case <-deadline:
			t.Fatalf("no %s within %v; stdout:\n%s\nstderr:\n%s", what, exitGuard, truncate(c.stdout.String(), 2000), c.stderr)
		}
	}
}

// done reports whether the process has exited.
func (c *cliProc) done() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// exitCode waits for the exit (failing the test after exitGuard) and
// returns the status.
func (c *cliProc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-c.exited:
	case <-time.After(exitGuard):
		t.Fatalf("%s did not exit within %v; stdout:\n%s\nstderr:\n%s", c.cmd.Path, exitGuard, c.stdout, c.stderr)
	}
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		return ee.ExitCode()
	}
	if c.err != nil {
		t.Fatalf("%s: %v", c.cmd.Path, c.err)
	}
	return 0
}

// signal sends sig to the process.
func (c *cliProc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s: %v", c.cmd.Path, err)
	}
}

// interrupt sends SIGINT and returns the exit status.
func (c *cliProc) interrupt(t *testing.T) int {
	t.Helper()
	c.signal(t, syscall.SIGINT)
	return c.exitCode(t)
}
