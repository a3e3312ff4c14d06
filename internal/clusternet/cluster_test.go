package clusternet_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/internal/clusternet"
)

// TestServe runs three sq-servers at 10.0.0.1-3, each in its own
// namespace, and uses them with sq from the client namespace and from one
// node's namespace to another node.
func TestServe(t *testing.T) {
	c := newCluster(t, 3)
	for _, n := range c.Nodes() {
		p := n.Start(n.ServerArgs()...)
		if want := fmt.Sprintf("10.0.0.%d:%d", n.Index, clusternet.CapnpPort); n.Addr != want {
			t.Errorf("node %d: Addr %q, want %q", n.Index, n.Addr, want)
		}
		out, err := exec.Command("ip", "netns", "identify", fmt.Sprint(p.Pid())).Output()
		if err != nil || strings.TrimSpace(string(out)) != n.Name {
			t.Errorf("node %d: pid %d is in namespace %q (%v), want %q", n.Index, p.Pid(), strings.TrimSpace(string(out)), err, n.Name)
		}
	}
	cl := c.Client()
	for _, n := range c.Nodes() {
		sqOK(t, cl, n.Addr, "", "topic", "create", "orders", "--partitions", "2")
		in := fmt.Sprintf("a-%d\nb-%d\n", n.Index, n.Index)
		sqOK(t, cl, n.Addr, in, "produce", "-t", "orders", "-p", "1")
	}
	for _, n := range c.Nodes() {
		if out := sqOK(t, cl, n.Addr, "", "topic", "list"); !strings.Contains(out, "orders") {
			t.Errorf("node %d: topic list:\n%s\nwant orders", n.Index, out)
		}
		want := fmt.Sprintf("a-%d\nb-%d\n", n.Index, n.Index)
		if out := sqOK(t, cl, n.Addr, "", "consume", "-t", "orders"); out != want {
			t.Errorf("node %d: consume from the client namespace: %q, want %q", n.Index, out, want)
		}
	}
	// From node 1's namespace to node 2, across the bridge.
	if out := sqOK(t, &c.Node(1).Namespace, c.Node(2).Addr, "", "consume", "-t", "orders"); out != "a-2\nb-2\n" {
		t.Errorf("consume from node 1 of node 2: %q", out)
	}
}

// checkReach requires that node a reaches node b exactly when they are
// on the same side, and that the client reaches every node. The pairs
// across the cut are dialled at once: each waits for its timeout.
func checkReach(t *testing.T, c *clusternet.Cluster, sides [][]int) {
	t.Helper()
	side := map[int]int{}
	for s, ns := range sides {
		for _, i := range ns {
			side[i] = s
		}
	}
	var wg sync.WaitGroup
	cut := make(chan string, len(c.Nodes())*len(c.Nodes()))
	for _, a := range c.Nodes() {
		for _, b := range c.Nodes() {
			if a == b {
				continue
			}
			if side[a.Index] == side[b.Index] {
				eventually(t, fmt.Sprintf("node %d reaches node %d (sides %v)", a.Index, b.Index, sides), func() error {
					return dial(&a.Namespace, b.Addr, waitTimeout)
				})
				continue
			}
			wg.Go(func() {
				err := dial(&a.Namespace, b.Addr, cutTimeout)
				var ne net.Error
				if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
					cut <- fmt.Sprintf("node %d to node %d across sides %v: dial error %v, want a timeout", a.Index, b.Index, sides, err)
				}
			})
		}
		if err := dial(c.Client(), a.Addr, waitTimeout); err != nil {
			t.Errorf("client to node %d (sides %v): %v", a.Index, sides, err)
		}
	}
	wg.Wait()
	close(cut)
	for msg := range cut {
		t.Error(msg)
	}
}

