// A follower's fetchers (one per followed partition: truncation by leader
// epochs, then replica fetches appended to the storage) and their pool of
// connections to leaders (docs/architecture.md §7).

package gossip

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/engine/replica"
	"github.com/seedqueue/sq/net/dataplane"
)

// fetcher copies one partition's log from its leader.
type fetcher struct {
	r         *Replicator
	topic     string
	id        api.TopicID
	partition int
	epoch     uint32
	leader    string
	addr      string

	cancel context.CancelFunc
	done   chan struct{}
	// served is set by the first replica fetch the leader answered at
	// epoch: the leader serves the partition (Replicator.Serving).
	served atomic.Bool
}

// startFetch starts the fetcher of a followed partition.
func (r *Replicator) startFetch(topic string, id api.TopicID, partition int, epoch uint32, leader, addr string) *fetcher {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fetcher{r: r, topic: topic, id: id, partition: partition, epoch: epoch, leader: leader, addr: addr, cancel: cancel, done: make(chan struct{})}
	go f.run(ctx)
	return f
}

// stop ends the fetcher and waits for it.
func (f *fetcher) stop() {
	f.cancel()
	<-f.done
}

func (f *fetcher) run(ctx context.Context) {
	defer close(f.done)
	log := f.r.log.With("topic", f.topic, "partition", f.partition, "leader", f.leader, "leader_epoch", f.epoch)
	pause := f.r.opts.RetryMin
	truncated := false
	var lastErr string
	for ctx.Err() == nil {
		err := f.step(ctx, &truncated)
		if err == nil {
			if lastErr != "" {
				log.Info("replication: fetching from the leader again")
				lastErr = ""
			}
			pause = f.r.opts.RetryMin
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if text := err.Error(); text != lastErr {
			lastErr = text
			lvl := slog.LevelWarn
			if e := api.AsError(err); e != nil {
				switch e.Code {
				case api.CodeUnknownLeaderEpoch, api.CodeNotLeader, api.CodeLeaderNotAvailable, api.CodeUnknownTopic, api.CodeUnknownTopicID:
					lvl = slog.LevelInfo // the leader has not applied the topic or its leadership yet
				}
			}
			log.Log(ctx, lvl, "replication: fetching from the leader failed; retrying", "addr", f.addr, "err", err)
		} else {
			log.Debug("replication: fetching from the leader failed again", "addr", f.addr, "err", err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, f.r.opts.RetryMax)
	}
}

// step makes one fetch (after the truncation, when not done yet) and
// appends what it returned.
func (f *fetcher) step(ctx context.Context, truncated *bool) error {
	r := f.r
	conn, err := r.pool.get(ctx, f.addr)
	if err != nil {
		return err
	}
	if !*truncated {
		if err := f.truncate(ctx, conn); err != nil {
			r.pool.failed(ctx, f.addr, conn, err)
			return err
		}
		*truncated = true
	}
	st, err := r.store.ReplicaState(f.topic, f.id, f.partition)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.FetchMaxWait+replicaCallTimeout)
	res, err := conn.FetchReplica(cctx, engine.ReplicaFetch{
		Topic: f.topic, TopicID: f.id, Partition: f.partition, FollowerID: r.self, LeaderEpoch: f.epoch,
		FetchOffset: st.LogEndOffset, DurableOffset: st.DurableEndOffset,
		MaxBytes: r.opts.FetchMaxBytes, MaxWait: r.opts.FetchMaxWait,
	})
	cancel()
	if err != nil {
		r.pool.failed(ctx, f.addr, conn, err)
		if e := api.AsError(err); e != nil && e.Code == api.CodeOffsetOutOfRange {
			if e.HasRange && st.LogEndOffset < e.RangeStart {
				// Retention removed what this replica lacks: start over at
				// the leader's log start (Kafka's truncateFullyAndStartAt).
				r.log.Warn("replication: the log end is below the leader's log start; emptying the replica to start at it", "topic", f.topic,
					"partition", f.partition, "leader", f.leader, "log_end", st.LogEndOffset, "leader_log_start", e.RangeStart)
				if terr := r.store.TruncateFullyAndStartAt(f.topic, f.id, f.partition, e.RangeStart); terr != nil {
					return terr
				}
				return nil
			}
			*truncated = false // the logs diverged: compare epochs again
		}
		return err
	}
	if res.LeaderEpoch != f.epoch {
		return api.NewError(api.CodeFencedLeaderEpoch, "the leader answered for leader epoch %d, this follower follows %d", res.LeaderEpoch, f.epoch)
	}
	f.served.Store(true)
	if res.LogStartOffset > st.LogStartOffset {
		// The leader's retention or offsets snapshot moved its log start:
		// the segments below it go here too (KIP-107).
		if _, err := r.store.FollowLogStart(f.topic, f.id, f.partition, res.LogStartOffset); err != nil {
			return err
		}
	}
	if len(res.Batches) == 0 && res.HighWatermark <= st.HighWatermark {
		return nil
	}
	if _, err := r.store.AppendReplica(ctx, f.topic, f.id, f.partition, res.Batches, res.HighWatermark); err != nil {
		if errors.Is(err, api.ErrOffsetOutOfRange) {
			*truncated = false
		}
		return err
	}
	return nil
}

// truncate cuts the local log's suffix that diverges from the leader's
// (KIP-101, KIP-279): it sends the latest epoch of the local leader-epoch
// cache, truncates to replica.TruncationOffset of the answer, and asks
// again until nothing is cut.
func (f *fetcher) truncate(ctx context.Context, conn ReplicaConn) error {
	r := f.r
	for ctx.Err() == nil {
		cache, err := r.store.LocalEpochs(f.topic, f.id, f.partition)
		if err != nil {
			return err
		}
		st, err := r.store.ReplicaState(f.topic, f.id, f.partition)
		if err != nil {
			return err
		}
		latest, ok := cache.Latest()
		if !ok && st.LogEndOffset == 0 {
			return nil // nothing here to diverge
		}
		cctx, cancel := context.WithTimeout(ctx, replicaCallTimeout)
		epoch, end, err := conn.EndOffsetForEpoch(cctx, f.topic, f.id, f.partition, latest.Epoch)
		cancel()
		if err != nil {
			return err
		}
		off := replica.TruncationOffset(cache, st.LogEndOffset, epoch, end, true)
		if off >= st.LogEndOffset {
			return nil
		}
		r.log.Info("replication: truncating the divergent end of the log before fetching", "topic", f.topic, "partition", f.partition,
			"leader", f.leader, "leader_epoch", f.epoch, "local_epoch", latest.Epoch, "leader_answer_epoch", epoch, "leader_end", end,
			"from_offset", st.LogEndOffset, "to_offset", off)
		if err := r.store.TruncateTo(f.topic, f.id, f.partition, off); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// replicaCallTimeout bounds a call to a leader beyond its long poll: a
// connection that answers nothing for that long is closed and dialled
// again.
const replicaCallTimeout = 10 * time.Second

// connPoolR holds one ReplicaConn per leader address, shared by that
// leader's fetchers.
type connPoolR struct {
	dial func(ctx context.Context, addr string) (ReplicaConn, error)

	mu     sync.Mutex
	conns  map[string]*pooledConn
	closed bool
}

type pooledConn struct {
	conn ReplicaConn
}

// get returns the connection to addr, dialling it when there is none.
// Dials are not serialised: two fetchers may dial at once, and the
// second connection is closed.
func (p *connPoolR) get(ctx context.Context, addr string) (ReplicaConn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, api.NewError(api.CodeShuttingDown, "replication is stopping")
	}
	if c := p.conns[addr]; c != nil {
		p.mu.Unlock()
		return c.conn, nil
	}
	p.mu.Unlock()
	conn, err := p.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		conn.Close()
		return nil, api.NewError(api.CodeShuttingDown, "replication is stopping")
	}
	if c := p.conns[addr]; c != nil {
		conn.Close()
		return c.conn, nil
	}
	p.conns[addr] = &pooledConn{conn: conn}
	return conn, nil
}

// failed drops conn when err says it is broken, so that the next get
// dials again: any error but an answer of the leader (an *api.Error in
// err's chain; not its SHUTTING_DOWN: its process is stopping, and the
// next one listens anew) and the end of ctx (the fetcher's own context).
// A call that timed out while ctx lives (replicaCallTimeout: no answer on
// a connection that looks open) counts as broken. (api.AsError would not
// do as the test: it makes an *api.Error of any error.)
func (p *connPoolR) failed(ctx context.Context, addr string, conn ReplicaConn, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	var answer *api.Error
	if !errors.Is(err, dataplane.ErrReplicaClientBroken) && errors.As(err, &answer) && answer.Code != api.CodeShuttingDown {
		return
	}
	p.mu.Lock()
	c := p.conns[addr]
	if c != nil && c.conn == conn {
		delete(p.conns, addr)
	} else {
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.conn.Close()
	}
}

// close closes every connection; later gets fail.
func (p *connPoolR) close() {
	p.mu.Lock()
	conns := p.conns
	p.conns, p.closed = map[string]*pooledConn{}, true
	p.mu.Unlock()
	for _, c := range conns {
		c.conn.Close()
	}
}
