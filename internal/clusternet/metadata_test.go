package clusternet_test

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seedqueue/sq/internal/clusternet"
)

// The cluster tests of docs/cluster.md: membership, the Raft metadata
// controller and leader placement, through real sq-server processes and
// the sq CLI run in the client namespace.

// member is one row of `sq cluster members --format json`.
type member struct {
	NodeID     string `json:"node_id"`
	State      string `json:"state"`
	Voter      bool   `json:"voter"`
	Controller bool   `json:"controller"`
}

// clusterInfo is `sq cluster info --format json`, the fields the tests read.
type clusterInfo struct {
	NodeID       string `json:"node_id"`
	ControllerID string `json:"controller_id"`
	AppliedIndex uint64 `json:"applied_index"`
	MetadataHash string `json:"metadata_hash"`
	Ready        bool   `json:"ready"`
}

// grpcAddr is node n's control-plane address at the harness's ports.
func grpcAddr(n *clusternet.Node) string {
	return net.JoinHostPort(n.IP, strconv.Itoa(clusternet.GRPCPort))
}

// startCluster starts every node of c with the harness's arguments, each
// node after the first with the first node's gRPC address as its seed,
// and waits until every node lists them all alive.
func startCluster(t *testing.T, c *clusternet.Cluster, extra ...string) {
	t.Helper()
	seed := grpcAddr(c.Node(1))
	for _, n := range c.Nodes() {
		args := n.ServerArgs(extra...)
		if n.Index > 1 {
			args = append(args, "--seeds", seed)
		}
		n.Start(args...)
	}
	waitMembers(t, c, c.Node(1).Addr, grpcAddr(c.Node(1)), len(c.Nodes()))
}

// members runs `sq cluster members` against the node at data and control.
func members(t *testing.T, c *clusternet.Cluster, data, control string) ([]member, error) {
	t.Helper()
	r := runSQ(t, c.Client(), data, "", "--control", control, "cluster", "members", "--format", "json")
	if r.code != 0 {
		return nil, fmt.Errorf("sq cluster members: exit %d: %s", r.code, r.stderr)
	}
	var ms []member
	if err := json.Unmarshal([]byte(r.stdout), &ms); err != nil {
		var wrapped struct {
			Members []member `json:"members"`
		}
		if err2 := json.Unmarshal([]byte(r.stdout), &wrapped); err2 != nil {
			return nil, fmt.Errorf("members output %q: %v", r.stdout, err)
		}
		ms = wrapped.Members
	}
	return ms, nil
}

// waitMembers waits until the node lists n members, all alive, and one
// controller.
func waitMembers(t *testing.T, c *clusternet.Cluster, data, control string, n int) []member {
	t.Helper()
	var ms []member
	eventually(t, "members alive on "+control, func() error {
		var err error
		if ms, err = members(t, c, data, control); err != nil {
			return err
		}
		alive, controllers := 0, 0
		for _, m := range ms {
			if m.State == "alive" {
				alive++
			}
			if m.Controller {
				controllers++
			}
		}
		if len(ms) != n || alive != n || controllers != 1 {
			return fmt.Errorf("members %+v: want %d alive and one controller", ms, n)
		}
		return nil
	})
	return ms
}

// info runs `sq cluster info --format json` on a node.
func info(t *testing.T, c *clusternet.Cluster, n *clusternet.Node) (clusterInfo, error) {
	t.Helper()
	r := runSQ(t, c.Client(), n.Addr, "", "--control", grpcAddr(n), "cluster", "info", "--format", "json")
	if r.code != 0 {
		return clusterInfo{}, fmt.Errorf("sq cluster info on node %d: exit %d: %s", n.Index, r.code, r.stderr)
	}
	var ci clusterInfo
	if err := json.Unmarshal([]byte(r.stdout), &ci); err != nil {
		return ci, fmt.Errorf("cluster info output %q: %v", r.stdout, err)
	}
	return ci, nil
}

// controllerOf returns the index of the node that nodes (indexes) agree is
// the controller, or an error while they do not agree.
func controllerOf(t *testing.T, c *clusternet.Cluster, nodes ...int) (int, error) {
	t.Helper()
	var id string
	for _, i := range nodes {
		// A node's first control-plane connection from the client's
		// namespace is sometimes not answered within the CLI's 5 s
		// (seen on a loaded machine); the next one is: up to 3 tries.
		var ci clusterInfo
		var err error
		for try := 0; try < 3; try++ {
			if ci, err = info(t, c, c.Node(i)); err == nil {
				break
			}
			t.Logf("controller: %v (try %d of 3)", err, try+1)
		}
		if err != nil {
			return 0, err
		}
		if ci.ControllerID == "" || (id != "" && ci.ControllerID != id) {
			return 0, fmt.Errorf("node %d: controller %q, others %q", i, ci.ControllerID, id)
		}
		id = ci.ControllerID
	}
	idx, err := strconv.Atoi(strings.TrimPrefix(id, "node-"))
	if err != nil || !slices.Contains(nodes, idx) {
		return 0, fmt.Errorf("controller %q is not one of nodes %v", id, nodes)
	}
	return idx, nil
}

