package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// stopTimeout bounds the wait for a server to exit after SIGTERM.
const stopTimeout = 20 * time.Second

// proc is one started server process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	exited chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// output returns what the process printed so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// start runs bin with args, collecting its output.
func start(name, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop sends SIGTERM, then SIGKILL after stopTimeout, and waits.
func (p *proc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitPort waits until addr accepts TCP connections or p exits.
func waitPort(p *proc, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before listening:\n%s", p.name, p.output())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %v:\n%s", p.name, addr, timeout, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mustTempDir makes a directory under parent for one server's data.
func mustTempDir(parent, name string) (string, error) {
	return os.MkdirTemp(parent, name+"-")
}
