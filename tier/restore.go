package tier

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// RestorePlan is what a bucket holds of one topic: its id, its partition
// count (one above the highest partition with objects) and, per
// partition, the offset after its remote log (0 for a partition without
// a manifest): where its local log starts when the topic is restored.
type RestorePlan struct {
	Topic      string
	TopicID    api.TopicID
	Partitions int
	// Config is the topic's config from its TopicObject; HasConfig is
	// false when the bucket has none (a topic uploaded before it existed,
	// or whose object is damaged).
	Config    engine.TopicConfig
	HasConfig bool
	Ends      []uint64
	// Manifests are the partitions' latest manifests (nil where none).
	Manifests []*Manifest
}

// ErrNoRemoteTopic is returned by Discover when the bucket holds no
// object of the topic.
var ErrNoRemoteTopic = fmt.Errorf("tier: no remote log of the topic")

// ErrAmbiguousTopic is returned by Discover when the bucket holds several
// topics of the name (one deleted and created again) and no id says
// which.
var ErrAmbiguousTopic = fmt.Errorf("tier: several topics of that name")

// Discover lists the bucket's objects of topic (under "<topic>/") and
// returns its RestorePlan: the topic with id (zero: the only topic id
// found), its partitions and each one's latest valid manifest
// (LatestManifest). Errors: ErrNoRemoteTopic, ErrAmbiguousTopic naming the
// ids, or the store's and LatestManifest's.
func Discover(ctx context.Context, s ObjectStore, topic string, id api.TopicID) (RestorePlan, error) {
	plan := RestorePlan{Topic: topic}
	if err := (Partition{Topic: topic, TopicID: api.NewTopicID()}).Validate(); err != nil {
		return plan, err
	}
	objs, err := s.List(ctx, topic+"/")
	if err != nil {
		return plan, fmt.Errorf("tier: list the objects of topic %s: %w", topic, err)
	}
	parts := map[api.TopicID]int{} // id -> partitions (highest + 1)
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, topic+"/")
		f := strings.SplitN(rest, "/", 3)
		if len(f) < 2 {
			continue
		}
		tid, err := api.ParseTopicID(f[0])
		if err != nil {
			continue
		}
		if len(f) == 2 {
			if f[1] == "topic.json" {
				parts[tid] = max(parts[tid], 0) // the topic exists
			}
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 {
			continue
		}
		parts[tid] = max(parts[tid], n+1)
	}
	if len(parts) == 0 {
		return plan, fmt.Errorf("%w %s in the bucket", ErrNoRemoteTopic, topic)
	}
	if id.IsZero() {
		if len(parts) > 1 {
			ids := make([]string, 0, len(parts))
			for tid := range parts {
				ids = append(ids, tid.String())
			}
			sort.Strings(ids)
			return plan, fmt.Errorf("%w %s in the bucket, ids %s: name the one to restore", ErrAmbiguousTopic, topic, strings.Join(ids, ", "))
		}
		for tid := range parts {
			id = tid
		}
	}
	n, ok := parts[id]
	if !ok {
		return plan, fmt.Errorf("%w %s with id %s in the bucket", ErrNoRemoteTopic, topic, id)
	}
	// The topic object counts the partitions that never uploaded too.
	if to, err := ReadTopicObject(ctx, s, topic, id); err == nil {
		n = max(n, to.Partitions)
		plan.Config, plan.HasConfig = to.Config, true
	} else if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorrupt) {
		return plan, err
	}
	if n == 0 {
		return plan, fmt.Errorf("%w %s with id %s in the bucket (no partition objects)", ErrNoRemoteTopic, topic, id)
	}
	plan.TopicID, plan.Partitions = id, n
	plan.Ends, plan.Manifests = make([]uint64, n), make([]*Manifest, n)
	for i := range n {
		p := Partition{Topic: topic, TopicID: id, Partition: i}
		scan, err := LatestManifest(ctx, s, p)
		if err != nil {
			return plan, err
		}
		plan.Manifests[i] = scan.Manifest
		plan.Ends[i] = manifestEnd(scan.Manifest)
	}
	return plan, nil
}

// Refresh reads the latest manifest of a partition now, rather than at
// the next pass (a topic just restored).
func (a *Archiver) Refresh(ctx context.Context, p Partition) error {
	st := a.state(p)
	st.mu.Lock()
	defer st.mu.Unlock()
	return a.load(ctx, p, st, a.o.Now())
}
