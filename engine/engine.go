package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/ring"
	"github.com/seedqueue/sq/segment"
)

// Engine owns a data directory: its topics, partitions and group offsets.
// All methods are safe for concurrent use. Errors meant for clients are
// *api.Error values with catalog codes.
type Engine struct {
	opts Options
	log  *slog.Logger
	// defaults are the defaults of new topics (SetTopicDefaults); they
	// start as opts'.
	defaults atomic.Pointer[TopicDefaults]
	lock     *dirLock

	mu       sync.RWMutex
	topics   map[string]*topic
	createMu sync.Mutex // serialises topic creation

	offsets *offsetStore
	openSem chan struct{} // bounds partitions opened at once; see openParallelism

	obs observing

	files     *segment.FileCache // open segment files and mappings of every partition
	syncer    *syncer            // the backend of every partition's log: shared sync passes
	ckpBudget *checkpointBudget  // periodic recovery-point checkpoints of every partition

	disk      *diskFloor    // nil: no free-space floor
	reclaim   reclaimer     // gives back preallocated space for refused publishes
	scrubDone chan struct{} // closed when the scrub of sealed segments ends

	bg sync.WaitGroup // the retention goroutine

	// commitCheck selects the partitions whose commits are checked
	// against the high watermark; nil: all (SetCommitCheck).
	commitCheck atomic.Pointer[func(topic string, partition int) bool]
	// topicStats, when set, gives the partition statistics DescribeGroup
	// and ResetOffsets read (SetTopicStats); nil: this engine's own.
	topicStats atomic.Pointer[func(topic string) (TopicInfo, error)]

	producerIDs producerIDs // InitProducerID (producers_ids.go)

	// remoteLog is the tiered storage, nil without (SetRemoteLog).
	remoteLog atomic.Pointer[RemoteLog]

	closeOnce sync.Once
	closing   chan struct{}
	closeErr  error
}

type topic struct {
	// state is replaced whole by AlterTopicConfig and CreatePartitions
	// (both under Engine.createMu), so that a reader sees a partition
	// list and metadata that agree.
	state atomic.Pointer[topicState]
	refs  *topicRefs // users of its files; see DeleteTopic
}

// topicState is a topic's persisted metadata, the batch limits derived
// from it and its partitions (len(parts) == meta.Partitions). parts is
// never changed in place: growing the topic stores a new topicState.
type topicState struct {
	meta   topicMeta
	limits batch.Limits
	parts  []*partition
}

// newTopicState derives the limits of m: a record is bounded by the smaller
// of the topic's max.record.bytes and the server's record limit, which may
// have been lowered since the topic was created.
func (e *Engine) newTopicState(m topicMeta, parts []*partition) *topicState {
	maxRecord := min(int(m.Config.MaxRecordBytes), e.opts.MaxRecordBytes)
	return &topicState{meta: m, limits: batch.Limits{MaxRecordBytes: maxRecord, MaxBatchBytes: e.opts.MaxBatchBytes}, parts: parts}
}

// meta returns the topic's current metadata.
func (t *topic) meta() topicMeta { return t.state.Load().meta }

// parts returns the topic's current partitions, indexed by partition
// number. The slice must not be changed.
func (t *topic) parts() []*partition { return t.state.Load().parts }

// Open locks opts.DataDir (creating it if needed), recovers every topic's
// partitions and the group offsets, and returns the running engine. A
// partition whose files are corrupt below its recovery point is opened in
// the failed state (reported by DescribeTopic and every request) while the
// others serve. Open fails with ErrDataDirLocked when another process
// holds the directory.
func Open(opts Options) (*Engine, error) {
	opts.Defaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("engine: invalid options: %w", err)
	}
	if err := mkdirDurable(opts.FS, opts.DataDir); err != nil {
		return nil, fmt.Errorf("engine: create data directory: %w", err)
	}
	lock, err := lockDataDir(opts.FS, opts.DataDir)
	if err != nil {
		return nil, err
	}
	e := &Engine{opts: opts, log: opts.Logger, lock: lock, topics: map[string]*topic{}, closing: make(chan struct{}),
		openSem: make(chan struct{}, openParallelism()), files: segment.NewFileCache(opts.MaxOpenSegmentFiles),
		ckpBudget: newCheckpointBudget(checkpointsPerSec)}
	e.syncer = e.newSyncer()
	e.defaults.Store(new(opts.topicDefaults()))
	// The floor comes first: partitions bound their preallocation by it.
	e.disk = newDiskFloor(opts)
	if err := e.open(); err != nil {
		_ = e.closeTopics()
		_ = e.syncer.close()
		_ = lock.release()
		return nil, err
	}
	if opts.RetentionCheckInterval > 0 {
		e.bg.Go(func() { e.retentionLoop(opts.RetentionCheckInterval) })
	}
	e.startScrub()
	return e, nil
}

