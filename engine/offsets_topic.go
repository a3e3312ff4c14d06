package engine

// Committed group offsets in a cluster (docs/cluster.md "Consumer
// groups"). An engine opened with Options.Replication keeps them in the
// replicated internal topic OffsetsTopic rather than in groups/offsets.log:
//
//   - the coordinator of a group is the leader of partition
//     OffsetsPartition(group, n) of OffsetsTopic (n: its partition count);
//   - a commit (or reset, or group delete) is one record, key the group,
//     value the JSON offsetRecord, appended with acks all and applied to
//     the coordinator's memory once the high watermark passed it;
//   - when this node becomes a partition's leader it reads the partition
//     from its log start up to its log end (once the high watermark has
//     reached it) and serves that partition's groups from then on; until
//     then their calls get COORDINATOR_NOT_AVAILABLE (retriable); when it
//     stops leading, it forgets them (members join the new coordinator);
//   - past offsetsSnapshotBytes of commits a leader rolls the active
//     segment, writes a snapshot (a begin record, one record per group,
//     an end record) and, once the snapshot is acknowledged, deletes the
//     segments below it; followers delete theirs as the leader's log
//     start passes them (FollowLogStart). A snapshot cut short by a change
//     of leader is ignored by the next load.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/segment"
)

// OffsetsPartition returns the partition of OffsetsTopic that holds
// group when the topic has partitions partitions: FNV-1a 32 (the hash
// the data plane's default partitioner uses for keys) of the group id,
// modulo partitions. It is what every node computes to find a group's
// coordinator; the partition count of OffsetsTopic never changes.
func OffsetsPartition(group string, partitions int) int {
	h := fnv.New32a()
	h.Write([]byte(group))
	return int(h.Sum32() % uint32(partitions))
}

// Kinds of the records of OffsetsTopic (offsetRecord.Kind).
const (
	kindCommit    = ""   // a commit, reset or delete of one group
	kindSnapBegin = "sb" // the first record of a snapshot
	kindSnap      = "s"  // one group's offsets in a snapshot
	kindSnapEnd   = "se" // the last record of a snapshot
)

const (
	// offsetsSnapshotBytes is how many bytes of commits a partition of
	// OffsetsTopic takes before its leader writes a snapshot and deletes
	// the segments below it.
	offsetsSnapshotBytes = 8 << 20
	// offsetsAppendTimeout bounds the wait for a commit's replication.
	offsetsAppendTimeout = 10 * time.Second
	// offsetsLoadWait bounds how long a group call waits for its
	// partition's load on a new leader before it answers
	// COORDINATOR_NOT_AVAILABLE.
	offsetsLoadWait = 5 * time.Second
	// offsetsReadBytes is the size of one read of a load.
	offsetsReadBytes = 4 << 20
)

// offsetsLog is the offset store's journal in OffsetsTopic.
type offsetsLog struct {
	e *Engine
	s *offsetStore
	// snapshotBytes is offsetsSnapshotBytes unless a test lowers it.
	snapshotBytes int64
	// loadWait is offsetsLoadWait unless a test changes it.
	loadWait time.Duration

	mu    sync.Mutex
	parts map[int]*offsetsPart // the partitions this node leads
}

// offsetsPart is one partition of OffsetsTopic that this node leads.
type offsetsPart struct {
	id    int
	epoch uint32
	// ready is closed once the partition's groups are loaded.
	ready chan struct{}
	// gone is closed when this node stops leading it (or closes): a load
	// or commit in progress then leaves memory alone.
	gone     chan struct{}
	goneOnce sync.Once
	// write orders the partition's appends: one at a time, applied in
	// their log order. since counts the bytes appended after the last
	// snapshot; guarded by write.
	write sync.Mutex
	since int64
}

func (p *offsetsPart) stop() { p.goneOnce.Do(func() { close(p.gone) }) }

func (p *offsetsPart) stopped() bool {
	select {
	case <-p.gone:
		return true
	default:
		return false
	}
}