// TestIsolateSplitHeal cuts a three-node cluster in each way and heals it,
// checking every pair of nodes and the sq CLI across the cut.
func TestIsolateSplitHeal(t *testing.T) {
	c := newCluster(t, 3)
	for _, n := range c.Nodes() {
		n.Start(n.ServerArgs()...)
	}
	all := [][]int{{1, 2, 3}}
	checkReach(t, c, all)

	c.Isolate(3)
	checkReach(t, c, [][]int{{1, 2}, {3}})
	n1 := &c.Node(1).Namespace
	if r := runSQ(t, n1, c.Node(3).Addr, "", "topic", "list", "--timeout", "1s"); r.code != 1 || !strings.Contains(r.stderr, c.Node(3).Addr) {
		t.Errorf("sq topic list from node 1 to isolated node 3: status %d, stderr %q; want 1 naming %s", r.code, r.stderr, c.Node(3).Addr)
	}
	sqOK(t, n1, c.Node(2).Addr, "", "topic", "list")
	c.Heal()
	checkReach(t, c, all)
	sqOK(t, n1, c.Node(3).Addr, "", "topic", "list")

	c.Split(1)
	checkReach(t, c, [][]int{{1}, {2, 3}})
	c.Partition([]int{1, 2}, []int{3}) // replaces the split at once
	checkReach(t, c, [][]int{{1, 2}, {3}})
	c.Heal()
	checkReach(t, c, all)
}

// TestKillRestart kills a node with SIGKILL and restarts it on the same
// data directory and address: the acknowledged records are still there.
func TestKillRestart(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	n := c.Node(1)
	n.Start(n.ServerArgs()...)
	cl := c.Client()
	sqOK(t, cl, n.Addr, "", "topic", "create", "kept")
	sqOK(t, cl, n.Addr, "one\ntwo\nthree\n", "produce", "-t", "kept")
	old := n.Process()
	n.Kill()
	if _, sig, ok := old.ExitStatus(0); !ok || sig != syscall.SIGKILL {
		t.Fatalf("after Kill: exited %v, signal %v; want SIGKILL", ok, sig)
	}
	if r := runSQ(t, cl, n.Addr, "", "topic", "list", "--timeout", "1s"); r.code != 1 {
		t.Fatalf("sq topic list against the killed node: status %d, want 1", r.code)
	}
	p := n.Restart()
	if p == old || p.Pid() == old.Pid() {
		t.Fatal("Restart returned the old process")
	}
	if out := sqOK(t, cl, n.Addr, "", "consume", "-t", "kept"); out != "one\ntwo\nthree\n" {
		t.Fatalf("after kill -9 and restart: %q, want the three records", out)
	}
	sqOK(t, cl, n.Addr, "four\n", "produce", "-t", "kept")
	if out := sqOK(t, cl, n.Addr, "", "consume", "-t", "kept", "-o", "-1"); out != "four\n" {
		t.Fatalf("after restart, produce and consume: %q", out)
	}
	if _, err := os.Stat(n.DataDir); err != nil {
		t.Fatalf("data dir: %v", err)
	}
}