func (e *Engine) open() error {
	removeTemps(e.opts.FS, e.opts.DataDir, e.log)
	e.emptyTrash()
	if err := checkFormatVersion(e); err != nil {
		return err
	}
	// Parents first: each new directory's entry is fsynced in its parent.
	for _, d := range []string{filepath.Dir(e.metaDir()), e.metaDir(), filepath.Join(e.opts.DataDir, "topics"), filepath.Join(e.opts.DataDir, "groups")} {
		if err := mkdirDurable(e.opts.FS, d); err != nil {
			return fmt.Errorf("engine: create %s: %w", d, err)
		}
	}
	metas, err := e.loadTopicMetas()
	if err != nil {
		return err
	}
	if err := e.assignTopicIDs(metas); err != nil {
		return err
	}
	e.finishDeletes(metas)
	// Recovery is CPU-bound (CRC of everything above each recovery
	// point): topics and their partitions open in parallel, bounded by
	// openParallelism.
	topics := make([]*topic, len(metas))
	errs := make([]error, len(metas))
	var wg sync.WaitGroup
	for i, m := range metas {
		wg.Go(func() { topics[i], errs[i] = e.openTopic(m) })
	}
	wg.Wait()
	for i, m := range metas {
		if errs[i] != nil {
			for _, t := range topics {
				if t != nil {
					_ = closeParts(t.parts())
				}
			}
			return errs[i]
		}
		e.topics[m.Name] = topics[i]
	}
	e.reportOrphanTopicDirs()
	e.offsets, err = openOffsetStore(filepath.Join(e.opts.DataDir, "groups"), e.opts.FS, e.log)
	if err != nil {
		return err
	}
	e.offsets.current = e.currentTopicID
	e.adoptOffsets()
	if e.opts.Replication != nil {
		// A cluster keeps the offsets in OffsetsTopic (offsets_topic.go);
		// what the file holds is imported once.
		s := e.offsets
		s.legacy, s.groups = s.groups, map[string]map[tp]committed{}
		s.maxRecord = min(s.maxRecord, min(e.opts.MaxRecordBytes, e.opts.MaxBatchBytes-1024)-MaxGroupIDBytes)
		s.topic = &offsetsLog{e: e, s: s, snapshotBytes: offsetsSnapshotBytes, loadWait: offsetsLoadWait, parts: map[int]*offsetsPart{}}
	} else if !e.opts.DeferOffsetClamp {
		e.clampOffsets(e.topics, nil)
	}
	e.log.Info("storage recovered", "data_dir", e.opts.DataDir, "topics", len(e.topics), "io_backend", e.opts.Backend.Name())
	return nil
}

// segmentOptions returns the segment.Options of a partition of a topic
// with config c, sync policy pol and creation time createdMs (Unix ms; 0
// unknown): recovery's treatment of a hole above the recovery point
// depends on the policy (docs/storage.md, Recovery), and persisted times
// are bounded by the engine's clock above and by the topic's creation
// below (no record was appended before its topic existed).
func (e *Engine) segmentOptions(c TopicConfig, pol SyncPolicy, createdMs int64) segment.Options {
	return segment.Options{
		MinAppendTime:      createdMs,
		SegmentBytes:       c.SegmentBytes,
		IndexIntervalBytes: e.opts.IndexIntervalBytes,
		PreallocBytes:      e.opts.PreallocBytes,
		DirectWrites:       e.opts.DirectWrites,
		AllocRoom:          e.allocRoom(),
		Allocated:          e.allocated(),
		MaxBatchBytes:      e.opts.MaxBatchBytes,
		Durability:         pol.durability(),
		Now:                e.opts.Now,
		Logger:             e.log,
		Files:              e.files,
	}
}

