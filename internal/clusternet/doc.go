// Package clusternet runs real processes, such as several sq-server nodes,
// in Linux network namespaces joined by a bridge, for tests of a cluster
// over a real network that the tests can cut (docs/architecture.md §9.1).
//
// New makes, per test, one namespace per node (address 10.0.0.I/24 on its
// eth0, I from 1), one client namespace (10.0.0.254) and one namespace
// holding only the bridge br0 that their veth pairs join. Nothing is added
// to the host's own network. Partition, Isolate and Heal load nftables
// rules (family bridge, hook forward) in the bridge namespace that drop
// the frames between nodes of different sides; the client namespace
// always reaches every node, as an operator's machine would. Every
// namespace name starts with "sqnet-<pid>.<start time>-<sequence>", so
// parallel tests never collide, and namespaces left by a test process
// that no longer runs are removed (with their processes) the first time
// Require (which New calls) runs in a process.
//
// It needs root, ip(8) and nft(8). Require skips the test when one is
// missing, unless CI=true, where it fails the test instead.
package clusternet
