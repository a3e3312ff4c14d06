package meta

import (
	"slices"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// DefaultMinInsync is min.insync.replicas for a topic of replication
// factor rf that sets none: 2 when rf >= 3, else 1 (docs/cluster.md).
func DefaultMinInsync(rf int32) int32 {
	if rf >= 3 {
		return 2
	}
	return 1
}

// ResolveMinInsync returns cfg with a MinInsyncReplicas of 0 resolved to
// DefaultMinInsync(cfg.ReplicationFactor). Errors (INVALID_CONFIG): a
// negative value, or one above the replication factor.
func ResolveMinInsync(cfg engine.TopicConfig) (engine.TopicConfig, error) {
	switch m := cfg.MinInsyncReplicas; {
	case m == 0:
		cfg.MinInsyncReplicas = DefaultMinInsync(cfg.ReplicationFactor)
	case m < 0:
		return cfg, api.NewError(api.CodeInvalidConfig, "min.insync.replicas %d: want at least 1", m)
	case m > cfg.ReplicationFactor:
		return cfg, api.NewError(api.CodeInvalidConfig, "min.insync.replicas %d exceeds replication.factor %d", m, cfg.ReplicationFactor)
	}
	return cfg, nil
}

// MinInsync is the effective min.insync.replicas of a topic with cfg:
// MinInsyncReplicas, or DefaultMinInsync for 0 (a topic created before
// the setting existed, or imported), and never above the replication
// factor (at least 1).
func MinInsync(cfg engine.TopicConfig) int {
	m := cfg.MinInsyncReplicas
	if m <= 0 {
		m = DefaultMinInsync(cfg.ReplicationFactor)
	}
	if cfg.ReplicationFactor > 0 && m > cfg.ReplicationFactor {
		m = cfg.ReplicationFactor
	}
	return int(max(m, 1))
}

// checkMinInsync refuses a config whose min.insync.replicas is negative
// or above its replication factor (INVALID_CONFIG); 0 is accepted (it
// reads as DefaultMinInsync, see MinInsync): logs written before the
// setting hold it.
func checkMinInsync(topic string, cfg engine.TopicConfig) *api.Error {
	if m := cfg.MinInsyncReplicas; m < 0 || m > cfg.ReplicationFactor {
		return api.NewError(api.CodeInvalidConfig, "topic %q: min.insync.replicas %d out of range [1, replication.factor %d]", topic, m, cfg.ReplicationFactor)
	}
	return nil
}

// applySetISR replaces a partition's in-sync set, as OpSetISR says.
func (s *State) applySetISR(c Command) Result {
	t, err := s.lookup(c.Op, c.Name, c.ID)
	if err != nil {
		return Result{Err: err}
	}
	if c.Partition < 0 || c.Partition >= len(t.Partitions) {
		return refused(api.CodeInvalidRequest, "topic %q has no partition %d", c.Name, c.Partition)
	}
	p := &t.Partitions[c.Partition]
	switch {
	case c.Epoch < p.LeaderEpoch:
		return refused(api.CodeFencedLeaderEpoch, "set-isr of %s-%d at leader epoch %d: the partition is at epoch %d (leader %q)", c.Name, c.Partition, c.Epoch, p.LeaderEpoch, p.Leader)
	case c.Epoch > p.LeaderEpoch:
		return refused(api.CodeUnknownLeaderEpoch, "set-isr of %s-%d at leader epoch %d: the partition is at epoch %d", c.Name, c.Partition, c.Epoch, p.LeaderEpoch)
	case p.Leader == "":
		return refused(api.CodeInvalidRequest, "set-isr of %s-%d: the partition has no leader", c.Name, c.Partition)
	case !slices.Contains(c.ISR, p.Leader):
		return refused(api.CodeInvalidRequest, "set-isr of %s-%d: in-sync set %v does not hold the leader %q", c.Name, c.Partition, c.ISR, p.Leader)
	}
	for i, r := range c.ISR {
		if !slices.Contains(p.Replicas, r) || slices.Contains(c.ISR[:i], r) {
			return refused(api.CodeInvalidRequest, "set-isr of %s-%d: %q is not a replica (%v) or is listed twice", c.Name, c.Partition, r, p.Replicas)
		}
	}
	isr := make([]string, 0, len(c.ISR))
	for _, r := range p.Replicas {
		if s.ShuttingDown(r) && !slices.Contains(p.ISR, r) {
			continue // a node in controlled shutdown does not join (drain.go)
		}
		if slices.Contains(c.ISR, r) {
			isr = append(isr, r)
		}
	}
	p.ISR = isr
	return Result{}
}
