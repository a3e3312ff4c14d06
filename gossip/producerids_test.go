package gossip

import (
	"context"
	"sync"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/gossip/meta"
)

// TestBrokerInitProducerID: two nodes hand out ids from blocks the
// metadata log reserved for each, never the same id twice; a node
// proposes one block for many concurrent calls and a new one only when
// its block is used up; a failed proposal is returned and the next call
// proposes again.
func TestBrokerInitProducerID(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2")
	n1 := newTestNode(t, m, "n1", "", true)
	n2 := newTestNode(t, m, "n2", "", true)
	ctx := context.Background()
	var (
		mu   sync.Mutex
		seen = map[int64]string{}
		wg   sync.WaitGroup
	)
	take := func(node string, b *Broker, n int) {
		for range n {
			id, epoch, err := b.InitProducerID(ctx)
			if err != nil || epoch != 0 {
				t.Errorf("%s: InitProducerID = %d, %d, %v", node, id, epoch, err)
				return
			}
			mu.Lock()
			if prev, dup := seen[id]; dup {
				t.Errorf("id %d handed out by %s and %s", id, prev, node)
			}
			seen[id] = node
			mu.Unlock()
		}
	}
	for range 4 {
		wg.Go(func() { take("n1", n1.b, meta.ProducerIDBlock/4) })
	}
	wg.Go(func() { take("n2", n2.b, 10) })
	wg.Wait()
	if got := m.count(meta.OpAllocateProducerIDs); got != 2 {
		t.Fatalf("%d blocks reserved for one block's worth of ids per node, want 2", got)
	}
	if len(seen) != meta.ProducerIDBlock+10 {
		t.Fatalf("%d distinct ids", len(seen))
	}
	// n1's block is used up: the next call reserves a third block.
	id, _, err := n1.b.InitProducerID(ctx)
	if err != nil || id != 2*meta.ProducerIDBlock || m.count(meta.OpAllocateProducerIDs) != 3 {
		t.Fatalf("after the block: id %d, %v, %d blocks; want id %d from a third block", id, err, m.count(meta.OpAllocateProducerIDs), 2*meta.ProducerIDBlock)
	}
	if s := m.state0(); s.NextProducerID != 3*meta.ProducerIDBlock {
		t.Fatalf("NextProducerID %d", s.NextProducerID)
	}
	// A node restarted (a new Broker) does not reuse its old block.
	m.mu.Lock()
	m.proposeErr = api.NewError(api.CodeNoQuorum, "no quorum")
	m.mu.Unlock()
	n3 := newTestNode(t, m, "n2", "", true)
	if _, _, err := n3.b.InitProducerID(ctx); codeOf(err) != api.CodeNoQuorum {
		t.Fatalf("without quorum: %v, want NO_QUORUM", err)
	}
	m.mu.Lock()
	m.proposeErr = nil
	m.mu.Unlock()
	if id, _, err := n3.b.InitProducerID(ctx); err != nil || id != 3*meta.ProducerIDBlock {
		t.Fatalf("restarted node: %d, %v; want %d (a new block)", id, err, 3*meta.ProducerIDBlock)
	}
}
