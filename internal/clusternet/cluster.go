package clusternet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Addresses and limits of a cluster's network.
const (
	// MaxNodes bounds Config.Nodes.
	MaxNodes = 16
	// ClientIP is the client namespace's address.
	ClientIP = "10.0.0.254"
	// Ports of sq-server in ServerArgs: each node has its own namespace, so
	// every node uses the defaults and a restart keeps its addresses.
	GRPCPort  = 6060
	HTTPPort  = 6062
	CapnpPort = 6064
)

// Config describes a cluster for New.
type Config struct {
	// Nodes is the number of node namespaces, 1..MaxNodes (3 or 5 for a
	// quorum).
	Nodes int
	// ServerBin is the sq-server binary that Node.Start runs.
	ServerBin string
	// StartTimeout bounds the wait for a started server's "data plane
	// listening" line; 0 means 30 s.
	StartTimeout time.Duration
	// StopTimeout bounds the wait for a server to exit after SIGTERM at
	// cleanup before it is killed; 0 means 40 s (sq-server's own shutdown
	// takes up to 30 s).
	StopTimeout time.Duration
}

// Cluster is a set of node namespaces, a client namespace and the bridge
// that joins them, made for one test and removed when it ends.
type Cluster struct {
	t      testing.TB
	cfg    Config
	prefix string
	bridge *Namespace
	client *Namespace
	nodes  []*Node
}

// Node is one node's namespace, its directories and its current process.
type Node struct {
	Namespace
	// Index is the node's number, 1..Nodes; its address is 10.0.0.Index.
	Index int
	// Dir is the server's working directory (a t.TempDir, so relative
	// paths such as the default --data-dir ./data land in it).
	Dir string
	// DataDir is Dir/data, given to the server as SQ_DATA_DIR (a
	// --data-dir flag would win over it).
	DataDir string
	// Addr is the data-plane address of the current server as others
	// reach it (10.0.0.Index:port), set by Start.
	Addr string

	c     *Cluster
	mu    sync.Mutex
	procs []*Process // every process started, the current one last
	args  []string   // arguments of the last Start
	env   []string   // environment added by the last StartEnv
}

var seq atomic.Int64

// New makes a cluster's namespaces and bridge for t and removes them, and
// every process started in them, when t ends. It skips or fails t as
// Require does when namespaces cannot be made, and fails t on a bad
// Config or a failed ip or nft command.
func New(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	Require(t)
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes {
		t.Fatalf("clusternet: Config.Nodes %d: want 1..%d", cfg.Nodes, MaxNodes)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 40 * time.Second
	}
	c := &Cluster{t: t, cfg: cfg, prefix: fmt.Sprintf("%s%s-%d", namePrefix, selfTag(), seq.Add(1))}
	c.bridge = &Namespace{Name: c.prefix + "-br"}
	c.client = &Namespace{Name: c.prefix + "-cl", IP: ClientIP}
	for i := 1; i <= cfg.Nodes; i++ {
		dir := t.TempDir()
		c.nodes = append(c.nodes, &Node{
			Namespace: Namespace{Name: c.prefix + "-n" + strconv.Itoa(i), IP: "10.0.0." + strconv.Itoa(i)},
			Index:     i, Dir: dir, DataDir: filepath.Join(dir, "data"), c: c,
		})
	}
	// Registered before anything is made, so a half-made cluster goes too.
	t.Cleanup(c.cleanup)
	if err := c.build(); err != nil {
		t.Fatal(err)
	}
	return c
}

// build makes the namespaces, links, addresses and the empty nft table.
func (c *Cluster) build() error {
	if err := run("", "ip", "netns", "add", c.bridge.Name); err != nil {
		return err
	}
	br := []string{"link set lo up", "link add br0 type bridge", "link set br0 up"}
	ends := append([]*Namespace{c.client}, c.namespaces()...)
	for _, ns := range ends {
		if err := run("", "ip", "netns", "add", ns.Name); err != nil {
			return err
		}
		port := portName(ns, c)
		br = append(br, fmt.Sprintf("link add %s type veth peer name eth0 netns %s", port, ns.Name),
			fmt.Sprintf("link set %s master br0 up", port))
	}
	if err := run(strings.Join(br, "\n")+"\n", "ip", "-n", c.bridge.Name, "-batch", "-"); err != nil {
		return err
	}
	for _, ns := range ends {
		cmds := fmt.Sprintf("link set lo up\naddr add %s/24 dev eth0\nlink set eth0 up\n", ns.IP)
		if err := run(cmds, "ip", "-n", ns.Name, "-batch", "-"); err != nil {
			return err
		}
	}
	return c.nft("table bridge sqnet {\n\tchain forward {\n\t\ttype filter hook forward priority 0; policy accept;\n\t}\n}\n")
}

