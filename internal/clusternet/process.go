package clusternet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/seedqueue/sq/internal/testutil"
)

// Process is a process started in a namespace by Node.Start.
type Process struct {
	cmd    *exec.Cmd
	log    *logBuffer
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's result, set before exited is closed
}

// start starts cmd with its stdout and stderr collected.
func start(cmd *exec.Cmd) (*Process, error) {
	p := &Process{cmd: cmd, log: newLogBuffer(), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("clusternet: start %v: %w", cmd.Args, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process id (the program's own: ip netns exec execs it).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Log is everything the process wrote to stdout and stderr so far.
func (p *Process) Log() string { return p.log.String() }

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitStatus waits up to d for the exit and returns the exit status, or
// the signal that ended the process (0 when it exited); ok is false when
// it still runs after d.
func (p *Process) ExitStatus(d time.Duration) (code int, sig syscall.Signal, ok bool) {
	if p.running() {
		select {
		case <-p.exited:
		case <-time.After(d):
			return 0, 0, false
		}
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, isWS := ee.Sys().(syscall.WaitStatus); isWS && ws.Signaled() {
			return -1, ws.Signal(), true
		}
		return ee.ExitCode(), 0, true
	}
	return 0, 0, true
}

// running reports whether the process has not exited.
func (p *Process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL (kill -9) and waits for the exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Pause sends SIGSTOP and waits until the kernel reports the process
// stopped (state T in /proc/PID/stat): from then on it answers nothing,
// while its sockets stay open, as a hung node.
func (p *Process) Pause() error { return p.signalState(syscall.SIGSTOP, true) }

// Resume sends SIGCONT and waits until the process is no longer stopped.
func (p *Process) Resume() error { return p.signalState(syscall.SIGCONT, false) }

func (p *Process) signalState(sig syscall.Signal, stopped bool) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("clusternet: %v to pid %d: %w", sig, p.Pid(), err)
	}
	deadline := time.Now().Add(cmdTimeout)
	for {
		st, err := procState(p.Pid())
		if err != nil {
			return fmt.Errorf("clusternet: pid %d after %v: %w", p.Pid(), sig, err)
		}
		if (st == 'T') == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clusternet: pid %d in state %c %v after %v", p.Pid(), st, cmdTimeout, sig)
		}
		time.Sleep(5 * time.Millisecond) // between polls of a bounded wait
	}
}

// terminate resumes the process if stopped, sends SIGTERM and waits up to
// d; a process still running then gets SIGQUIT (the Go runtime writes its
// goroutines' stacks into the log) and, 5 s later, is killed. It returns the exit status
// (-1 when a signal ended it) and whether SIGTERM sufficed.
func (p *Process) terminate(d time.Duration) (code int, graceful bool) {
	if !p.running() {
		c, _, _ := p.ExitStatus(0)
		return c, true
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if c, _, ok := p.ExitStatus(d); ok {
		return c, true
	}
	// Stuck: SIGQUIT makes the Go runtime write every goroutine's stack
	// to stderr (into the log) before it exits, so the log says where.
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	if _, _, ok := p.ExitStatus(5 * time.Second); ok {
		return -1, false
	}
	p.Kill()
	return -1, false
}

// logBuffer collects a process's output and wakes waiters on every
// write (testutil.LogBuffer).
type logBuffer = testutil.LogBuffer

func newLogBuffer() *logBuffer { return testutil.NewLogBuffer() }

// listenLine matches sq-server's startup line in the text log format.
var listenLine = regexp.MustCompile(`msg="data plane listening" addr=(\S+)`)

// listenAddr finds the data-plane address in the JSON or text log.
func listenAddr(text string) string {
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, "{") {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "data plane listening" {
				return rec.Addr
			}
			continue
		}
		if m := listenLine.FindStringSubmatch(line); m != nil {
			return m[1]
		}
	}
	return ""
}

// waitListening waits up to d for sq-server's "data plane listening" line
// and returns the address in it.
func (p *Process) waitListening(d time.Duration) (string, error) {
	deadline := time.After(d)
	for {
		text, changed := p.log.Snapshot()
		if addr := listenAddr(text); addr != "" {
			return addr, nil
		}
		select {
		case <-changed:
		case <-p.exited:
			if addr := listenAddr(p.log.String()); addr != "" {
				return addr, nil
			}
			return "", fmt.Errorf("clusternet: sq-server exited before listening (%v); log:\n%s", p.err, p.log)
		case <-deadline:
			return "", fmt.Errorf("clusternet: sq-server did not log \"data plane listening\" within %v; log:\n%s", d, p.log)
		}
	}
}