// TestPauseResume stops node 1 with SIGSTOP: requests to it time out
// while node 2 answers; SIGCONT makes it answer again.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2)
	for _, n := range c.Nodes() {
		n.Start(n.ServerArgs()...)
	}
	n1, n2, cl := c.Node(1), c.Node(2), c.Client()
	sqOK(t, cl, n1.Addr, "", "topic", "create", "p")
	n1.Pause()
	r := runSQ(t, cl, n1.Addr, "", "topic", "list", "--timeout", "1s")
	if r.code != 1 || !strings.Contains(r.stderr, n1.Addr) {
		t.Errorf("sq topic list against the stopped node: status %d, stderr %q; want 1 naming %s", r.code, r.stderr, n1.Addr)
	}
	sqOK(t, cl, n2.Addr, "", "topic", "list")
	n1.Resume()
	eventually(t, "node 1 answers after SIGCONT", func() error {
		if r := runSQ(t, cl, n1.Addr, "", "topic", "list", "--timeout", "2s"); r.code != 0 || !strings.Contains(r.stdout, "p") {
			return fmt.Errorf("status %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		return nil
	})
}

// TestCleanup checks that a cluster's namespaces and processes are gone
// when its test ends, a paused server included.
func TestCleanup(t *testing.T) {
	var names []string
	var pids []int
	t.Run("cluster", func(t *testing.T) {
		c := newCluster(t, 2)
		for _, n := range c.Nodes() {
			pids = append(pids, n.Start(n.ServerArgs()...).Pid())
		}
		c.Node(2).Pause()
		c.Isolate(1)
		names = c.Names()
		for _, name := range names {
			if _, err := os.Stat("/run/netns/" + name); err != nil {
				t.Fatalf("namespace %s: %v", name, err)
			}
		}
	})
	if len(names) != 4 {
		t.Fatalf("namespaces %v: want client, 2 nodes, bridge", names)
	}
	for _, name := range names {
		if _, err := os.Stat("/run/netns/" + name); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s after the test: %v, want it gone", name, err)
		}
	}
	for _, pid := range pids {
		if !processGone(pid) {
			t.Errorf("pid %d still runs after the test", pid)
		}
	}
}

// TestFiveNodes splits five nodes 3|2 and 1|4 and heals them.
func TestFiveNodes(t *testing.T) {
	c := newCluster(t, 5)
	for _, n := range c.Nodes() {
		n.Start(n.ServerArgs()...)
	}
	checkReach(t, c, [][]int{{1, 2, 3, 4, 5}})
	c.Split(4, 5)
	checkReach(t, c, [][]int{{1, 2, 3}, {4, 5}})
	c.Isolate(2)
	checkReach(t, c, [][]int{{1, 3, 4, 5}, {2}})
	c.Heal()
	checkReach(t, c, [][]int{{1, 2, 3, 4, 5}})
}

// TestSeedReadmeLayout starts the seed README's three cluster command
// lines verbatim (listeners on 0.0.0.0, ports 6060/6070/6080, --seeds at
// 10.0.0.1-2), one per namespace, checks the addresses the harness reads,
// produces through every node and restarts one of them.
func TestSeedReadmeLayout(t *testing.T) {
	c := newCluster(t, 3)
	lines := [][]string{
		{"--node-id", "node-1", "--grpc-host", "0.0.0.0:6060", "--capnp-host", "0.0.0.0:6064", "serve"},
		{"--node-id", "node-2", "--grpc-host", "0.0.0.0:6070", "--capnp-host", "0.0.0.0:6074",
			"--seeds", "10.0.0.1:6060", "serve"},
		{"--node-id", "node-3", "--grpc-host", "0.0.0.0:6080", "--capnp-host", "0.0.0.0:6084",
			"--seeds", "10.0.0.1:6060,10.0.0.2:6070", "serve"},
	}
	for i, args := range lines {
		n := c.Node(i + 1)
		n.Start(args...)
		if want := fmt.Sprintf("10.0.0.%d:60%d4", n.Index, 6+i); n.Addr != want {
			t.Fatalf("node %d: Addr %q, want %q", n.Index, n.Addr, want)
		}
	}
	// One cluster: the topic is created once and every node serves it,
	// whichever node leads its partition.
	sqOK(t, c.Client(), c.Node(1).Addr, "", "topic", "create", "seed")
	for _, n := range c.Nodes() {
		sqOK(t, c.Client(), n.Addr, fmt.Sprintf("from-%d\n", n.Index), "produce", "-t", "seed")
	}
	n2 := c.Node(2)
	n2.Stop()
	n2.Restart()
	eventually(t, "node 2 serves the topic after a restart with the seed README's line", func() error {
		r := runSQ(t, c.Client(), n2.Addr, "", "consume", "-t", "seed")
		if r.code != 0 || r.stdout != "from-1\nfrom-2\nfrom-3\n" {
			return fmt.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(n2.DataDir, "topics", "seed")); err != nil {
		t.Fatalf("the topic is not under the node's DataDir: %v", err)
	}
}
