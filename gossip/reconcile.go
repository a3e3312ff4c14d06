package gossip

import (
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

// ReconcilerOptions configure a Reconciler.
type ReconcilerOptions struct {
	// NodeID is this node's id (--node-id): the leader and only replica
	// of the topics LocalTopics reports.
	NodeID string
	// Logger receives the reconciler's log lines (default slog.Default()).
	Logger *slog.Logger
	// RetryInterval is the time between two attempts at the topics whose
	// last reconcile failed (default 1 s).
	RetryInterval time.Duration
}

// Reconciler makes a node's storage match the cluster metadata
// (docs/cluster.md). Its OnApply hook, called by the cluster runtime after
// every applied command and after a snapshot restore, compares the
// storage's topics with the State and:
//
//   - creates a topic of the metadata the storage lacks, with the
//     metadata's id, creation time and config (Storage.CreateTopicSpec);
//   - deletes a local topic whose id is in State.DeletedIDs (deleted in
//     the cluster, also while this node was away; a topic deleted and
//     created again has its old id there, so the old copy goes and the new
//     one is created);
//   - changes the config of a topic whose config differs (the replication
//     factor aside: the engine keeps what it was given) and adds the
//     partitions the storage lacks.
//
// A local topic the metadata does not know, and whose id is not listed as
// deleted (an orphaned topic), is left alone, logged once and listed by
// Orphaned: it may be newer than a snapshot being restored, or hold data
// from before the node joined. A failed step
// is logged and its topic marked pending (Pending): a background loop
// (Start) retries the pending topics every RetryInterval until they
// match. Methods are safe for concurrent use.
type Reconciler struct {
	s    Storage
	opts ReconcilerOptions
	log  *slog.Logger

	mu sync.Mutex // one pass at a time; guards the maps below
	// latest is the newest State given to OnApply; a pass always reads it
	// under mu, so a retry never applies a State older than one applied.
	latest atomic.Pointer[meta.State]
	// pending holds the names of the topics whose last pass failed, with
	// the error text last logged for each.
	pending  atomic.Pointer[map[string]string]
	unknown  map[api.TopicID]bool     // local topics unknown to the metadata, logged
	orphans  atomic.Pointer[[]string] // names of the local topics unknown to the metadata at the last pass, sorted
	synced   atomic.Bool              // a pass ran
	shrunken map[api.TopicID]bool     // local topics with more partitions than the metadata, logged

	stop      chan struct{}
	done      chan struct{}
	startOnce sync.Once
	closeOnce sync.Once
}

// NewReconciler returns a Reconciler of s. Call Start to run its retry
// loop and Close to stop it.
func NewReconciler(s Storage, o ReconcilerOptions) *Reconciler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = time.Second
	}
	r := &Reconciler{s: s, opts: o, log: o.Logger, unknown: map[api.TopicID]bool{}, shrunken: map[api.TopicID]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	r.pending.Store(&map[string]string{})
	return r
}

// Start runs the retry loop until Close. Calling it again does nothing.
func (r *Reconciler) Start() {
	r.startOnce.Do(func() { go r.loop() })
}

// Close stops the retry loop and waits for it. It returns nil.
func (r *Reconciler) Close() error {
	r.closeOnce.Do(func() {
		close(r.stop)
		started := true
		r.startOnce.Do(func() { started = false })
		if started {
			<-r.done
		}
	})
	return nil
}

func (r *Reconciler) loop() {
	defer close(r.done)
	t := time.NewTicker(r.opts.RetryInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		if len(*r.pending.Load()) > 0 {
			r.sync()
		}
	}
}

// Pending reports whether the last pass failed for topic name: the
// storage may not hold the metadata's topic, config or partitions.
func (r *Reconciler) Pending(name string) bool {
	_, ok := (*r.pending.Load())[name]
	return ok
}