// waitAgree waits until the nodes report the same applied index and
// metadata hash.
func waitAgree(t *testing.T, c *clusternet.Cluster, nodes ...int) clusterInfo {
	t.Helper()
	var first clusterInfo
	eventually(t, fmt.Sprintf("nodes %v agree on the metadata", nodes), func() error {
		for k, i := range nodes {
			ci, err := info(t, c, c.Node(i))
			if err != nil {
				return err
			}
			if k == 0 {
				first = ci
				continue
			}
			if ci.AppliedIndex != first.AppliedIndex || ci.MetadataHash != first.MetadataHash {
				return fmt.Errorf("node %d at %d/%s, node %d at %d/%s", nodes[0], first.AppliedIndex, first.MetadataHash, i, ci.AppliedIndex, ci.MetadataHash)
			}
		}
		return nil
	})
	return first
}

// TestSeedReadmeClusterInNamespaces runs the seed README's three-node
// example unchanged, one node per namespace (10.0.0.1-3): the nodes form
// one cluster, and a topic created on node 3 is described identically by
// all three.
func TestSeedReadmeClusterInNamespaces(t *testing.T) {
	c := newCluster(t, 3)
	c.Node(1).Start("--node-id", "node-1", "--grpc-host", "0.0.0.0:6060", "--capnp-host", "0.0.0.0:6064", "serve")
	c.Node(2).Start("--node-id", "node-2", "--grpc-host", "0.0.0.0:6070", "--capnp-host", "0.0.0.0:6074",
		"--seeds", "10.0.0.1:6060", "serve")
	c.Node(3).Start("--node-id", "node-3", "--grpc-host", "0.0.0.0:6080", "--capnp-host", "0.0.0.0:6084",
		"--seeds", "10.0.0.1:6060,10.0.0.2:6070", "serve")
	ctl := []string{"10.0.0.1:6060", "10.0.0.2:6070", "10.0.0.3:6080"}
	for i, n := range c.Nodes() {
		waitMembers(t, c, n.Addr, ctl[i], 3)
	}
	sqOK(t, c.Client(), c.Node(3).Addr, "", "--control", ctl[2], "topic", "create", "orders", "--partitions", "6")
	var first string
	for i, n := range c.Nodes() {
		var out string
		eventually(t, fmt.Sprintf("node %d describes orders", n.Index), func() error {
			r := runSQ(t, c.Client(), n.Addr, "", "--control", ctl[i], "topic", "describe", "orders")
			if r.code != 0 {
				return fmt.Errorf("exit %d: %s", r.code, r.stderr)
			}
			out = r.stdout
			return nil
		})
		if i == 0 {
			first = out
			continue
		}
		if out != first {
			t.Errorf("node %d describes orders as\n%s\nnode 1 as\n%s", n.Index, out, first)
		}
	}
}

// TestSeedReadmeClusterOnLoopback runs the same example in one namespace,
// all three nodes on its loopback: 127.0.0.1 in place of 0.0.0.0 and of
// the seeds' addresses, with their own data directories and HTTP ports.
func TestSeedReadmeClusterOnLoopback(t *testing.T) {
	c := newCluster(t, 1)
	ns := &c.Node(1).Namespace
	type node struct{ grpc, capnp, http, seeds string }
	nodes := []node{
		{"127.0.0.1:6060", "127.0.0.1:6064", "127.0.0.1:6062", ""},
		{"127.0.0.1:6070", "127.0.0.1:6074", "127.0.0.1:6072", "127.0.0.1:6060"},
		{"127.0.0.1:6080", "127.0.0.1:6084", "127.0.0.1:6082", "127.0.0.1:6060,127.0.0.1:6070"},
	}
	for i, n := range nodes {
		args := []string{"--node-id", "node-" + strconv.Itoa(i+1), "--grpc-host", n.grpc, "--capnp-host", n.capnp,
			"--http-host", n.http, "--data-dir", t.TempDir()}
		if n.seeds != "" {
			args = append(args, "--seeds", n.seeds)
		}
		startIn(t, ns, append(args, "serve")...)
	}
	for _, n := range nodes {
		eventually(t, "members on "+n.grpc, func() error {
			r := runSQ(t, ns, n.capnp, "", "--control", n.grpc, "cluster", "members", "--format", "json")
			if r.code != 0 {
				return fmt.Errorf("exit %d: %s", r.code, r.stderr)
			}
			if got := strings.Count(r.stdout, `"alive"`); got != 3 {
				return fmt.Errorf("%d alive members in %s", got, r.stdout)
			}
			return nil
		})
	}
	sqOK(t, ns, nodes[2].capnp, "", "--control", nodes[2].grpc, "topic", "create", "orders", "--partitions", "3")
	var first string
	for i, n := range nodes {
		out := sqOK(t, ns, n.capnp, "", "--control", n.grpc, "topic", "describe", "orders")
		if i == 0 {
			first = out
		} else if out != first {
			t.Errorf("node %d describes orders as\n%s\nnode 1 as\n%s", i+1, out, first)
		}
	}
}
