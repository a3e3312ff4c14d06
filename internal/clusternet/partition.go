package clusternet

import (
	"fmt"
	"sort"
	"strings"
)

// Partition cuts the network between nodes of different sides: every
// frame forwarded by the bridge from a node of one side to a node of
// another is dropped (TCP connections stall, new ones time out, as in a
// real partition). Each node (1..Nodes) appears in exactly one side. The
// client namespace reaches every node whatever the sides. A Partition
// replaces the previous one atomically (one nft transaction). It fails
// the test on sides that do not cover the nodes once each.
func (c *Cluster) Partition(sides ...[]int) {
	c.t.Helper()
	if err := checkSides(len(c.nodes), sides); err != nil {
		c.t.Fatal(err)
	}
	if err := c.nft(partitionRules(sides)); err != nil {
		c.t.Fatal(err)
	}
}

// Isolate cuts node i from every other node (Partition {i} | the rest).
func (c *Cluster) Isolate(i int) {
	c.t.Helper()
	c.Partition([]int{i}, c.others(i))
}

// Split puts the listed nodes on one side and the rest on the other, for
// example Split(3) or Split(4, 5) for the minority of 3 or 5 nodes.
func (c *Cluster) Split(side ...int) {
	c.t.Helper()
	c.Partition(side, c.others(side...))
}

// Heal removes every partition: all nodes reach each other again.
func (c *Cluster) Heal() {
	c.t.Helper()
	if err := c.nft("flush chain bridge sqnet forward\n"); err != nil {
		c.t.Fatal(err)
	}
}

// others returns the nodes not in side, in order.
func (c *Cluster) others(side ...int) []int {
	in := map[int]bool{}
	for _, i := range side {
		in[i] = true
	}
	var out []int
	for i := 1; i <= len(c.nodes); i++ {
		if !in[i] {
			out = append(out, i)
		}
	}
	return out
}

// checkSides reports whether sides cover the nodes 1..n exactly once each,
// with at least two non-empty sides.
func checkSides(n int, sides [][]int) error {
	seen := map[int]bool{}
	nonEmpty := 0
	for _, side := range sides {
		if len(side) > 0 {
			nonEmpty++
		}
		for _, i := range side {
			switch {
			case i < 1 || i > n:
				return fmt.Errorf("clusternet: partition %v: node %d: the cluster has nodes 1..%d", sides, i, n)
			case seen[i]:
				return fmt.Errorf("clusternet: partition %v: node %d is on two sides", sides, i)
			}
			seen[i] = true
		}
	}
	if len(seen) != n {
		var missing []string
		for i := 1; i <= n; i++ {
			if !seen[i] {
				missing = append(missing, fmt.Sprint(i))
			}
		}
		return fmt.Errorf("clusternet: partition %v: nodes %s are on no side (every node 1..%d must be on one)", sides, strings.Join(missing, ","), n)
	}
	if nonEmpty < 2 {
		return fmt.Errorf("clusternet: partition %v: at least two non-empty sides are needed (Heal joins all)", sides)
	}
	return nil
}

// partitionRules is the nft transaction for sides: flush the forward
// chain, then a drop rule per ordered pair of bridge ports on different
// sides.
func partitionRules(sides [][]int) string {
	var b strings.Builder
	b.WriteString("flush chain bridge sqnet forward\n")
	var rules []string
	for si, a := range sides {
		for sj, o := range sides {
			if si == sj {
				continue
			}
			for _, i := range a {
				for _, j := range o {
					rules = append(rules, fmt.Sprintf("add rule bridge sqnet forward iifname \"n%d\" oifname \"n%d\" drop\n", i, j))
				}
			}
		}
	}
	sort.Strings(rules)
	for _, r := range rules {
		b.WriteString(r)
	}
	return b.String()
}