// allocRoom returns the bound of segment preallocation steps: the room
// above the free-space floor, or nil without a floor.
func (e *Engine) allocRoom() func() int64 {
	if e.disk == nil {
		return nil
	}
	return e.disk.room
}

// allocated returns the hook that counts preallocated bytes against the
// free-space floor, or nil without a floor.
func (e *Engine) allocated() func(step, needed int64) {
	if e.disk == nil {
		return nil
	}
	return e.disk.allocated
}

// openTopic opens every partition of m. A partition that fails to open is
// kept in the failed state with the error; the topic still serves the rest.
func (e *Engine) openTopic(m topicMeta) (*topic, error) {
	policy, err := ParseSyncPolicy(m.Config.SyncPolicy)
	if err != nil {
		return nil, fmt.Errorf("engine: topic %s: %w", m.Name, err)
	}
	t := &topic{refs: newTopicRefs(e.opts.FS, e.log.Warn)}
	t.state.Store(e.newTopicState(m, e.openParts(m, policy, 0, m.Partitions)))
	return t, nil
}

// openParts opens (creating when missing) partitions from to to-1 of the
// topic m, in parallel bounded by openParallelism. A partition that fails
// to open is returned in the failed state with the error.
func (e *Engine) openParts(m topicMeta, policy SyncPolicy, from, to int) []*partition {
	parts := make([]*partition, to-from)
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		e.openSem <- struct{}{}
		wg.Go(func() {
			defer func() { <-e.openSem }()
			dir := filepath.Join(e.topicDir(m.Name), strconv.Itoa(i))
			lg, err := segment.Open(dir, e.opts.FS, e.syncer, e.segmentOptions(m.Config, policy, m.CreatedMs))
			p := newPartition(m.Name, i, dir, lg, policy, e.opts.Now, e.log, e.opts.FS, e.opts.Replication, e.ckpBudget)
			p.obs = e.opts.Observer
			if err != nil {
				code := api.CodeStorageError
				if errors.Is(err, segment.ErrCorrupt) {
					code = api.CodePartitionFailed
				}
				p.fail(api.WrapError(code, err, "partition %s/%d failed to open", m.Name, i))
			} else {
				p.prod.Store(openProducers(e.opts.FS, dir, lg, p.logger)) // producers.go
			}
			parts[i-from] = p
		})
	}
	wg.Wait()
	return parts
}

// newSyncer returns the engine's syncer over opts.Backend; with
// syncFSMinFiles set it opens the data directory for syncfs(2), and falls
// back to per-file syncs when that fails.
func (e *Engine) newSyncer() *syncer {
	var dir ring.File
	if syncFSMinFiles > 0 {
		d, err := e.opts.FS.Open(e.opts.DataDir)
		if err != nil {
			e.log.Warn("cannot open the data directory for syncfs; syncing each file on its own", "err", err)
		} else {
			dir = d
		}
	}
	return newSyncer(e.opts.Backend, dir, syncFSMinFiles)
}

// openParallelism bounds the partitions opened (recovered) at once: enough
// to keep every core busy checking CRCs while another waits on the disk.
func openParallelism() int { return 2 * runtime.GOMAXPROCS(0) }

// reportOrphanTopicDirs logs topic directories without metadata. An empty
// one is the remains of a create that crashed before its metadata was
// written (it holds no acknowledged record) and the next create of the
// name replaces it. One that holds data lost its metadata file: it is
// reported as an error and kept, and CreateTopic refuses the name.
func (e *Engine) reportOrphanTopicDirs() {
	names, err := e.opts.FS.ReadDir(filepath.Join(e.opts.DataDir, "topics"))
	if err != nil {
		return
	}
	for _, name := range names {
		if _, ok := e.topics[name]; ok {
			continue
		}
		path := filepath.Join(e.opts.DataDir, "topics", name)
		if dirHoldsData(e.opts.FS, path) {
			e.log.Error("topic directory holds data but has no metadata; not served and kept as is (restore meta/topics/"+name+".json, or move the directory away to reuse the name)", "path", path)
			continue
		}
		e.log.Warn("ignoring empty topic directory without metadata (left by an interrupted create)", "path", path)
	}
}

