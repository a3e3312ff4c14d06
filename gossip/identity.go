package gossip

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// identity is the content of <data-dir>/cluster/node.json: who this data
// directory belongs to. It is written once, at the first start in a
// cluster, and checked at every later start.
type identity struct {
	NodeID    string `json:"node_id"`
	ClusterID string `json:"cluster_id"`
	// DataDirID is random (128 bits, hex): the same node id alive with
	// another data directory is refused at join.
	DataDirID string `json:"data_dir_id"`
	// RemovedAt is set (RFC 3339, UTC) when the node learned that it was
	// removed from the cluster (sq cluster remove-node): the directory
	// cannot start again.
	RemovedAt string `json:"removed_at,omitempty"`
}

// identityFile is the name of the identity file under the cluster
// directory.
const identityFile = "node.json"

// loadIdentity reads dir/node.json, or creates it for nodeID and
// clusterID when missing. A file naming another node or cluster id is an
// error naming both: a data directory belongs to one node of one cluster.
// A file with removed_at is an error saying the node was removed and what
// to do (errRemovedDataDir).
func loadIdentity(dir, nodeID, clusterID string) (identity, error) {
	path := filepath.Join(dir, identityFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		var id identity
		if err := json.Unmarshal(b, &id); err != nil {
			return identity{}, fmt.Errorf("gossip: %s: %w", path, err)
		}
		if id.RemovedAt != "" {
			return identity{}, fmt.Errorf("gossip: %w: node %q (data directory %s) was removed from cluster %q at %s (sq cluster remove-node) and cannot rejoin with it; to add this machine to the cluster again, start sq-server with an empty --data-dir", errRemovedDataDir, id.NodeID, filepath.Dir(dir), id.ClusterID, id.RemovedAt)
		}
		if id.NodeID != nodeID {
			return identity{}, fmt.Errorf("gossip: data directory %s belongs to node %q, not %q (--node-id): start it with --node-id %s, or give node %q another --data-dir", filepath.Dir(dir), id.NodeID, nodeID, id.NodeID, nodeID)
		}
		if id.ClusterID != clusterID {
			return identity{}, fmt.Errorf("gossip: data directory %s belongs to cluster %q, not %q (--cluster-id): start it with --cluster-id %s, or use another --data-dir to join cluster %q", filepath.Dir(dir), id.ClusterID, clusterID, id.ClusterID, clusterID)
		}
		if id.DataDirID == "" {
			return identity{}, fmt.Errorf("gossip: %s has no data_dir_id", path)
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return identity{}, fmt.Errorf("gossip: %w", err)
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return identity{}, fmt.Errorf("gossip: data dir id: %w", err)
	}
	id := identity{NodeID: nodeID, ClusterID: clusterID, DataDirID: hex.EncodeToString(r[:])}
	b, err = json.MarshalIndent(id, "", "  ")
	if err != nil {
		return identity{}, fmt.Errorf("gossip: %w", err)
	}
	if err := writeFileAtomic(path, append(b, '\n')); err != nil {
		return identity{}, err
	}
	return id, nil
}

// errRemovedDataDir is the class of the errors of a data directory whose
// node was removed from the cluster (Start refuses it; IsRemoved).
var errRemovedDataDir = errors.New("removed from the cluster")

// IsRemoved reports whether err is Start's refusal of a data directory
// whose node was removed from the cluster (sq cluster remove-node), found
// in its node.json or told by the cluster when it tried to rejoin.
func IsRemoved(err error) bool { return errors.Is(err, errRemovedDataDir) }

// markRemoved records in dir/node.json that the node was removed at t, so
// that the data directory is refused at its next start.
func markRemoved(dir string, id identity, t time.Time) error {
	id.RemovedAt = t.UTC().Format(time.RFC3339)
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, identityFile), append(b, '\n'))
}

// writeFileAtomic writes data to path so that a crash leaves either the
// old file or the new one: write path.tmp, fsync it, rename it over path,
// fsync the directory (etcd's fileutil habit).
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("gossip: write %s: %w", tmp, werr)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	serr := d.Sync()
	if cerr := d.Close(); serr == nil {
		serr = cerr
	}
	if serr != nil {
		return fmt.Errorf("gossip: sync %s: %w", filepath.Dir(path), serr)
	}
	return nil
}
