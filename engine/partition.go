package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/ring"
	"github.com/seedqueue/sq/segment"
)

// Bounds of one group commit and of the append queue.
const (
	appendQueueLen      = 1024     // batches queued per partition before Append blocks
	commitBatchesMax    = 1024     // batches written by one commit
	commitBytesMax      = 64 << 20 // bytes written by one commit
	checkpointInterval  = 5 * time.Second
	defaultFetchMaxWait = 30 * time.Second
)

// partition owns one segment.Log and its append goroutine.
type partition struct {
	topic         string
	id            int
	dir           string
	log           *segment.Log // nil when the partition failed to open
	policy        atomic.Pointer[SyncPolicy]
	policyChanged chan struct{} // signals run to rebuild its sync ticker
	now           func() time.Time
	logger        *slog.Logger
	obs           Observer // nil: none
	fs            ring.FS
	// repl is the replication state; nil on a single node (no
	// Options.Replication) and when the partition failed to open.
	repl *replState
	// prod is the idempotent producers' state (producers.go), set by
	// openParts before the partition serves; nil when the log failed.
	prod atomic.Pointer[producerState]

	reqs chan *appendReq
	// mu guards closed against submitters, so that once closed is set no
	// request can enter reqs and the append goroutine drains a final set.
	mu     sync.RWMutex
	closed bool
	stop   chan struct{}
	done   chan struct{}

	hw     atomic.Uint64
	notify atomic.Pointer[chan struct{}] // closed and replaced when hw moves
	failed atomic.Pointer[api.Error]
	// deleted: the topic was deleted; requests get UNKNOWN_TOPIC.
	deleted atomic.Bool
	// rolls carries roll requests (segment.ms) to the append goroutine,
	// clamps requests to bound append times by the clock.
	rolls  chan chan rollResult
	clamps chan chan rollResult
	// releases asks the append goroutine to give back preallocated
	// space (reclaim.go); the answer is the bytes released.
	releases chan chan int64
	// ops carries work that must run on the append goroutine, ordered
	// with commits (replication: role changes, replica appends, truncation).
	ops chan func()

	// ckpBudget bounds the periodic recovery-point checkpoints of all the
	// engine's partitions (nil: unbounded).
	ckpBudget *checkpointBudget

	// Owned by the append goroutine.
	dirty          bool // written since the last sync
	syncedSinceCkp bool // synced since the last checkpoint
	unsynced       int  // batches written since the last sync
}

type appendReq struct {
	batch []byte
	count uint32
	// after is the request this one is chained behind (AppendAsync): when
	// it failed, this one fails with the same error without being written.
	// Only the append goroutine reads it; it is cleared once r is finished.
	after *appendReq
	res   AppendResult
	err   error
	// epoch is the leader epoch the commit stamped (replicated partitions).
	epoch uint32
	done  chan struct{}
}

