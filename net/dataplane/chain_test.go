package dataplane

import (
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestChainedPublishFailsAfterFailedPredecessor: on one connection, a
// publish marked chained fails, unwritten, with the error of the previous
// publish to the partition when that one failed (even if it was answered
// already); an unchained publish starts a new chain.
func TestChainedPublishFailsAfterFailedPredecessor(t *testing.T) {
	h := startServer(t, openEngine(t), Options{})
	c, _ := connect(t, h.addr)
	c.createTopic("t", 1)
	good := func(v string) []byte { return buildBatch(t, []byte(v)) }
	steps := []struct {
		name    string
		batch   []byte
		chained bool
		want    api.Code // 0: stored
		base    uint64
	}{
		{"corrupt", []byte("not a batch, long enough to be parsed as one"), false, api.CodeCorruptBatch, 0},
		{"chained after it", good("b"), true, api.CodeCorruptBatch, 0},
		{"chained after that", good("c"), true, api.CodeCorruptBatch, 0},
		{"new chain", good("d"), false, 0, 0},
		{"chained after d", good("e"), true, 0, 1},
		{"chained after e", good("f"), true, 0, 2},
	}
	ids := map[uint64]int{}
	for i, s := range steps {
		id := c.send(func(f api.Frame) error {
			if err := publishReq("t", 0, len(s.batch))(f); err != nil {
				return err
			}
			r, _ := f.PublishRequest()
			r.SetChained(s.chained)
			return nil
		}, s.batch)
		ids[id] = i
	}
	for range steps {
		r := c.recv()
		s := steps[ids[r.f.CorrelationId()]]
		expectWhich(t, r, api.Frame_Which_publishResponse)
		p, _ := r.f.PublishResponse()
		got := api.Code(0)
		if err := api.FromWire(mustWire(p.Error())); err != nil {
			got = wireErr(p.Error())
		}
		if got != s.want || (got == 0 && p.BaseOffset() != s.base) {
			t.Errorf("%s: code %v base %d, want code %v base %d", s.name, got, p.BaseOffset(), s.want, s.base)
		}
	}
}