// portName is the bridge-side name of a namespace's veth: nI or cl.
func portName(ns *Namespace, c *Cluster) string {
	if ns == c.client {
		return "cl"
	}
	return "n" + strings.TrimPrefix(ns.IP, "10.0.0.")
}

// nft loads a ruleset (nft -f) in the bridge namespace: one transaction.
func (c *Cluster) nft(rules string) error {
	return run(rules, "ip", "netns", "exec", c.bridge.Name, "nft", "-f", "-")
}

func (c *Cluster) namespaces() []*Namespace {
	var out []*Namespace
	for _, n := range c.nodes {
		out = append(out, &n.Namespace)
	}
	return out
}

// Nodes returns the nodes, Node 1 first.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node returns node i (1-based, as its address 10.0.0.i).
func (c *Cluster) Node(i int) *Node {
	c.t.Helper()
	if i < 1 || i > len(c.nodes) {
		c.t.Fatalf("clusternet: node %d: the cluster has nodes 1..%d", i, len(c.nodes))
	}
	return c.nodes[i-1]
}

// Client is the client namespace (ClientIP): it reaches every node
// whatever the partition.
func (c *Cluster) Client() *Namespace { return c.client }

// Names returns every namespace name of the cluster, the bridge's last.
func (c *Cluster) Names() []string {
	names := []string{c.client.Name}
	for _, n := range c.nodes {
		names = append(names, n.Name)
	}
	return append(names, c.bridge.Name)
}

// cleanup stops every process still running (SIGCONT and SIGTERM, then
// SIGKILL after StopTimeout), kills whatever else runs in the namespaces
// and deletes them. A server that exits non-zero after SIGTERM, or not at
// all, fails the test; how a process that exited earlier ended is the
// test's business.
func (c *Cluster) cleanup() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		n.mu.Lock()
		procs := append([]*Process(nil), n.procs...)
		n.mu.Unlock()
		for _, p := range procs {
			if !p.running() {
				continue
			}
			wg.Go(func() {
				code, graceful := p.terminate(c.cfg.StopTimeout)
				switch {
				case !graceful:
					c.t.Errorf("clusternet: node %d pid %d still ran %v after SIGTERM; killed; log:\n%s", n.Index, p.Pid(), c.cfg.StopTimeout, p.Log())
				case code != 0 && code != -1:
					c.t.Errorf("clusternet: node %d pid %d exited with status %d at cleanup; log:\n%s", n.Index, p.Pid(), code, p.Log())
				}
			})
		}
	}
	wg.Wait()
	if c.t.Failed() {
		for _, n := range c.nodes {
			if p := n.current(); p != nil {
				// The whole log of every process the node ran, in a file
				// that outlives the test (the last one's tail is
				// printed): the start of a failure is often far back,
				// before a restart.
				n.mu.Lock()
				procs := slices.Clone(n.procs)
				n.mu.Unlock()
				var all strings.Builder
				for k, q := range procs {
					fmt.Fprintf(&all, "=== clusternet: node %d process %d of %d (pid %d) ===\n", n.Index, k+1, len(procs), q.Pid())
					all.WriteString(q.Log())
				}
				keep := filepath.Join(os.TempDir(), fmt.Sprintf("sq-clusternet-%s-node-%d.log", strings.ReplaceAll(c.t.Name(), "/", "_"), n.Index))
				if err := os.WriteFile(keep, []byte(all.String()), 0o644); err != nil {
					keep = "not kept: " + err.Error()
				}
				c.t.Logf("clusternet: node %d (%s) log (whole: %s):\n%s", n.Index, n.IP, keep, tail(p.Log(), 8<<10))
			}
		}
	}
	var errs []error
	for _, name := range c.Names() {
		errs = append(errs, deleteNetns(name))
	}
	if err := errors.Join(errs...); err != nil {
		c.t.Errorf("clusternet: cleanup: %v", err)
	}
}

// tail returns the last max bytes of s.
func tail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return "...\n" + s[len(s)-max:]
}