// OnApply is the cluster runtime's hook (prev is nil after a snapshot
// restore): when a topic changed between prev and next, or a topic is
// pending, it makes the storage match next before returning.
func (r *Reconciler) OnApply(prev, next *meta.State) {
	r.latest.Store(next)
	if prev != nil && sameTopics(prev, next) && len(*r.pending.Load()) == 0 && r.synced.Load() {
		return
	}
	r.sync()
}

// Orphaned returns the names of the storage's topics that the metadata
// does not know (orphaned topics), sorted, as the last pass found them;
// nil before the first pass.
func (r *Reconciler) Orphaned() []string {
	if p := r.orphans.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// sameTopics reports whether a and b hold the same topics with the same
// ids, configs and partition counts: what the storage mirrors.
func sameTopics(a, b *meta.State) bool {
	if len(a.Topics) != len(b.Topics) {
		return false
	}
	for name, x := range a.Topics {
		y := b.Topics[name]
		if y == nil || x.ID != y.ID || x.Config != y.Config || len(x.Partitions) != len(y.Partitions) {
			return false
		}
	}
	return true
}

// sync runs one pass against the latest State.
func (r *Reconciler) sync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.latest.Load()
	if s == nil {
		return
	}
	r.synced.Store(true)
	old := *r.pending.Load()
	failed := map[string]string{}
	fail := func(name, what string, err error) {
		text := what + ": " + err.Error()
		if old[name] != text {
			r.log.Warn("cluster metadata: the local copy of a topic could not be updated; retrying", "topic", name, "step", what, "err", err)
		}
		failed[name] = text
	}
	have := r.removeStale(s, fail)
	names := make([]string, 0, len(s.Topics))
	for name := range s.Topics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, bad := failed[name]; !bad {
			r.syncTopic(s.Topics[name], have, fail)
		}
	}
	for name := range old {
		if _, bad := failed[name]; !bad {
			r.log.Info("cluster metadata: the local copy of a topic is up to date again", "topic", name)
		}
	}
	r.pending.Store(&failed)
}

// removeStale deletes the local topics whose id the metadata lists as
// deleted, logs those it does not know (once) and records them for
// Orphaned, and returns the local topics
// whose id is the metadata's, by name.
func (r *Reconciler) removeStale(s *meta.State, fail func(name, what string, err error)) map[string]engine.TopicInfo {
	have := map[string]engine.TopicInfo{}
	orphans := []string{}
	defer func() {
		sort.Strings(orphans)
		r.orphans.Store(&orphans)
	}()
	for _, lt := range r.s.ListTopics() {
		mt := s.Topics[lt.Name]
		switch {
		case mt != nil && mt.ID == lt.ID:
			have[lt.Name] = lt
		case slices.Contains(s.DeletedIDs, lt.ID):
			if err := r.s.DeleteTopic(lt.Name); err != nil {
				fail(lt.Name, "delete the copy of a deleted topic", err)
				continue
			}
			r.log.Info("cluster metadata: deleted the local copy of a deleted topic", "topic", lt.Name, "topic_id", lt.ID)
		default:
			if mt != nil {
				// The name is the metadata's, with another id: its topic
				// cannot be created here while this one stays.
				fail(lt.Name, "create", api.NewError(api.CodeTopicExists,
					"a local topic %q with id %s, unknown to the cluster metadata, holds the name of the cluster's topic %s", lt.Name, lt.ID, mt.ID))
			}
			orphans = append(orphans, lt.Name)
			if !r.unknown[lt.ID] {
				r.unknown[lt.ID] = true
				r.log.Warn("cluster metadata: an orphaned topic (in this node's data directory, unknown to the cluster metadata) is kept but not served; sq cluster info lists it, docs/cluster.md says what to do",
					"topic", lt.Name, "topic_id", lt.ID)
			}
		}
	}
	return have
}

