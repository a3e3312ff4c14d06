package meta

import (
	"fmt"
	"slices"
	"strings"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// Apply applies c to s, mutating s (callers apply to a Clone and publish
// it). It depends on s and c alone, so every node that applies the same
// commands in the same order holds the same State (same Hash). A refused
// command changes nothing and returns its catalog error in Result.Err:
// TOPIC_EXISTS, UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID, INVALID_TOPIC_NAME,
// INVALID_CONFIG, INVALID_REQUEST or NOT_LEADER; the rules of each Op are
// in doc.go.
func (s *State) Apply(c Command) Result {
	if s.Nodes == nil {
		s.Nodes = map[string]Node{}
	}
	if s.Topics == nil {
		s.Topics = map[string]*Topic{}
	}
	switch c.Op {
	case OpRegisterNode:
		return s.applyRegisterNode(c)
	case OpRemoveNode:
		return s.applyRemoveNode(c)
	case OpCreateTopic:
		return s.applyCreateTopic(c)
	case OpDeleteTopic:
		return s.applyDeleteTopic(c)
	case OpAlterTopic:
		return s.applyAlterTopic(c)
	case OpCreatePartitions:
		return s.applyCreatePartitions(c)
	case OpSetLeaders:
		return s.applySetLeaders(c)
	case OpMarkData:
		return s.applyMarkData(c)
	case OpImport:
		return s.applyImport(c)
	case OpAssignGroup:
		return s.applyAssignGroup(c)
	case OpUnassignGroup:
		return s.applyUnassignGroup(c)
	case OpSetISR:
		return s.applySetISR(c)
	case OpAllocateProducerIDs:
		return s.applyAllocateProducerIDs(c)
	case OpDrainNode:
		return s.applyDrainNode(c)
	case OpUndrainNode:
		return s.applyUndrainNode(c)
	case OpSetQuota:
		return s.applySetQuota(c)
	case OpRemoveQuota:
		return s.applyRemoveQuota(c)
	case OpCreateACLs:
		return s.applyCreateACLs(c)
	case OpDeleteACLs:
		return s.applyDeleteACLs(c)
	case OpUpsertUser:
		return s.applyUpsertUser(c)
	case OpDeleteUser:
		return s.applyDeleteUser(c)
	}
	return refused(api.CodeInvalidRequest, "unknown metadata op %q", c.Op)
}

func (s *State) applyRegisterNode(c Command) Result {
	if c.Node == nil || c.Node.ID == "" {
		return refused(api.CodeInvalidRequest, "register-node without a node id")
	}
	if r, ok := s.RemovedDataDir(c.Node.DataDirID); ok {
		return refused(api.CodeInvalidRequest, "node %q cannot register: its data directory (id %s) belongs to node %q, which was removed from the cluster; start the node on an empty --data-dir to add it again", c.Node.ID, r.DataDirID, r.ID)
	}
	if old, ok := s.Nodes[c.Node.ID]; ok && old.DataDirID != "" && old.DataDirID != c.Node.DataDirID {
		return refused(api.CodeInvalidRequest, "node %q cannot register: it is registered with another data directory (id %s, not %s), which holds its partitions' records", c.Node.ID, old.DataDirID, c.Node.DataDirID)
	}
	s.Nodes[c.Node.ID] = *c.Node
	s.clearDrain(c.Node.ID, false) // a restart ends a shutdown drain
	return Result{}
}

func (s *State) applyCreateTopic(c Command) Result {
	if c.Topic == nil {
		return refused(api.CodeInvalidRequest, "create-topic without a topic")
	}
	if _, ok := s.Topics[c.Topic.Name]; ok {
		return refused(api.CodeTopicExists, "topic %q already exists", c.Topic.Name)
	}
	if err := s.validateTopic(c.Topic); err != nil {
		return Result{Err: err}
	}
	t := c.Topic.Clone()
	s.Topics[t.Name] = t
	return Result{Topic: t.Clone()}
}

func (s *State) applyDeleteTopic(c Command) Result {
	t, err := s.lookup(c.Op, c.Name, c.ID)
	if err != nil {
		return Result{Err: err}
	}
	delete(s.Topics, t.Name)
	s.DeletedIDs = append(s.DeletedIDs, t.ID)
	if n := len(s.DeletedIDs); n > MaxDeletedIDs {
		s.DeletedIDs = slices.Clone(s.DeletedIDs[n-MaxDeletedIDs:])
	}
	return Result{}
}

func (s *State) applyAlterTopic(c Command) Result {
	t, err := s.lookup(c.Op, c.Name, c.ID)
	if err != nil {
		return Result{Err: err}
	}
	if c.Config == nil {
		return refused(api.CodeInvalidRequest, "alter-topic of %q without a config", c.Name)
	}
	cfg := *c.Config
	switch rf := cfg.ReplicationFactor; {
	case rf == 0:
		cfg.ReplicationFactor = t.Config.ReplicationFactor
	case rf != t.Config.ReplicationFactor:
		return refused(api.CodeInvalidConfig, "topic %q: replication.factor is %d and cannot be altered", c.Name, t.Config.ReplicationFactor)
	}
	if err := checkMinInsync(c.Name, cfg); err != nil {
		return Result{Err: err}
	}
	t.Config = cfg
	return Result{Topic: t.Clone()}
}

func (s *State) applyCreatePartitions(c Command) Result {
	t, err := s.lookup(c.Op, c.Name, c.ID)
	if err != nil {
		return Result{Err: err}
	}
	if len(c.NewPartitions) == 0 {
		return refused(api.CodeInvalidRequest, "create-partitions of %q without partitions", c.Name)
	}
	cur := len(t.Partitions)
	if total := cur + len(c.NewPartitions); total > engine.MaxPartitions {
		return refused(api.CodeInvalidConfig, "topic %q has %d partitions; the new total %d is above the maximum %d partitions of a topic", c.Name, cur, total, engine.MaxPartitions)
	}
	for i, p := range c.NewPartitions {
		if err := s.validatePartition(c.Name, cur+i, p, int(t.Config.ReplicationFactor)); err != nil {
			return Result{Err: err}
		}
	}
	for _, p := range c.NewPartitions {
		t.Partitions = append(t.Partitions, p.Clone())
	}
	return Result{Topic: t.Clone()}
}

func (s *State) applyMarkData(c Command) Result {
	t, err := s.lookup(c.Op, c.Name, c.ID)
	if err != nil {
		return Result{Err: err}
	}
	if c.Partition < 0 || c.Partition >= len(t.Partitions) {
		return refused(api.CodeInvalidRequest, "topic %q has no partition %d", c.Name, c.Partition)
	}
	p := &t.Partitions[c.Partition]
	if c.NodeID != "" && p.Leader != c.NodeID {
		e := api.NewError(api.CodeNotLeader, "node %q does not lead partition %s-%d", c.NodeID, c.Name, c.Partition)
		e.LeaderID = p.Leader
		if n, ok := s.Nodes[p.Leader]; ok {
			e.LeaderAddr = n.DataAddr
		}
		return Result{Err: e}
	}
	p.HasData = true
	return Result{}
}

// applySetLeaders checks every change first (an unknown topic or a
// partition out of range refuses the whole command), then applies each
// with setLeader.
func (s *State) applySetLeaders(c Command) Result {
	for _, ch := range c.Leaders {
		if err := s.validateChange(c.Op, ch); err != nil {
			return Result{Err: err}
		}
	}
	moved := 0
	for _, ch := range c.Leaders {
		if s.setLeader(ch) {
			moved++
		}
	}
	return Result{Moved: moved}
}

// setLeader applies one validated change and reports whether the leader
// changed. It skips a stale change (the epoch moved since it was
// decided), a leader that is not a replica, a change to the current
// leader (but a Restart, which bumps its epoch and nothing else), and, for a partition that holds data, a leader outside the ISR
// unless the topic allows unclean leader election. The leader epoch is
// bumped; the new leader joins the ISR (a partition without data is in
// sync on every replica) and the old one leaves it unless that would
// empty it; after an unclean election the ISR is the new leader alone.
func (s *State) setLeader(ch LeaderChange) bool {
	t := s.Topics[ch.Topic]
	p := &t.Partitions[ch.Partition]
	switch {
	case p.LeaderEpoch != ch.Epoch:
		return false
	case ch.Restart:
		// Only the current leader's restart bumps its epoch.
		if ch.Leader == "" || p.Leader != ch.Leader {
			return false
		}
		p.LeaderEpoch++
		return true
	case p.Leader == ch.Leader:
		return false
	case ch.Leader != "" && !slices.Contains(p.Replicas, ch.Leader):
		return false
	}
	unclean := ch.Leader != "" && p.HasData && !slices.Contains(p.ISR, ch.Leader)
	if unclean && !t.Config.UncleanLeaderElection {
		return false
	}
	changeLeader(p, ch.Leader, unclean)
	return true
}

// changeLeader makes next (possibly "") the leader of p with the next
// epoch: next joins the ISR, then the old leader leaves it unless that
// would empty it; unclean makes the ISR next alone.
func changeLeader(p *Partition, next string, unclean bool) {
	if unclean {
		p.ISR = []string{next}
	} else {
		if next != "" && !slices.Contains(p.ISR, next) {
			p.ISR = append(p.ISR, next)
		}
		if old := p.Leader; old != "" && slices.Contains(p.ISR, old) && len(p.ISR) > 1 {
			p.ISR = without(p.ISR, old)
		}
	}
	p.Leader = next
	p.LeaderEpoch++
}

func (s *State) applyImport(c Command) Result {
	if s.Imported {
		return refused(api.CodeInvalidRequest, "the pre-cluster topics were already imported")
	}
	staged := s.Clone()
	for _, in := range c.Topics {
		if in == nil {
			return refused(api.CodeInvalidRequest, "import of a nil topic")
		}
		if _, ok := staged.Topics[in.Name]; ok {
			return refused(api.CodeTopicExists, "topic %q already exists", in.Name)
		}
		t := in.Clone()
		if t.Config.ReplicationFactor == 0 && len(t.Partitions) > 0 {
			t.Config.ReplicationFactor = int32(len(t.Partitions[0].Replicas))
		}
		if err := staged.validateTopic(t); err != nil {
			return Result{Err: err}
		}
		staged.Topics[t.Name] = t
	}
	var r Result
	for _, in := range c.Topics {
		t := staged.Topics[in.Name]
		s.Topics[t.Name] = t
		if len(c.Topics) == 1 {
			r.Topic = t.Clone()
		}
	}
	s.Imported = true
	return r
}

// partitionNames formats up to 10 partitions as "topic-p" for an error
// message, with a count of the rest.
func partitionNames(ps []string) string {
	if len(ps) <= 10 {
		return strings.Join(ps, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ps[:10], ", "), len(ps)-10)
}
