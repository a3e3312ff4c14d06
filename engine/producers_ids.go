package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/seedqueue/sq/api"
)

// ProducerIDBlock is how many producer ids a node reserves at once: a
// single node in <data-dir>/meta/producer-ids, a cluster node through the
// metadata log (gossip/meta's allocate-producer-ids).
const ProducerIDBlock = 1000

// SingleNodeProducerIDBase is the first producer id a single node hands
// out (2^48). A cluster hands out ids from 0 (gossip/meta), so an id a node
// gave its producers before it joined a cluster is never one the cluster
// gives another producer.
const SingleNodeProducerIDBase = 1 << 48

// producerIDsName is the file, in <data-dir>/meta, that holds the end of
// the last block of producer ids reserved by a single node.
const producerIDsName = "producer-ids"

// producerIDs hands out a single node's producer ids from a block whose
// end is persisted before any id of it is handed out, so that a crash
// never hands out an id twice (it skips the rest of the block).
type producerIDs struct {
	mu        sync.Mutex
	next, end int64
	loaded    bool
}

// InitProducerID returns a new producer id and its epoch (always 0) for an
// idempotent producer of this node (docs/architecture.md §3.3.1), from
// SingleNodeProducerIDBase up. Ids are unique for the life of the data directory: they are
// reserved ProducerIDBlock at a time, the end of the block written to
// <data-dir>/meta/producer-ids (temporary file, fsync, rename, directory
// fsync) before the first of them is handed out. Errors: SHUTTING_DOWN,
// STORAGE_ERROR or DISK_FULL (the block could not be persisted, or the
// file is unreadable or corrupt: no id is handed out rather than risk
// one twice), ctx's error.
func (e *Engine) InitProducerID(ctx context.Context) (int64, int16, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if e.isClosing() {
		return 0, 0, api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	ids := &e.producerIDs
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if ids.next == ids.end {
		path := filepath.Join(e.opts.DataDir, "meta", producerIDsName)
		start := ids.end
		if !ids.loaded {
			removeTemps(e.opts.FS, filepath.Dir(path), e.log)
			var err error
			if start, err = readProducerIDs(e, path); err != nil {
				return 0, 0, err
			}
		}
		if start > math.MaxInt64-ProducerIDBlock {
			return 0, 0, api.NewError(api.CodeStorageError, "%s: producer ids exhausted (next %d)", path, start)
		}
		end := start + ProducerIDBlock
		if err := writeFileAtomic(e.opts.FS, path, fmt.Appendf(nil, "%d\n", end)); err != nil {
			return 0, 0, storageError("reserve a block of producer ids in "+path, err)
		}
		ids.next, ids.end, ids.loaded = start, end, true
		e.log.Info("producer ids reserved", "from", start, "to", end-1)
	}
	id := ids.next
	ids.next++
	return id, 0, nil
}

// readProducerIDs returns the first id not yet reserved: the end stored in
// path, SingleNodeProducerIDBase when the file does not exist.
func readProducerIDs(e *Engine, path string) (int64, error) {
	b, err := readFileFS(e.opts.FS, path)
	if errors.Is(err, os.ErrNotExist) {
		return SingleNodeProducerIDBase, nil
	}
	if err != nil {
		return 0, storageError("read "+path, err)
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(string(b), "\n"), 10, 64)
	if err != nil || n < SingleNodeProducerIDBase {
		return 0, api.NewError(api.CodeStorageError, "%s is corrupt (%q): it must hold the end of the last reserved block of producer ids; no id is handed out until it is repaired", path, b)
	}
	return n, nil
}