// partitions returns the partition count of the local OffsetsTopic.
func (t *offsetsLog) partitions() (int, error) {
	t.e.mu.RLock()
	tp, ok := t.e.topics[OffsetsTopic]
	t.e.mu.RUnlock()
	if !ok {
		return 0, api.NewError(api.CodeCoordinatorNotAvailable, "the internal topic %s does not exist on this node yet", OffsetsTopic)
	}
	return len(tp.parts()), nil
}

// serving returns the partition that holds group when this node leads it
// and has loaded it, waiting up to loadWait (offsetsLoadWait) for a load in
// progress; otherwise COORDINATOR_NOT_AVAILABLE (SHUTTING_DOWN when the
// engine closes meanwhile).
func (t *offsetsLog) serving(group string) (*offsetsPart, error) {
	n, err := t.partitions()
	if err != nil {
		return nil, err
	}
	id := OffsetsPartition(group, n)
	t.mu.Lock()
	part := t.parts[id]
	t.mu.Unlock()
	if part == nil {
		return nil, api.NewError(api.CodeCoordinatorNotAvailable, "this node does not lead partition %d of %s, which holds group %q", id, OffsetsTopic, group)
	}
	select {
	case <-part.ready:
		return part, nil
	default:
	}
	// A load takes milliseconds unless a replica is behind: a call that
	// comes just after the topic's creation or a failover waits for it
	// rather than failing.
	timer := time.NewTimer(t.loadWait)
	defer timer.Stop()
	select {
	case <-part.ready:
		return part, nil
	case <-part.gone:
		return nil, api.NewError(api.CodeCoordinatorNotAvailable, "group %q: this node stopped leading partition %d of %s", group, id, OffsetsTopic)
	case <-t.e.closing:
		return nil, api.NewError(api.CodeShuttingDown, "server is shutting down")
	case <-timer.C:
		return nil, api.NewError(api.CodeCoordinatorNotAvailable, "group %q: partition %d of %s is still loading on its new leader", group, id, OffsetsTopic)
	}
}

// lead starts serving partition id from leader epoch epoch: its groups
// are loaded in the background. A call for the epoch already led does
// nothing.
func (t *offsetsLog) lead(id int, epoch uint32) {
	t.mu.Lock()
	if old := t.parts[id]; old != nil {
		if old.epoch == epoch {
			t.mu.Unlock()
			return
		}
		old.stop()
	}
	part := &offsetsPart{id: id, epoch: epoch, ready: make(chan struct{}), gone: make(chan struct{})}
	t.parts[id] = part
	t.mu.Unlock()
	go t.load(part)
}

// resign stops serving partition id and forgets its groups: their
// offsets and members.
func (t *offsetsLog) resign(id int) {
	t.mu.Lock()
	part := t.parts[id]
	delete(t.parts, id)
	t.mu.Unlock()
	if part == nil {
		return
	}
	part.stop()
	t.forget(id)
	t.e.log.Info("no longer the coordinator of the groups of the offsets partition", "partition", id, "leader_epoch", part.epoch)
}

// close stops every partition (the engine is closing).
func (t *offsetsLog) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, part := range t.parts {
		part.stop()
		delete(t.parts, id)
	}
}

// forget drops the groups of partition id from memory: offsets and
// members.
func (t *offsetsLog) forget(id int) {
	n, err := t.partitions()
	if err != nil {
		return
	}
	s := t.s
	s.mu.Lock()
	for g := range s.groups {
		if OffsetsPartition(g, n) == id {
			delete(s.groups, g)
		}
	}
	s.mu.Unlock()
	c := t.e.coord()
	for _, g := range c.snapshot() {
		if OffsetsPartition(g.name, n) != id {
			continue
		}
		g.mu.Lock()
		for m := range g.members {
			c.removeMember(g, m)
		}
		g.deleted = true
		c.mu.Lock()
		if c.groups[g.name] == g {
			delete(c.groups, g.name)
		}
		c.mu.Unlock()
		g.mu.Unlock()
	}
}

