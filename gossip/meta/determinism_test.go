package meta

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

var seedFlag = flag.Uint64("meta.seed", 0, "seed of TestDeterminism (0: from the clock, printed)")

// gen makes random commands, valid and invalid, from a seeded generator,
// reading the state the commands so far produced.
type gen struct {
	r   *rand.Rand
	now int64
}

var genNodes = []string{"n1", "n2", "n3", "n4", "n5"}

func (g *gen) pick(s []string) string { return s[g.r.IntN(len(s))] }

func (g *gen) id() api.TopicID {
	var id api.TopicID
	for i := range id {
		id[i] = byte(g.r.Uint32())
	}
	return id
}

func (g *gen) alive() []string {
	var out []string
	for _, n := range genNodes {
		if g.r.IntN(4) > 0 {
			out = append(out, n)
		}
	}
	return out
}

// topic picks an existing topic (name order) or nil.
func (g *gen) topic(s *State) *Topic {
	ts := s.sortedTopics()
	if len(ts) == 0 || g.r.IntN(8) == 0 {
		return nil
	}
	return ts[g.r.IntN(len(ts))]
}

// target names an existing topic with its id, sometimes a wrong id or an
// unknown name.
func (g *gen) target(s *State) (string, api.TopicID, int) {
	t := g.topic(s)
	if t == nil {
		return fmt.Sprintf("t%d", g.r.IntN(6)), g.id(), 0
	}
	if g.r.IntN(10) == 0 {
		return t.Name, g.id(), len(t.Partitions)
	}
	return t.Name, t.ID, len(t.Partitions)
}

func (g *gen) command(s *State) Command {
	g.now++
	name, id, parts := g.target(s)
	if g.r.IntN(20) == 0 {
		return g.quotaCommand()
	}
	switch g.r.IntN(12) {
	case 0:
		n := g.pick(genNodes)
		return Command{Op: OpRegisterNode, Node: &Node{ID: n, DataAddr: fmt.Sprintf("%s:%d", n, g.r.IntN(3))}}
	case 1:
		n := g.pick(append(genNodes, "n9"))
		leaders, _ := LeadersForRemoval(s, n, alive(g.alive()...))
		return Command{Op: OpRemoveNode, NodeID: n, Leaders: leaders}
	case 2:
		cfg := engine.TopicConfig{ReplicationFactor: int32(g.r.IntN(4))}
		c, err := PrepareCreate(s, fmt.Sprintf("t%d", g.r.IntN(6)), g.id(), 1+g.r.IntN(8), cfg, g.alive(), g.now)
		if err != nil {
			return Command{Op: OpCreateTopic, Topic: newTopic(fmt.Sprintf("t%d", g.r.IntN(6)), byte(g.r.IntN(256)))}
		}
		return c
	case 3:
		return Command{Op: OpDeleteTopic, Name: name, ID: id}
	case 4:
		cfg := engine.TopicConfig{RetentionMs: int64(g.r.IntN(1000)), ReplicationFactor: int32(g.r.IntN(2))}
		return Command{Op: OpAlterTopic, Name: name, ID: id, Config: &cfg}
	case 5:
		c, err := PrepareCreatePartitions(s, name, parts+1+g.r.IntN(3), g.alive())
		if err != nil {
			return Command{Op: OpCreatePartitions, Name: name, ID: id, NewPartitions: []Partition{{Replicas: []string{g.pick(genNodes)}}}}
		}
		return c
	case 6:
		return Command{Op: OpSetLeaders, Leaders: LeadersAfterDeath(s, alive(g.alive()...))}
	case 7:
		return Command{Op: OpMarkData, Name: name, ID: id, Partition: g.r.IntN(parts + 1), NodeID: g.pick(append(genNodes, ""))}
	case 9:
		group := fmt.Sprintf("g%d", g.r.IntN(8))
		if g.r.IntN(4) == 0 {
			return Command{Op: OpUnassignGroup, Name: group, NodeID: g.pick(genNodes)}
		}
		if g.r.IntN(2) == 0 {
			return Command{Op: OpAssignGroup, Name: group, NodeID: ChooseCoordinator(s, group, alive(g.alive()...))}
		}
		return Command{Op: OpAssignGroup, Name: group, NodeID: g.pick(append(genNodes, "n9"))}
	case 10:
		if t := g.topic(s); t != nil && g.r.IntN(3) > 0 {
			// Mostly from the partition's current epoch, with a subset of
			// its replicas; sometimes an unclean-election topic.
			i := g.r.IntN(len(t.Partitions))
			p := t.Partitions[i]
			var isr []string
			for _, r := range p.Replicas {
				if r == p.Leader || g.r.IntN(2) == 0 {
					isr = append(isr, r)
				}
			}
			if g.r.IntN(5) == 0 {
				cfg := t.Config
				cfg.UncleanLeaderElection = !cfg.UncleanLeaderElection
				return Command{Op: OpAlterTopic, Name: t.Name, ID: t.ID, Config: &cfg}
			}
			return Command{Op: OpSetISR, Name: t.Name, ID: t.ID, Partition: i, Epoch: p.LeaderEpoch + uint32(g.r.IntN(2)), ISR: isr}
		}
		return Command{Op: OpSetISR, Name: name, ID: id, Partition: g.r.IntN(parts + 1), Epoch: uint32(g.r.IntN(3)), ISR: []string{g.pick(genNodes)}}
	case 8:
		return Command{Op: OpImport, Topics: []*Topic{newTopic(fmt.Sprintf("t%d", g.r.IntN(6)), byte(g.r.IntN(256)))}}
	case 11:
		switch n := g.pick(genNodes); g.r.IntN(3) {
		case 0:
			return Command{Op: OpDrainNode, NodeID: n, Shutdown: g.r.IntN(2) == 0, Leaders: LeadersForDrain(s, n, alive(g.alive()...))}
		case 1:
			return Command{Op: OpUndrainNode, NodeID: n}
		}
	}
	var changes []LeaderChange
	for range g.r.IntN(4) {
		changes = append(changes, LeaderChange{Topic: name, ID: id, Partition: g.r.IntN(parts + 1), Leader: g.pick(genNodes), Epoch: uint32(g.r.IntN(3))})
	}
	return Command{Op: OpSetLeaders, Leaders: changes}
}