// Limits returns the data-plane limits of this engine.
func (e *Engine) Limits() Limits {
	return Limits{MaxRecordBytes: e.opts.MaxRecordBytes, MaxBatchBytes: e.opts.MaxBatchBytes}
}

// BackendName names the I/O backend in use ("portable" or "uring").
func (e *Engine) BackendName() string { return e.opts.Backend.Name() }

// DataDir returns the data directory.
func (e *Engine) DataDir() string { return e.opts.DataDir }

func (e *Engine) isClosing() bool {
	select {
	case <-e.closing:
		return true
	default:
		return false
	}
}

// CreateTopic creates a topic with partitions partitions (1 to
// MaxPartitions) and config cfg (zero fields take the server defaults).
// Errors: INVALID_TOPIC_NAME, INVALID_CONFIG, TOPIC_EXISTS,
// STORAGE_ERROR.
func (e *Engine) CreateTopic(name string, partitions int, cfg TopicConfig) (TopicInfo, error) {
	if err := ValidateTopicName(name); err != nil {
		return TopicInfo{}, err
	}
	if partitions < 1 || partitions > MaxPartitions {
		return TopicInfo{}, api.NewError(api.CodeInvalidConfig, "partitions %d out of range [1, %d]", partitions, MaxPartitions)
	}
	cfg, err := e.resolveConfig(cfg, nil)
	if err != nil {
		return TopicInfo{}, err
	}
	return e.createTopic(topicMeta{Name: name, Partitions: partitions, Config: cfg, CreatedMs: e.opts.Now().UnixMilli(), ID: api.NewTopicID()})
}

// createTopic creates the topic m describes (name and partition count
// checked, config resolved) with m's id and creation time.
func (e *Engine) createTopic(m topicMeta) (TopicInfo, error) { return e.createTopicAt(m, nil) }