// load reads part's groups from the log and starts serving them. It
// first waits for the high watermark to reach the log end as it is now:
// what an earlier leader wrote is then committed, so the state loaded is
// the state acknowledged. It retries until it succeeds or part stops.
func (t *offsetsLog) load(part *offsetsPart) {
	for attempt := 0; ; attempt++ {
		groups, read, err := t.read(part)
		if err == nil {
			s := t.s
			s.mu.Lock()
			if part.stopped() {
				s.mu.Unlock()
				return
			}
			n, _ := t.partitions()
			for g := range s.groups {
				if OffsetsPartition(g, n) == part.id {
					delete(s.groups, g)
				}
			}
			for g, offs := range groups {
				for k, c := range offs {
					if cur, ok := s.current(k.Topic); !c.TopicID.IsZero() && (!ok || cur != c.TopicID) {
						delete(offs, k) // of an earlier topic of that name
					}
				}
				if len(offs) > 0 {
					s.groups[g] = offs
				}
			}
			s.mu.Unlock()
			part.write.Lock()
			part.since = read
			part.write.Unlock()
			close(part.ready)
			t.e.log.Info("coordinating the groups of the offsets partition", "partition", part.id, "leader_epoch", part.epoch, "groups", len(groups), "bytes_read", read)
			return
		}
		if part.stopped() {
			return
		}
		t.e.log.Warn("loading the groups of an offsets partition failed; retrying", "partition", part.id, "attempt", attempt+1, "err", err)
		select {
		case <-part.gone:
			return
		case <-t.e.closing:
			return
		case <-time.After(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second)):
		}
	}
}