// newPartition returns the partition of log (nil: it failed to open) and
// starts its append goroutine. With rep set, it loads the replication
// state (openReplication); a failure to do so fails the partition. ckp is
// the engine's budget of periodic checkpoints (nil: unbounded).
func newPartition(topic string, id int, dir string, log *segment.Log, policy SyncPolicy, now func() time.Time, logger *slog.Logger, fsys ring.FS, rep *ReplicationOptions, ckp *checkpointBudget) *partition {
	p := &partition{
		topic: topic, id: id, dir: dir, log: log, now: now, fs: fsys, ckpBudget: ckp,
		policyChanged: make(chan struct{}, 1),
		logger:        logger.With("topic", topic, "partition", id),
		reqs:          make(chan *appendReq, appendQueueLen),
		rolls:         make(chan chan rollResult),
		clamps:        make(chan chan rollResult),
		releases:      make(chan chan int64),
		ops:           make(chan func()),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	p.policy.Store(&policy)
	ch := make(chan struct{})
	p.notify.Store(&ch)
	if log != nil {
		// Everything recovered is readable: recovery keeps only batches
		// that were written whole, and a clean stop synced them.
		p.hw.Store(log.NextOffset())
		if rep != nil {
			if err := p.openReplication(rep, fsys); err != nil {
				p.fail(api.WrapError(api.CodeStorageError, err, "partition %s/%d: replication state", topic, id))
			}
		}
		// Over --max-open-segment-files (many partitions): give the
		// active segment's files back until the first append.
		log.ParkIfOver()
		go p.run()
	} else {
		close(p.done)
	}
	return p
}

// fail puts the partition into the failed state; appends are refused from
// now on, reads below the high watermark keep working.
func (p *partition) fail(err *api.Error) {
	if p.failed.CompareAndSwap(nil, err) {
		p.logger.Error("partition failed; appends refused until restart", "err", err)
	}
}

// spare returns the bytes the partition's active segment has allocated
// beyond its end (0 when the partition failed to open).
func (p *partition) spare() int64 {
	if p.log == nil {
		return 0
	}
	return p.log.Spare()
}

// enqueue puts b into the partition's FIFO behind after (nil: no chain)
// and returns the queued request without waiting for its commit. ctx
// bounds only the wait for room in the queue.
func (p *partition) enqueue(ctx context.Context, b []byte, count uint32, after *appendReq) (*appendReq, error) {
	if p.deleted.Load() {
		return nil, unknownTopic(p.topic)
	}
	if e := p.failed.Load(); e != nil {
		return nil, e
	}
	req := &appendReq{batch: b, count: count, after: after, done: make(chan struct{})}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		if p.deleted.Load() {
			return nil, unknownTopic(p.topic)
		}
		return nil, api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	select {
	case p.reqs <- req:
		return req, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// wait returns req's outcome once committed. ctx cancellation stops the
// wait, not the write: a batch already queued may still be appended.
func (req *appendReq) wait(ctx context.Context) (AppendResult, error) {
	select {
	case <-req.done:
		return req.res, req.err
	case <-ctx.Done():
		return AppendResult{}, ctx.Err()
	}
}

// run is the append goroutine: it collects queued batches, commits them
// together, and syncs on the interval policy's timer.
func (p *partition) run() {
	defer close(p.done)
	var ticker *time.Ticker
	var tick <-chan time.Time
	setTicker := func() {
		if ticker != nil {
			ticker.Stop()
			ticker, tick = nil, nil
		}
		if pol := p.policy.Load(); pol.Mode == SyncInterval {
			ticker = time.NewTicker(pol.Interval)
			tick = ticker.C
		}
	}
	setTicker()
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	ckp := time.NewTicker(checkpointInterval)
	defer ckp.Stop()
	pending := make([]*appendReq, 0, 64)
	for {
		select {
		case r := <-p.reqs:
			pending = append(pending, r)
			pending = p.drain(pending)
			p.commit(pending)
			clear(pending)
			pending = pending[:0]
		case r := <-p.rolls:
			r <- p.rollNow()
		case r := <-p.clamps:
			r <- p.clampNow()
		case r := <-p.releases:
			r <- p.releaseNow()
		case op := <-p.ops:
			op()
		case <-tick:
			p.syncDirty()
		case <-p.policyChanged:
			setTicker()
			p.syncDirty() // what was written under a laxer policy is synced now
			// and checkpointed, so that recovery, which reads the new
			// policy from the metadata, judges it below the recovery point.
			p.checkpoint()
		case <-ckp.C:
			p.checkpointTick()
			p.checkpointHW()
		case <-p.stop:
			// closed is set: no new request can arrive; commit the rest.
			for {
				pending = p.drain(pending[:0])
				if len(pending) == 0 {
					return
				}
				p.commit(pending)
			}
		}
	}
}

// drain adds queued requests without blocking, up to the commit bounds.
func (p *partition) drain(pending []*appendReq) []*appendReq {
	bytes := 0
	for _, r := range pending {
		bytes += len(r.batch)
	}
	for len(pending) < commitBatchesMax && bytes < commitBytesMax {
		select {
		case r := <-p.reqs:
			pending = append(pending, r)
			bytes += len(r.batch)
		default:
			return pending
		}
	}
	return pending
}

// commit writes pending with one gather write, applies the sync policy,
// publishes the new high watermark and acknowledges every request.
func (p *partition) commit(pending []*appendReq) {
	pending, pc := p.checkProducers(pending) // idempotent producers (producers.go)
	if pc != nil {
		defer pc.finish()
	}
	pending = p.dropChained(pending)
	if len(pending) == 0 {
		return
	}
	finish := func(err error) {
		for _, r := range pending {
			r.err = err
			r.batch = nil
			close(r.done)
		}
	}
	if e := p.failed.Load(); e != nil {
		finish(e)
		return
	}
	// A replicated partition writes client batches only while it leads;
	// they carry its leader epoch.
	epoch, err := p.commitEpoch()
	if err != nil {
		finish(err)
		return
	}
	bufs := make([][]byte, len(pending))
	for i, r := range pending {
		bufs[i] = r.batch
	}
	appendTime := p.now().UnixMilli()
	info, err := p.log.AppendEpoch(bufs, appendTime, epoch)
	if err != nil {
		if errors.Is(err, segment.ErrFailed) {
			// A sync failed (at a segment roll, say): the log refuses
			// appends until it is reopened, so the partition fails too.
			e := api.WrapError(api.CodePartitionFailed, err, "partition %s/%d", p.topic, p.id)
			p.fail(e)
			finish(e)
			return
		}
		// The log end is unchanged; the partition stays writable. One
		// line per commit, which fails all its batches: batches says how
		// many publishes it refused (sq_publish_errors_total counts each).
		// It is written before the publishers hear of the failure, so the
		// log is in the order of events.
		p.logger.Warn("append failed", "batches", len(pending), "err", err)
		finish(storageError(fmt.Sprintf("write to partition %s/%d", p.topic, p.id), err))
		return
	}
	if p.repl != nil {
		// The log end moved: replica fetches waiting for it copy the
		// batches while this node syncs them.
		p.wake()
	}
	durability := DurabilityWritten
	if p.policy.Load().Mode == SyncEveryBatch {
		start := time.Now()
		err := p.log.Sync()
		p.observeSync(start, len(pending), err)
		if err != nil {
			e := api.WrapError(api.CodePartitionFailed, err, "fdatasync of %s failed", p.dir)
			p.fail(e)
			finish(e)
			return
		}
		durability = DurabilitySynced
		p.syncedSinceCkp = true
	} else {
		p.dirty = true
		p.unsynced += len(pending)
	}
	p.localAdvanced(p.log.NextOffset(), durability == DurabilitySynced)
	next := info.BaseOffset
	for _, r := range pending {
		r.res = AppendResult{BaseOffset: next, RecordCount: r.count, LogAppendTime: appendTime, Durability: durability, Replicas: 1}
		r.epoch = epoch
		next += uint64(r.count)
		r.batch = nil
		close(r.done)
	}
	if durability == DurabilitySynced {
		p.log.ParkIfOver() // many partitions: stay near --max-open-segment-files
	}
}

// dropChained fails, without writing them, the requests whose predecessor
// in their chain failed (in an earlier commit, or earlier in this one), and
// returns the others in order. Because the rest of one commit succeeds or
// fails together, a chain never has a stored batch after a failed one.
// Runs on the append goroutine, which alone sets err before closing done.
func (p *partition) dropChained(pending []*appendReq) []*appendReq {
	kept := pending[:0]
	for _, r := range pending {
		a := r.after
		r.after = nil // keep no chain of old requests alive
		if a != nil && a.err != nil {
			r.err = a.err
			r.batch = nil
			close(r.done)
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

// setPolicy changes the sync policy; the append goroutine applies it from
// its next commit and syncs what was written before.
func (p *partition) setPolicy(pol SyncPolicy) {
	p.policy.Store(&pol)
	select {
	case p.policyChanged <- struct{}{}:
	default:
	}
}

// syncDirty fdatasyncs under the interval policy.
func (p *partition) syncDirty() {
	if !p.dirty || p.failed.Load() != nil {
		return
	}
	start := time.Now()
	err := p.log.Sync()
	p.observeSync(start, p.unsynced, err)
	if err != nil {
		p.fail(api.WrapError(api.CodePartitionFailed, err, "fdatasync of %s failed", p.dir))
		return
	}
	p.unsynced = 0
	p.dirty = false
	p.syncedSinceCkp = true
	if p.repl != nil {
		p.localAdvanced(p.log.NextOffset(), true)
	}
	p.log.ParkIfOver()
}

// checkpointTick is the periodic checkpoint: when the recovery point
// moved, it is written only if the engine's checkpoint budget allows one
// now (checkpointBudget); otherwise this tick writes the producer-state
// snapshot alone and the next tick tries again. The recovery point only
// shortens recovery: a checkpoint skipped leaves more of the log above it,
// which the next Open scans (and where it cuts a torn write instead of
// failing the partition); what was synced stays synced. A change of sync
// policy checkpoints at once, outside the budget (run).
func (p *partition) checkpointTick() {
	if p.syncedSinceCkp && p.failed.Load() == nil && p.log.PendingIndexWrites() == 0 && !p.ckpBudget.take() {
		p.snapshotProducers(snapCheckpoint) // producers.go
		p.log.ParkIfOver()
		return
	}
	p.checkpoint()
}

func (p *partition) checkpoint() {
	defer p.log.ParkIfOver()            // idle partitions too (--max-open-segment-files)
	p.snapshotProducers(snapCheckpoint) // producers.go
	if p.failed.Load() != nil || !p.syncedSinceCkp && p.log.PendingIndexWrites() == 0 {
		return
	}
	if err := p.log.Checkpoint(); err != nil {
		if codeOfStorage(err) != api.CodeDiskFull {
			// (No space: the log says so itself, rate-limited.)
			p.logger.Warn("recovery-point checkpoint failed", "err", err)
		}
		return
	}
	p.syncedSinceCkp = false
}

func (p *partition) publishHW(hw uint64) {
	p.hw.Store(hw)
	p.wake()
}

// close refuses new appends, commits what is queued, then closes the log
// (sync, trim of the preallocated tail, checkpoint).
func (p *partition) close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if already {
		<-p.done
		return nil
	}
	if p.log == nil {
		return nil
	}
	close(p.stop)
	<-p.done
	p.checkpointHW()
	p.snapshotProducers(snapClose) // producers.go
	// After a failed sync, segment.Log.Close skips the trim and the
	// checkpoint: the recovery point never claims what the disk may have lost.
	err := p.log.Close()
	if p.failed.Load() != nil {
		return nil // already reported when the partition failed
	}
	return err
}

// fetch reads whole batches from offset below the high watermark, waiting
// up to maxWait (or until ctx or stop ends) when none is readable.
func (p *partition) fetch(ctx context.Context, offset uint64, maxBytes int, maxWait time.Duration, stop <-chan struct{}) (*FetchResult, error) {
	if p.log == nil {
		return nil, p.failed.Load()
	}
	var timer *time.Timer
	for {
		wait := *p.notify.Load()
		if p.deleted.Load() {
			return nil, unknownTopic(p.topic)
		}
		hw := p.hw.Load()
		start := p.log.LogStartOffset()
		// A replica's high watermark may lag its log end (a new leader's
		// until its followers fetch, or one restarted from its
		// checkpoint): an offset up to the log end waits for it.
		valid := hw
		if p.repl != nil {
			valid = max(hw, p.log.NextOffset())
		}
		if offset < start || offset > valid {
			return nil, api.NewRangeError(api.CodeOffsetOutOfRange, start, hw,
				"offset %d outside [%d, %d] of %s/%d", offset, start, hw, p.topic, p.id)
		}
		if offset < hw {
			v, err := p.log.Read(offset, maxBytes, hw)
			if err != nil {
				var oor *segment.OffsetOutOfRangeError
				if errors.As(err, &oor) {
					return nil, api.NewRangeError(api.CodeOffsetOutOfRange, oor.Start, hw,
						"offset %d below the log start %d of %s/%d", offset, oor.Start, p.topic, p.id)
				}
				return nil, storageError("read", err)
			}
			return &FetchResult{HighWatermark: hw, LogStartOffset: start, Bufs: v.Bufs, release: v.Release}, nil
		}
		if maxWait <= 0 {
			return &FetchResult{HighWatermark: hw, LogStartOffset: start}, nil
		}
		if timer == nil {
			timer = time.NewTimer(maxWait)
			defer timer.Stop()
		}
		select {
		case <-wait:
		case <-timer.C:
			maxWait = 0
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-stop:
			return nil, api.NewError(api.CodeShuttingDown, "server is shutting down")
		}
	}
}

// storageError maps an I/O error to the catalog: ENOSPC and EDQUOT (the
// user's quota is used up) are DISK_FULL (retriable once space returns),
// anything else STORAGE_ERROR.
func storageError(op string, err error) *api.Error {
	if errors.Is(err, unix.ENOSPC) {
		return api.WrapError(api.CodeDiskFull, err, "%s", op)
	}
	if errors.Is(err, unix.EDQUOT) {
		return api.WrapError(api.CodeDiskFull, err, "%s", op)
	}
	var e *api.Error
	if errors.As(err, &e) {
		return e
	}
	return api.WrapError(api.CodeStorageError, err, "%s", op)
}

// codeOfStorage is the catalog code storageError gives err.
func codeOfStorage(err error) api.Code { return storageError("", err).Code }

func (p *partition) info() PartitionInfo {
	pi := PartitionInfo{Partition: p.id, HighWatermark: p.hw.Load()}
	if e := p.failed.Load(); e != nil {
		pi.Err = e
	}
	if p.log != nil {
		pi.LogStartOffset = p.log.LogStartOffset()
		pi.LogEndOffset = p.log.NextOffset()
		pi.SizeBytes = p.log.SizeBytes()
		pi.SegmentCount = p.log.SegmentCount()
	}
	return pi
}