// createTopicAt is createTopic with partition i's log starting at
// starts[i] (nil: every log at 0).
func (e *Engine) createTopicAt(m topicMeta, starts []uint64) (TopicInfo, error) {
	name, partitions, cfg := m.Name, m.Partitions, m.Config
	e.createMu.Lock()
	defer e.createMu.Unlock()
	if e.isClosing() {
		return TopicInfo{}, api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	e.mu.RLock()
	_, exists := e.topics[name]
	e.mu.RUnlock()
	if exists {
		return TopicInfo{}, api.NewError(api.CodeTopicExists, "topic %q already exists", name)
	}
	// A directory without metadata is the remains of a crashed create or
	// of a delete (it holds the deletion marker), unless it holds data
	// without the marker: then its metadata was lost, and replacing it
	// would destroy acknowledged records.
	dir := e.topicDir(name)
	fsys := e.opts.FS
	if !deletedDir(fsys, dir) && dirHoldsData(fsys, dir) {
		return TopicInfo{}, api.NewError(api.CodeTopicExists,
			"topic directory %s holds data but has no metadata (meta/topics/%s.json missing or unreadable); restore the metadata file and restart, or move the directory away to reuse the name", dir, name)
	}
	// A new topic must not inherit the committed offsets of an earlier
	// topic of the same name (one whose metadata was lost, say).
	if err := e.offsets.forgetTopic(name); err != nil {
		return TopicInfo{}, storageError("create topic: drop the name's old group offsets", err)
	}
	if deletedDir(fsys, dir) {
		// A delete's leftover: moved to the trash whole, so that a crash
		// halfway through its removal cannot leave data without the marker.
		to, err := e.trashTopicDir(name)
		if err != nil {
			return TopicInfo{}, storageError("create topic: move a deleted topic's directory away", err)
		}
		_ = fsys.RemoveAll(to)
	}
	if err := fsys.RemoveAll(dir); err != nil {
		return TopicInfo{}, storageError("create topic", err)
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return TopicInfo{}, storageError("create topic", err)
	}
	t, err := e.openTopic(m)
	if err == nil {
		for _, p := range t.parts() {
			if fe := p.failed.Load(); fe != nil {
				err = fe
				break
			}
		}
	}
	if err == nil && starts != nil {
		err = startPartitionsAt(t, starts)
	}
	if err == nil {
		err = syncDir(e.opts.FS, filepath.Join(e.opts.DataDir, "topics"))
	}
	if err == nil {
		// The metadata file is the commit point of the create.
		err = e.writeTopicMeta(m)
	}
	if err != nil {
		if t != nil {
			_ = closeParts(t.parts())
		}
		// The metadata file first: a failed directory fsync may follow a
		// rename that put it in place. Best effort; what stays is a topic
		// without acknowledged records.
		if fsys.Remove(filepath.Join(e.metaDir(), name+".json")) == nil {
			_ = fsys.SyncDir(e.metaDir())
		}
		_ = fsys.RemoveAll(dir)
		return TopicInfo{}, storageError("create topic", err)
	}
	e.mu.Lock()
	e.topics[name] = t
	e.mu.Unlock()
	e.log.Info("topic created", "topic", name, "topic_id", m.ID, "partitions", partitions, "sync_policy", cfg.SyncPolicy)
	return t.info(true), nil
}

// startPartitionsAt empties each new partition of t whose starts entry is
// above 0 and starts its log there (RestoreTopic).
func startPartitionsAt(t *topic, starts []uint64) error {
	for i, p := range t.parts() {
		off := starts[i]
		if off == 0 {
			continue
		}
		err := p.onAppend(func() error {
			if err := p.log.TruncateFullyAndStartAt(off); err != nil {
				return err
			}
			p.hw.Store(off)
			if r := p.repl; r != nil {
				// Recovery made what the log holds durable; it holds
				// nothing now, from off on.
				r.mu.Lock()
				r.durable = off
				r.mu.Unlock()
			}
			p.wake()
			return nil
		})
		if err != nil {
			return fmt.Errorf("start partition %d at offset %d: %w", i, off, err)
		}
	}
	return nil
}

func (t *topic) info(withPartitions bool) TopicInfo {
	m := t.meta()
	ti := TopicInfo{Name: m.Name, ID: m.ID, PartitionCount: m.Partitions, Config: m.Config, CreatedMs: m.CreatedMs}
	if withPartitions {
		for _, p := range t.parts() {
			ti.Partitions = append(ti.Partitions, p.info())
		}
	}
	return ti
}

func (e *Engine) topic(name string) (*topic, error) {
	e.mu.RLock()
	t, ok := e.topics[name]
	e.mu.RUnlock()
	if !ok {
		if err := ValidateTopicName(name); err != nil {
			return nil, err
		}
		return nil, api.NewError(api.CodeUnknownTopic, "topic %q does not exist", name)
	}
	return t, nil
}

func (e *Engine) partition(topicName string, p int) (*topic, *partition, error) {
	t, err := e.topic(topicName)
	if err != nil {
		return nil, nil, err
	}
	if p < 0 || p >= len(t.parts()) {
		return nil, nil, api.NewError(api.CodeUnknownPartition, "topic %q has partitions 0..%d, not %d", topicName, len(t.parts())-1, p)
	}
	return t, t.parts()[p], nil
}

// DescribeTopic returns the topic's config and, per partition, log start,
// high watermark, log end, size and segment count, and with a remote log
// (SetRemoteLog) its remote log and upload lag (PartitionInfo.Remote).
// Errors: UNKNOWN_TOPIC, INVALID_TOPIC_NAME.
func (e *Engine) DescribeTopic(name string) (TopicInfo, error) {
	t, err := e.topic(name)
	if err != nil {
		return TopicInfo{}, err
	}
	ti := t.info(true)
	e.fillRemoteStats(&ti)
	return ti, nil
}

// ListTopics returns every topic sorted by name, without partition details.
func (e *Engine) ListTopics() []TopicInfo {
	e.mu.RLock()
	out := make([]TopicInfo, 0, len(e.topics))
	for _, t := range e.topics {
		out = append(out, t.info(false))
	}
	e.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// enqueueBatch validates b and queues it in the partition's FIFO behind
// after (nil: no chain), without the observer and without waiting, and
// returns the partition it was queued to.
func (e *Engine) enqueueBatch(ctx context.Context, topicName string, partition int, b []byte, after *Pending) (*partition, *appendReq, uint32, error) {
	t, p, err := e.partition(topicName, partition)
	if err != nil {
		return nil, nil, 0, err
	}
	var prev *appendReq
	if after != nil {
		if after.part != p {
			return nil, nil, 0, api.NewError(api.CodeInvalidRequest, "append chained behind an append to another partition")
		}
		prev = after.req
	}
	h, err := batch.Validate(b, t.state.Load().limits)
	if err != nil {
		if errors.Is(err, batch.ErrTooLarge) {
			return nil, nil, 0, api.WrapError(api.CodeMessageTooLarge, err, "")
		}
		return nil, nil, 0, api.WrapError(api.CodeCorruptBatch, err, "")
	}
	// In a cluster: only the leader takes client batches, and acks all
	// needs enough in-sync replicas before anything is written.
	if err := p.replicatedAppendCheck(AcksFrom(ctx)); err != nil {
		return nil, nil, 0, err
	}
	if IsInternalTopic(p.topic) {
		// Group commits (OffsetsTopic) keep working below the free-space
		// floor, as commits do on a single node: they are small, and the
		// floor keeps room for them.
	} else if err := e.disk.admit(len(b), p.spare); err != nil {
		// Other partitions' preallocated space may hold the room: give
		// it back and try once more.
		if !e.reclaimSpare(ctx, p) {
			return nil, nil, 0, err
		}
		if err := e.disk.admit(len(b), p.spare); err != nil {
			return nil, nil, 0, err
		}
	}
	req, err := p.enqueue(ctx, b, h.RecordCount, prev)
	if err != nil {
		return nil, nil, 0, err
	}
	return p, req, h.RecordCount, nil
}

// fetch is FetchID without the observer.
func (e *Engine) fetch(ctx context.Context, topicName string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*FetchResult, error) {
	t, p, err := e.partitionID(topicName, id, partition)
	if err != nil {
		return nil, err
	}
	if maxWait > defaultFetchMaxWait {
		maxWait = defaultFetchMaxWait
	}
	if maxBytes < 1 {
		maxBytes = 1
	}
	if res, ok, err := e.fetchRemote(ctx, t, p, offset, maxBytes); ok {
		return res, err
	}
	if !t.refs.acquire() {
		return nil, goneTopic(topicName, id)
	}
	res, err := holdTopic(t, p, topicName)(p.fetch(ctx, offset, maxBytes, maxWait, e.closing))
	if err != nil && errors.Is(err, api.ErrOffsetOutOfRange) && e.remote() != nil {
		// The local log start passed offset meanwhile (local retention):
		// the remote log has it now.
		if rres, ok, rerr := e.fetchRemote(ctx, t, p, offset, maxBytes); ok {
			return rres, rerr
		}
	}
	if res != nil {
		res.TopicID = t.meta().ID
	}
	if err != nil && !id.IsZero() && p.deleted.Load() {
		err = unknownTopicID(topicName, id)
	}
	return res, err
}

// Close refuses new work, finishes the appends already queued, syncs,
// trims and checkpoints every partition, closes the group offsets and
// releases the directory lock. It is idempotent.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		close(e.closing)
		e.bg.Wait()
		<-e.scrubDone
		e.createMu.Lock()
		defer e.createMu.Unlock()
		err := e.closeTopics()
		if e.offsets != nil {
			err = errors.Join(err, e.offsets.close())
		}
		err = errors.Join(err, e.syncer.close())
		e.closeErr = errors.Join(err, e.lock.release())
	})
	return e.closeErr
}

func (e *Engine) closeTopics() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for _, t := range e.topics {
		errs = append(errs, closeParts(t.parts()))
	}
	return errors.Join(errs...)
}

// closeParts closes partitions in parallel: each sync is independent.
func closeParts(parts []*partition) error {
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	// A partition parked by the segment-file bound reopens its active
	// .log to trim and sync it: bound how many do at once.
	sem := make(chan struct{}, closeParallelism)
	for i, p := range parts {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = p.close()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// closeParallelism is how many partitions closeParts closes at once.
const closeParallelism = 32