// read returns the groups of part as its log holds them up to the log
// end at the call, and how many bytes it read.
func (t *offsetsLog) read(part *offsetsPart) (map[string]map[tp]committed, int64, error) {
	_, p, err := t.e.partition(OffsetsTopic, part.id)
	if err != nil {
		return nil, 0, err
	}
	if p.log == nil {
		return nil, 0, p.failed.Load()
	}
	end := p.log.NextOffset()
	for p.hw.Load() < end {
		wait := *p.notify.Load()
		if p.hw.Load() >= end {
			break
		}
		select {
		case <-wait:
		case <-part.gone:
			return nil, 0, api.NewError(api.CodeCoordinatorNotAvailable, "no longer the leader")
		case <-t.e.closing:
			return nil, 0, api.NewError(api.CodeShuttingDown, "server is shutting down")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-part.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	var st offsetsReplay
	var read int64
	off := p.log.LogStartOffset()
	for off < end {
		res, err := t.e.Fetch(ctx, OffsetsTopic, part.id, off, offsetsReadBytes, 0)
		if err != nil {
			return nil, 0, err
		}
		next := off
		for _, b := range res.Bufs {
			read += int64(len(b))
			if next, err = st.batches(b, next, end); err != nil {
				res.Release()
				return nil, 0, err
			}
		}
		res.Release()
		if next == off {
			return nil, 0, fmt.Errorf("read %s/%d at offset %d: no batch below the end %d", OffsetsTopic, part.id, off, end)
		}
		off = next
	}
	return st.state(), read, nil
}

// offsetsReplay rebuilds the groups of a partition of OffsetsTopic from
// its records, in log order.
type offsetsReplay struct {
	groups map[string]map[tp]committed
	// snap is the snapshot being read, nil outside one.
	snap map[string]map[tp]committed
}

func (r *offsetsReplay) state() map[string]map[tp]committed {
	if r.groups == nil {
		return map[string]map[tp]committed{}
	}
	return r.groups
}

// batches replays the whole batches in buf (whose records below from are
// skipped: the first may start before it) up to offset end, and returns
// the offset after the last record read.
func (r *offsetsReplay) batches(buf []byte, from, end uint64) (uint64, error) {
	next := from
	var it batch.Iter
	for len(buf) > 0 {
		h, err := batch.ParseHeader(buf)
		if err != nil || h.Size() > len(buf) {
			return next, fmt.Errorf("read %s: a damaged batch at offset %d", OffsetsTopic, next)
		}
		b := buf[:h.Size()]
		buf = buf[h.Size():]
		if h.NextOffset() <= from || h.BaseOffset >= end {
			continue
		}
		if err := it.Reset(b); err != nil {
			return next, err
		}
		for it.Next() {
			off := it.Record().Offset
			if off < from || off >= end {
				continue
			}
			var rec offsetRecord
			if err := json.Unmarshal(it.Record().Value, &rec); err != nil {
				return next, fmt.Errorf("read %s: record at offset %d: %w", OffsetsTopic, off, err)
			}
			r.apply(rec)
		}
		if err := it.Err(); err != nil {
			return next, err
		}
		next = min(h.NextOffset(), end)
	}
	return next, nil
}

// apply replays one record.
func (r *offsetsReplay) apply(rec offsetRecord) {
	if r.groups == nil {
		r.groups = map[string]map[tp]committed{}
	}
	switch rec.Kind {
	case kindSnapBegin:
		r.snap = map[string]map[tp]committed{}
	case kindSnap:
		if r.snap != nil {
			applyRecord(r.snap, rec)
		}
	case kindSnapEnd:
		if r.snap != nil {
			r.groups, r.snap = r.snap, nil
		}
	default:
		// A commit after a snapshot's begin without its end: that
		// snapshot was cut short (its leader changed) and is ignored.
		r.snap = nil
		applyRecord(r.groups, rec)
	}
}

// applyRecord applies a commit or delete record to groups.
func applyRecord(groups map[string]map[tp]committed, rec offsetRecord) {
	if rec.Deleted {
		delete(groups, rec.Group)
		return
	}
	g := groups[rec.Group]
	if g == nil {
		g = map[tp]committed{}
		groups[rec.Group] = g
	}
	for _, o := range rec.Offsets {
		g[tp{o.Topic, o.Partition}] = committed{Offset: o.Offset, Metadata: o.Metadata, TopicID: o.ID}
	}
}

// commit appends rec to the partition of its group, waits until it is
// replicated (acks all), and applies it. Errors: COORDINATOR_NOT_AVAILABLE
// (retriable: not the coordinator, still loading, leadership lost, or
// the replication did not complete in time: the commit may or may not
// have been stored), NOT_ENOUGH_REPLICAS (retriable), INVALID_REQUEST for
// a record over the topic's limit, STORAGE_ERROR.
func (t *offsetsLog) commit(rec offsetRecord) (map[topicRef]bool, error) {
	part, err := t.serving(rec.Group)
	if err != nil {
		return nil, err
	}
	part.write.Lock()
	defer part.write.Unlock()
	s := t.s
	s.mu.Lock()
	rec, stale := s.dropStale(rec)
	s.mu.Unlock()
	if len(rec.Offsets) == 0 && !rec.Deleted {
		return stale, nil
	}
	value, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if len(value) > s.maxRecord {
		return nil, api.NewError(api.CodeInvalidRequest, "offset commit of %d bytes (metadata included) over the %d-byte limit of one offsets record", len(value), s.maxRecord)
	}
	var b batch.Builder
	b.Add([]byte(rec.Group), value, nil, t.e.opts.Now().UnixMilli())
	buf, err := b.Build()
	if err != nil {
		return nil, err
	}
	if _, err := t.append(part, buf); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if !part.stopped() {
		s.apply(rec)
	}
	s.mu.Unlock()
	part.since += int64(len(buf))
	if part.since >= t.snapshotBytes {
		if err := t.snapshot(part); err != nil {
			t.e.log.Warn("snapshot of an offsets partition failed; retried after the next commit", "partition", part.id, "err", err)
		}
	}
	return stale, nil
}

// append appends buf to part with acks all and returns the offset of its
// first record. part.write is held.
func (t *offsetsLog) append(part *offsetsPart, buf []byte) (uint64, error) {
	ctx, cancel := context.WithTimeout(WithAcks(context.Background(), AcksAll), offsetsAppendTimeout)
	defer cancel()
	go func() {
		select {
		case <-part.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := t.e.Append(ctx, OffsetsTopic, part.id, buf)
	if err == nil {
		return res.BaseOffset, nil
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// Not replicated in time (a follower of the in-sync set is down
		// until it leaves the set), or the leadership moved.
	case errors.Is(err, api.ErrNotEnoughReplicas):
		return 0, err
	case errors.Is(err, api.ErrStorageError), errors.Is(err, api.ErrPartitionFailed):
		return 0, api.WrapError(api.CodeStorageError, err, "store the commit in %s/%d", OffsetsTopic, part.id)
	}
	return 0, api.WrapError(api.CodeCoordinatorNotAvailable, err, "store the commit in %s/%d (it may or may not be stored; commit again)", OffsetsTopic, part.id)
}

// snapshot writes the state of part's groups as a snapshot at the start
// of a new segment and, once it is acknowledged, deletes the segments
// before it. part.write is held.
func (t *offsetsLog) snapshot(part *offsetsPart) error {
	_, p, err := t.e.partition(OffsetsTopic, part.id)
	if err != nil {
		return err
	}
	if _, err := p.roll(); err != nil {
		return err
	}
	n, err := t.partitions()
	if err != nil {
		return err
	}
	s := t.s
	recs := []offsetRecord{{Kind: kindSnapBegin}}
	s.mu.Lock()
	for _, g := range s.sortedGroups() {
		if OffsetsPartition(g, n) != part.id {
			continue
		}
		recs = append(recs, splitRecord(s.groupRecord(g, ""), s.maxRecord)...)
	}
	s.mu.Unlock()
	recs = append(recs, offsetRecord{Kind: kindSnapEnd})
	for i := range recs[1 : len(recs)-1] {
		recs[i+1].Kind = kindSnap
	}
	first := true
	var begin uint64
	limit := max(t.e.opts.MaxBatchBytes/2, s.maxRecord+1024)
	var b batch.Builder
	flush := func() error {
		if b.Len() == 0 {
			return nil
		}
		buf, err := b.Build()
		if err != nil {
			return err
		}
		b.Reset()
		off, err := t.append(part, buf)
		if err != nil {
			return err
		}
		if first {
			begin, first = off, false
		}
		return nil
	}
	now := t.e.opts.Now().UnixMilli()
	for _, rec := range recs {
		value, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if b.Len() > 0 && b.EstimatedSize()+len(value)+len(rec.Group)+64 > limit {
			if err := flush(); err != nil {
				return err
			}
		}
		b.Add([]byte(rec.Group), value, nil, now)
	}
	if err := flush(); err != nil {
		return err
	}
	part.since = 0
	deleted, err := p.log.DeleteSegmentsBefore(begin)
	if deleted > 0 {
		p.retentionMoved(p.log.LogStartOffset())
		t.e.log.Info("offsets partition compacted by snapshot", "partition", part.id, "snapshot_offset", begin, "segments_deleted", deleted, "log_start", p.log.LogStartOffset())
	}
	if err != nil {
		return storageError("delete segments below the offsets snapshot", err)
	}
	return nil
}

// groupRecord returns the offsets of group g, without those of topic skip
// (""), as one record sorted by topic and partition; s.mu is held.
func (s *offsetStore) groupRecord(g, skip string) offsetRecord {
	rec := offsetRecord{Group: g}
	for k, c := range s.groups[g] {
		if skip != "" && k.Topic == skip {
			continue
		}
		rec.Offsets = append(rec.Offsets, offsetEntry{Topic: k.Topic, Partition: k.Partition, Offset: c.Offset, Metadata: c.Metadata, ID: c.TopicID})
	}
	sort.Slice(rec.Offsets, func(i, j int) bool {
		a, b := rec.Offsets[i], rec.Offsets[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})
	return rec
}

// splitRecord splits rec into records whose JSON stays within maxRecord
// bytes (a record of one entry is never split: a commit over the limit is
// refused before it is stored).
func splitRecord(rec offsetRecord, maxRecord int) []offsetRecord {
	data, err := json.Marshal(rec)
	if err != nil || len(data) <= maxRecord || len(rec.Offsets) < 2 {
		return []offsetRecord{rec}
	}
	half := len(rec.Offsets) / 2
	first, second := rec, rec
	first.Offsets, second.Offsets = rec.Offsets[:half], rec.Offsets[half:]
	return append(splitRecord(first, maxRecord), splitRecord(second, maxRecord)...)
}

// groupServing returns nil when this engine serves group now: always on
// a single node; in a cluster, when it leads and has loaded the partition
// of OffsetsTopic that holds the group (COORDINATOR_NOT_AVAILABLE
// otherwise).
func (e *Engine) groupServing(group string) error {
	if t := e.offsets.topic; t != nil {
		_, err := t.serving(group)
		return err
	}
	return nil
}

// leadOffsets and resignOffsets follow the leadership of the partitions
// of OffsetsTopic (BecomeLeader, BecomeFollower).
func (e *Engine) leadOffsets(topic string, partition int, epoch uint32) {
	if t := e.offsets.topic; t != nil && topic == OffsetsTopic {
		t.lead(partition, epoch)
	}
}

func (e *Engine) resignOffsets(topic string, partition int) {
	if t := e.offsets.topic; t != nil && topic == OffsetsTopic {
		t.resign(partition)
	}
}

// LegacyGroupOffsets returns, on an engine opened with
// Options.Replication, the committed offsets that groups/offsets.log held
// at Open (those of a node that ran alone before it joined a cluster),
// by group, each sorted by topic and partition; nil when there are none.
// The cluster layer imports them into OffsetsTopic once
// (docs/cluster.md) and then calls RetireLegacyGroupOffsets.
func (e *Engine) LegacyGroupOffsets() map[string][]OffsetCommit {
	s := e.offsets
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topic == nil || len(s.legacy) == 0 {
		return nil
	}
	out := make(map[string][]OffsetCommit, len(s.legacy))
	for g, offs := range s.legacy {
		for k, c := range offs {
			out[g] = append(out[g], OffsetCommit{Topic: k.Topic, TopicID: c.TopicID, Partition: k.Partition, Offset: c.Offset, Metadata: c.Metadata})
		}
		slices.SortFunc(out[g], func(a, b OffsetCommit) int {
			if c := strings.Compare(a.Topic, b.Topic); c != 0 {
				return c
			}
			return a.Partition - b.Partition
		})
	}
	return out
}

// RetireLegacyGroupOffsets renames groups/offsets.log to
// offsets.log.imported-<Unix ms> (kept for the operator) once its offsets
// are imported, so that no later Open imports them again. It does
// nothing when there is nothing to retire. Errors: the file system's.
func (e *Engine) RetireLegacyGroupOffsets() error {
	s := e.offsets
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topic == nil || len(s.legacy) == 0 {
		return nil
	}
	path := s.dir + "/" + offsetsFile
	dst := fmt.Sprintf("%s.imported-%d", path, e.opts.Now().UnixMilli())
	if err := s.fs.Rename(path, dst); err != nil {
		return fmt.Errorf("engine: retire %s: %w", path, err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return fmt.Errorf("engine: retire %s: %w", path, err)
	}
	e.log.Info("the group offsets of this node's single-node log are imported; the file is kept renamed", "file", dst, "groups", len(s.legacy))
	s.legacy = nil
	return nil
}

// FollowLogStart deletes, on a follower, the sealed segments wholly below
// the leader's log start offset leaderStart (and below this replica's
// high watermark), as Kafka's followers follow the leader's log start
// (KIP-107): what the leader's retention or the offsets snapshot removed
// goes here too. An active segment that holds records below the cut is
// sealed first, so that it goes once the cut passes it. It returns how many segments it deleted. Errors:
// UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC, UNKNOWN_PARTITION, STORAGE_ERROR,
// INVALID_REQUEST without Options.Replication.
func (e *Engine) FollowLogStart(topic string, id api.TopicID, partition int, leaderStart uint64) (int, error) {
	p, r, err := e.replicated(topic, id, partition)
	if err != nil {
		return 0, err
	}
	cut := min(leaderStart, p.hw.Load())
	if !r.roleIs(roleFollower) || cut <= p.log.LogStartOffset() {
		return 0, nil
	}
	if segs := p.log.Segments(); segs[len(segs)-1].BaseOffset < cut {
		// The active segment holds records below the cut: seal it, so
		// that it goes once the leader's log start passes it again (one
		// roll each time the leader's log start moves into it).
		if _, err := p.roll(); err != nil {
			return 0, err
		}
	}
	deleted, err := p.log.DeleteSegmentsBefore(cut)
	if deleted > 0 {
		p.retentionMoved(p.log.LogStartOffset())
		p.logger.Info("segments below the leader's log start deleted", "segments", deleted, "leader_log_start", leaderStart, "log_start", p.log.LogStartOffset())
	}
	if err != nil && !errors.Is(err, segment.ErrClosed) {
		return deleted, storageError("follow the leader's log start", err)
	}
	return deleted, nil
}
