package tier_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/tier"
)

// roleStorage is a node's view of an engine's partitions with the
// leadership set by the test: Leader and LeaderEpoch replace the engine's.
type roleStorage struct {
	e      *engine.Engine
	leader bool
	epoch  uint32
}

func (r *roleStorage) TieredPartitions() []engine.TieredPartition {
	parts := r.e.TieredPartitions()
	for i := range parts {
		parts[i].Leader, parts[i].LeaderEpoch = r.leader, r.epoch
	}
	return parts
}

// segmentPuts counts the Puts of segment objects (not manifests).
type segmentPuts struct {
	tier.ObjectStore
	mu   sync.Mutex
	keys []string
}

func (s *segmentPuts) Put(ctx context.Context, key string, body io.ReaderAt, size int64, o tier.PutOptions) (tier.ObjectInfo, error) {
	if !strings.Contains(key, "/manifest-") {
		s.mu.Lock()
		s.keys = append(s.keys, key)
		s.mu.Unlock()
	}
	return s.ObjectStore.Put(ctx, key, body, size, o)
}

// TestArchiverNewLeaderReadsManifest: a follower whose manifest is older
// than the leader's uploads (it reads it only every FollowerRefresh) and
// then takes the lead reads the latest manifest before it uploads: it
// uploads none of the segments the previous leader did, and the bucket
// keeps one chain of consecutive manifest versions.
func TestArchiverNewLeaderReadsManifest(t *testing.T) {
	e, p := tieredEngine(t, engine.TopicConfig{})
	fill(t, e, 60) // 3 sealed 16 KiB segments
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mem := &tier.MemStore{}
	ctx := context.Background()
	// Node B follows: its first pass reads the manifest, none yet.
	bRole := &roleStorage{e: e}
	bStore := &segmentPuts{ObjectStore: mem}
	b, _ := tier.NewArchiver(tier.ArchiverOptions{Store: bStore, Storage: bRole, Logger: quiet})
	b.Pass(ctx)
	// Node A leads (epoch 0) and uploads them: versions 1 to 3, the
	// oldest deleted as each new one is written.
	a, _ := tier.NewArchiver(tier.ArchiverOptions{Store: mem, Storage: &roleStorage{e: e, leader: true}, Logger: quiet})
	a.Pass(ctx)
	ma := a.Manifest("t", p.TopicID, 0)
	if ma == nil || len(ma.Segments) < 3 {
		t.Fatalf("the first leader's manifest: %+v", ma)
	}
	// A dies; B takes the lead (epoch 1) within its follower refresh.
	bRole.leader, bRole.epoch = true, 1
	b.Pass(ctx)
	if len(bStore.keys) != 0 {
		t.Fatalf("the new leader uploaded again %v", bStore.keys)
	}
	if mb := b.Manifest("t", p.TopicID, 0); mb == nil || mb.Version != ma.Version {
		t.Fatalf("the new leader's manifest %+v, want version %d", mb, ma.Version)
	}
	// New segments go on the chain under epoch 1.
	fill(t, e, 40)
	b.Pass(ctx)
	mb := b.Manifest("t", p.TopicID, 0)
	if mb.Version <= ma.Version || mb.LeaderEpoch != 1 || len(mb.Segments) <= len(ma.Segments) {
		t.Fatalf("after new segments: version %d epoch %d, %d segments", mb.Version, mb.LeaderEpoch, len(mb.Segments))
	}
	objs, err := mem.List(ctx, p.ManifestListPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var prev uint64
	for i, o := range objs {
		v, _ := p.ParseManifestKey(o.Key)
		if i > 0 && v != prev+1 {
			t.Fatalf("manifest versions stored are not consecutive: %d after %d", v, prev)
		}
		prev = v
	}
	if prev != mb.Version {
		t.Fatalf("latest stored version %d, the leader's %d", prev, mb.Version)
	}
}
