package api

// Node is one node of the cluster as clients reach it: its node id
// and the addresses of its planes (host:port). The data plane's metadata
// response and the gRPC Members call list every node; a partition's
// leader (a node id) is looked up among them.
type Node struct {
	// ID is the node id (--node-id).
	ID string
	// DataAddr is the Cap'n Proto data plane's address.
	DataAddr string
	// GRPCAddr is the gRPC control plane's address; empty when not served.
	GRPCAddr string
	// Alive is false while gossip holds the node suspect or dead.
	Alive bool
}