// syncTopic creates mt locally, or brings the local copy's config and
// partition count to mt's.
func (r *Reconciler) syncTopic(mt *meta.Topic, have map[string]engine.TopicInfo, fail func(name, what string, err error)) {
	lt, ok := have[mt.Name]
	if !ok {
		_, err := r.s.CreateTopicSpec(engine.TopicSpec{Name: mt.Name, ID: mt.ID, Partitions: len(mt.Partitions), Config: mt.Config, CreatedMs: mt.CreatedMs})
		if err != nil {
			fail(mt.Name, "create", err)
			return
		}
		r.log.Info("cluster metadata: created the local copy of a topic", "topic", mt.Name, "topic_id", mt.ID, "partitions", len(mt.Partitions))
		return
	}
	// The replication settings are the cluster layer's (the Replicator
	// passes min.insync.replicas to the engine with the partition's
	// leadership); the engine keeps what it was created with.
	want, got := localConfig(mt.Config), localConfig(lt.Config)
	if want != got {
		c := mt.Config
		change := engine.TopicConfigChange{SyncPolicy: &c.SyncPolicy, SegmentBytes: &c.SegmentBytes, RetentionBytes: &c.RetentionBytes,
			RetentionMs: &c.RetentionMs, MaxRecordBytes: &c.MaxRecordBytes, SegmentMs: &c.SegmentMs,
			LocalRetentionMs: &c.LocalRetentionMs, LocalRetentionBytes: &c.LocalRetentionBytes}
		if _, err := r.s.AlterTopicConfig(mt.Name, change); err != nil {
			fail(mt.Name, "change the config", err)
			return
		}
	}
	switch n := len(mt.Partitions); {
	case lt.PartitionCount < n:
		if _, err := r.s.CreatePartitions(mt.Name, n); err != nil {
			fail(mt.Name, "add partitions", err)
			return
		}
		r.log.Info("cluster metadata: added partitions to the local copy of a topic", "topic", mt.Name, "partitions", n)
	case lt.PartitionCount > n && !r.shrunken[mt.ID]:
		// A snapshot being restored may be older than the storage; the log
		// that follows grows the topic again.
		r.shrunken[mt.ID] = true
		r.log.Warn("cluster metadata: the local copy of a topic has more partitions than the metadata; kept", "topic", mt.Name, "local", lt.PartitionCount, "metadata", n)
	}
}

// localConfig is cfg without the settings the storage does not apply
// itself: replication.factor, min.insync.replicas and
// unclean.leader.election.enable.
func localConfig(cfg engine.TopicConfig) engine.TopicConfig {
	cfg.ReplicationFactor, cfg.MinInsyncReplicas, cfg.UncleanLeaderElection = 0, 0, false
	return cfg
}

// LocalTopics lists the storage's topics as metadata topics, for the
// one-time import of a node that bootstraps a cluster: this node is the
// leader and only replica of every partition, a replication factor of 0
// reads as 1 (and min.insync.replicas is 1), and a partition holds data when its log end offset is above
// 0 (records were appended, even if retention removed them since).
func (r *Reconciler) LocalTopics() []*meta.Topic {
	var out []*meta.Topic
	self := r.opts.NodeID
	for _, lt := range r.s.ListTopics() {
		d, err := r.s.DescribeTopic(lt.Name)
		if err != nil {
			r.log.Warn("cluster import: a local topic could not be described; not imported", "topic", lt.Name, "err", err)
			continue
		}
		t := &meta.Topic{Name: d.Name, ID: d.ID, Config: d.Config, CreatedMs: d.CreatedMs, Partitions: make([]meta.Partition, len(d.Partitions))}
		if t.Config.ReplicationFactor == 0 {
			t.Config.ReplicationFactor = 1
		}
		// One replica: min.insync.replicas is 1 whatever the node had.
		t.Config.MinInsyncReplicas = meta.DefaultMinInsync(t.Config.ReplicationFactor)
		for i, p := range d.Partitions {
			t.Partitions[i] = meta.Partition{Replicas: []string{self}, Leader: self, ISR: []string{self}, HasData: p.LogEndOffset > 0}
		}
		out = append(out, t)
	}
	return out
}
