package clusternet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Bounds of the harness's own commands; they guard against hangs only.
const (
	cmdTimeout = 20 * time.Second // one ip or nft command
	netnsDir   = "/run/netns"     // where ip(8) names namespaces
	namePrefix = "sqnet-"
)

// Namespace is one network namespace made by New.
type Namespace struct {
	// Name is the namespace's name for ip(8): ip netns exec Name ...
	Name string
	// IP is its address on the bridge (10.0.0.I), empty for the bridge's
	// own namespace.
	IP string
}

// Command returns a command that runs name with args inside the namespace
// (ip netns exec, which execs name: the process's pid is the command's
// own, so signals reach it directly). Its environment is the test's
// without SQ_* variables; it is killed when ctx ends or the test process
// dies.
func (ns *Namespace) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = cmdTimeout
	return cmd
}

// DialContext connects from inside the namespace, as net.Dialer does (use
// it as a gRPC context dialer or to probe reachability). Only IP literals
// are accepted in addr: resolving names could run on another thread,
// outside the namespace.
func (ns *Namespace) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("clusternet: dial %q: %w", addr, err)
	}
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("clusternet: dial %q: the host must be an IP address", addr)
	}
	var c net.Conn
	err = inNetns(netnsDir+"/"+ns.Name, func() error {
		var derr error
		c, derr = new(net.Dialer).DialContext(ctx, network, addr)
		return derr
	})
	return c, err
}

// Listen listens on addr inside the namespace, as net.Listen does: the
// socket belongs to the namespace for its whole life, so a server run by
// the test process itself (a fake S3, say) serves the processes of the
// namespaces, which reach it at the namespace's IP. Only IP literals are
// accepted in addr, as in DialContext. The caller closes the listener.
func (ns *Namespace) Listen(network, addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("clusternet: listen %q: %w", addr, err)
	}
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("clusternet: listen %q: the host must be an IP address", addr)
	}
	var l net.Listener
	err = inNetns(netnsDir+"/"+ns.Name, func() error {
		var lerr error
		l, lerr = net.Listen(network, addr)
		return lerr
	})
	return l, err
}

// cleanEnv is the environment without SQ_* variables, so a developer's
// settings do not leak into the processes under test.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQ_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// run runs a harness command (ip, nft) with stdin, bounded by cmdTimeout.
func run(stdin string, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = cmdTimeout
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("clusternet: %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// selfTag is "<pid>.<start time>" of this process: the start time (clock
// ticks after boot, proc(5) field 22) tells a reused pid from the process
// that made a namespace.
func selfTag() string { return procTag(os.Getpid()) }

// procTag returns "<pid>.<start time>", or "" when pid does not run.
func procTag(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces: fields count from its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return strconv.Itoa(pid) + "." + f[19] // field 22 is the 20th after ')'
}

// procState returns the state letter of pid (proc(5) field 3: R, S, T...).
func procState(pid int) (byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("clusternet: unreadable /proc/%d/stat", pid)
	}
	return b[i+2], nil
}

// staleOwner returns the "<pid>.<start time>" tag in a namespace name made
// by this package, and whether the name is one.
func staleOwner(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return "", false
	}
	tag, _, ok := strings.Cut(rest, "-")
	pid, _, dot := strings.Cut(tag, ".")
	if _, err := strconv.Atoi(pid); !ok || !dot || err != nil {
		return "", false
	}
	return tag, true
}

// removeStale deletes the namespaces made by test processes that no longer
// run, killing the processes still inside them first. It returns the
// names it removed.
func removeStale() ([]string, error) {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		tag, ok := staleOwner(e.Name())
		if !ok {
			continue
		}
		pid, _ := strconv.Atoi(strings.SplitN(tag, ".", 2)[0])
		if procTag(pid) == tag {
			continue // its test process still runs
		}
		if err := deleteNetns(e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// killInside sends SIGKILL to every process in the namespace (ip netns
// pids) and waits, bounded, until none is left.
func killInside(name string) error {
	deadline := time.Now().Add(cmdTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
		out, err := exec.CommandContext(ctx, "ip", "netns", "pids", name).Output()
		cancel()
		if err != nil {
			return fmt.Errorf("clusternet: ip netns pids %s: %w", name, err)
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clusternet: processes %v still in namespace %s after SIGKILL", pids, name)
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond) // between polls of a bounded wait
	}
}

// deleteNetns kills what runs in the namespace and deletes it, with its
// configuration files (SetHosts).
func deleteNetns(name string) error {
	_ = os.RemoveAll(netnsEtc + "/" + name)
	if _, err := os.Stat(netnsDir + "/" + name); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	kerr := killInside(name)
	return errors.Join(kerr, run("", "ip", "netns", "del", name))
}

var probe struct {
	once sync.Once
	err  error
}

// available reports why namespaces cannot be made here (nil when they
// can); the first call also removes stale namespaces.
func available() error {
	probe.once.Do(func() {
		probe.err = func() error {
			if err := platformErr(); err != nil {
				return err
			}
			if uid := os.Geteuid(); uid != 0 {
				return fmt.Errorf("network namespaces need root (running as uid %d)", uid)
			}
			for _, tool := range []string{"ip", "nft"} {
				if _, err := exec.LookPath(tool); err != nil {
					return fmt.Errorf("%s(8) not found (Debian: apt-get install iproute2 nftables)", tool)
				}
			}
			if _, err := removeStale(); err != nil {
				return err
			}
			name := namePrefix + selfTag() + "-probe"
			if err := run("", "ip", "netns", "add", name); err != nil {
				return fmt.Errorf("ip netns add is not permitted here: %w", err)
			}
			return run("", "ip", "netns", "del", name)
		}()
	})
	return probe.err
}

// skipOrFail decides what Require does with the reason namespaces are
// unavailable: skip, or fail when ci is "true".
func skipOrFail(reason error, ci string) (fail bool, msg string) {
	if ci == "true" {
		return true, fmt.Sprintf("clusternet: CI=true and the namespace tests must run, but %v", reason)
	}
	return false, fmt.Sprintf("clusternet: skipped: %v (these tests need root, ip and nft; CI=true makes this a failure)", reason)
}

// Require skips the test when network namespaces cannot be made here (not
// root, no ip or nft, ip netns add refused), or fails it when the
// environment has CI=true. New calls it.
func Require(t testing.TB) {
	t.Helper()
	err := available()
	if err == nil {
		return
	}
	if fail, msg := skipOrFail(err, os.Getenv("CI")); fail {
		t.Fatal(msg)
	} else {
		t.Skip(msg)
	}
}