// ServerArgs returns sq-server arguments for node n: serve with the node
// id node-I and the three listeners on the node's address at the default
// ports, JSON logs, then extra.
func (n *Node) ServerArgs(extra ...string) []string {
	return append([]string{"serve", "--node-id", "node-" + strconv.Itoa(n.Index),
		"--grpc-host", net.JoinHostPort(n.IP, strconv.Itoa(GRPCPort)),
		"--capnp-host", net.JoinHostPort(n.IP, strconv.Itoa(CapnpPort)),
		"--http-host", net.JoinHostPort(n.IP, strconv.Itoa(HTTPPort)),
		"--log-format", "json"}, extra...)
}

// Start runs Config.ServerBin with args (verbatim: the seed README's
// command lines work unchanged; ServerArgs gives the usual ones) in the
// node's namespace, working directory Dir and SQ_DATA_DIR=DataDir, waits
// for its "data plane listening" line and sets Addr. It fails the test
// when the node's previous process still runs or the server does not
// start.
func (n *Node) Start(args ...string) *Process {
	n.c.t.Helper()
	return n.StartEnv(nil, args...)
}

// StartEnv is Start with env (KEY=value items, SQ_* ones included) added
// to the process's environment after SQ_DATA_DIR, so an SQ_DATA_DIR in
// env wins. Restart uses the same env.
func (n *Node) StartEnv(env []string, args ...string) *Process {
	t := n.c.t
	t.Helper()
	if p := n.current(); p != nil && p.running() {
		t.Fatalf("clusternet: node %d: start while pid %d still runs (Kill or Stop it first)", n.Index, p.Pid())
	}
	// Not tied to a context: cleanup stops it, after the test's context ends.
	cmd := n.Command(context.Background(), n.c.cfg.ServerBin, args...)
	cmd.Dir = n.Dir
	cmd.Env = append(append(cmd.Env, "SQ_DATA_DIR="+n.DataDir), env...)
	p, err := start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.procs = append(n.procs, p)
	n.args, n.env = args, env
	n.mu.Unlock()
	addr, err := p.waitListening(n.c.cfg.StartTimeout)
	if err != nil {
		t.Fatalf("node %d: %v", n.Index, err)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("clusternet: node %d logged data-plane address %q: %v", n.Index, addr, err)
	}
	n.Addr = net.JoinHostPort(n.IP, port)
	return p
}

// Restart starts the node again with the arguments (and env) of its last Start, on
// the same directories, after Kill, Stop or a crash.
func (n *Node) Restart() *Process {
	n.c.t.Helper()
	n.mu.Lock()
	args, env := n.args, n.env
	n.mu.Unlock()
	if args == nil {
		n.c.t.Fatalf("clusternet: node %d: Restart before Start", n.Index)
	}
	return n.StartEnv(env, args...)
}

// Process returns the node's current (last started) process, nil before
// Start.
func (n *Node) Process() *Process { return n.current() }

func (n *Node) current() *Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.procs) == 0 {
		return nil
	}
	return n.procs[len(n.procs)-1]
}

func (n *Node) must() *Process {
	n.c.t.Helper()
	p := n.current()
	if p == nil {
		n.c.t.Fatalf("clusternet: node %d has no process (Start first)", n.Index)
	}
	return p
}

// Kill sends SIGKILL (kill -9) to the node's process and waits for its
// exit.
func (n *Node) Kill() { n.c.t.Helper(); n.must().Kill() }

// Stop sends SIGTERM and fails the test unless the process exits with
// status 0 within Config.StopTimeout.
func (n *Node) Stop() {
	t := n.c.t
	t.Helper()
	p := n.must()
	if code, graceful := p.terminate(n.c.cfg.StopTimeout); !graceful || code != 0 {
		t.Fatalf("clusternet: node %d: status %d after SIGTERM (killed: %v); log:\n%s", n.Index, code, !graceful, tail(p.Log(), 8<<10))
	}
}

// Pause sends SIGSTOP to the node's process and waits until it is stopped.
func (n *Node) Pause() {
	n.c.t.Helper()
	if err := n.must().Pause(); err != nil {
		n.c.t.Fatal(err)
	}
}

// Resume sends SIGCONT to the node's process and waits until it runs.
func (n *Node) Resume() {
	n.c.t.Helper()
	if err := n.must().Resume(); err != nil {
		n.c.t.Fatal(err)
	}
}