// checkInvariants fails the test when s breaks a rule that Apply keeps.
func checkInvariants(t *testing.T, s *State) {
	t.Helper()
	if len(s.DeletedIDs) > MaxDeletedIDs {
		t.Fatalf("%d deleted ids", len(s.DeletedIDs))
	}
	for e, q := range s.Quotas {
		if e == "" || q.ProduceBytesPerSec < 0 || q.FetchBytesPerSec < 0 || q == (Quota{}) || len(s.Quotas) > MaxQuotas {
			t.Fatalf("quota %q: %+v", e, q)
		}
	}
	for group, n := range s.Groups {
		if _, ok := s.Nodes[n]; !ok {
			t.Fatalf("group %q coordinated by %q, not a node", group, n)
		}
	}
	for name, tp := range s.Topics {
		if tp.Name != name || len(tp.Partitions) < 1 {
			t.Fatalf("topic %q: %+v", name, tp)
		}
		for i, p := range tp.Partitions {
			for j, r := range p.Replicas {
				if _, ok := s.Nodes[r]; !ok || slices.Contains(p.Replicas[:j], r) {
					t.Fatalf("%s-%d: replicas %v (nodes %v)", name, i, p.Replicas, s.Nodes)
				}
			}
			if p.Leader != "" && !slices.Contains(p.Replicas, p.Leader) {
				t.Fatalf("%s-%d: leader %q not in %v", name, i, p.Leader, p.Replicas)
			}
			for _, r := range p.ISR {
				if !slices.Contains(p.Replicas, r) {
					t.Fatalf("%s-%d: isr %v not within %v", name, i, p.ISR, p.Replicas)
				}
			}
			if p.Leader != "" && !slices.Contains(p.ISR, p.Leader) {
				t.Fatalf("%s-%d: leader %q not in isr %v", name, i, p.Leader, p.ISR)
			}
		}
	}
}

// TestDeterminism applies one random command sequence (from a printed
// seed; replay with -meta.seed=N) to three states: a, directly; b, each
// command through Encode and Decode, and through a snapshot (Marshal,
// UnmarshalState) every 100 commands; and the generator's own. They end
// with the same Hash, and each command has the same Result on a and b.
func TestDeterminism(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -meta.seed=%d)", seed, seed)
	g := &gen{r: rand.New(rand.NewPCG(seed, 0x5eed))}
	gs := NewState()
	a, b := NewState(), NewState()
	applied, refused := 0, 0
	for i := range 3000 {
		c := g.command(gs)
		gs.Apply(c)
		ra := a.Apply(c)
		enc, err := Encode(c)
		if err != nil {
			t.Fatalf("seed %d step %d: encode %+v: %v", seed, i, c, err)
		}
		dc, err := Decode(enc)
		if err != nil {
			t.Fatalf("seed %d step %d: decode: %v", seed, i, err)
		}
		rb := b.Apply(dc)
		if !reflect.DeepEqual(ra, rb) {
			t.Fatalf("seed %d step %d: %s gave %+v and %+v", seed, i, c.Op, ra, rb)
		}
		if ra.Err == nil {
			applied++
		} else {
			refused++
		}
		checkInvariants(t, a)
		if i%100 == 99 {
			snap, err := b.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if b, err = UnmarshalState(snap); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, i, err)
			}
			if b.Hash() != a.Hash() {
				t.Fatalf("seed %d step %d: hash differs after a snapshot", seed, i)
			}
		}
	}
	if a.Hash() != b.Hash() || a.Hash() != gs.Hash() {
		t.Fatalf("seed %d: hashes differ: %s %s %s", seed, a.Hash(), b.Hash(), gs.Hash())
	}
	if applied < 300 || refused < 300 {
		t.Fatalf("seed %d: %d applied, %d refused: the generator does not exercise both", seed, applied, refused)
	}
	t.Logf("%d applied, %d refused, %d topics, %d nodes", applied, refused, len(a.Topics), len(a.Nodes))
}
