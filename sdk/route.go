package sdk

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/seedqueue/sq/api"
)

// Routing of the client core (docs/architecture.md §4.1): every request
// about a partition goes to the partition's leader as the core knows it.
// The core learns leaders from metadata answers (placement) and from
// NOT_LEADER answers that name the leader (follow); a leader learned
// either way never gives way to metadata of an older leader epoch
// (mergeLeaders), so a lagging node's metadata cannot send a producer
// back to a former leader.

// placement builds a topic's metadata from a metadata answer: t (with
// its partitions' placement, when stated), the node that answered (self,
// which leads the partitions the answer places nowhere) and the brokers
// it listed, whose address on the core's plane addrOf gives. Without
// brokers, self leads every partition, as a server that predates
// clustering does. A partition whose leader is named but not listed
// goes to the bootstrap connection, which answers for it
// (LEADER_NOT_AVAILABLE or NOT_LEADER).
func placement(t TopicInfo, self leaderAddr, brokers []api.Node, addrOf func(api.Node) string) topicMeta {
	m := topicMeta{id: t.ID, partitions: t.Partitions, leaders: make([]leaderAddr, t.Partitions), maxRecord: int(t.Config.MaxRecordBytes)}
	for i := range m.leaders {
		m.leaders[i] = self
	}
	if len(brokers) == 0 {
		return m
	}
	m.brokers = make(map[string]string, len(brokers))
	for _, n := range brokers {
		m.brokers[n.ID] = addrOf(n)
	}
	for _, pi := range t.PartitionInfos {
		if pi.Partition >= t.Partitions || pi.Leader == "" {
			continue
		}
		addr, ok := m.brokers[pi.Leader]
		if !ok {
			m.leaders[pi.Partition] = leaderAddr{epoch: pi.LeaderEpoch}
			continue
		}
		m.leaders[pi.Partition] = leaderAddr{nodeID: pi.Leader, addr: addr, epoch: pi.LeaderEpoch}
	}
	return m
}

// mergeLeaders returns next, the leaders of a new metadata answer about
// the same topic id, with each partition whose leader in prev is newer
// kept from prev: a leader of a higher epoch, or one a NOT_LEADER named
// after its epoch (hinted) that the answer does not move past. next is
// changed in place.
func mergeLeaders(prev, next []leaderAddr) []leaderAddr {
	for i := range min(len(prev), len(next)) {
		o, n := prev[i], next[i]
		if n.epoch < o.epoch || (o.hinted && n.epoch <= o.epoch) {
			next[i] = o
		}
	}
	return next
}

// leader returns partition's leader as the core knows it: from the cache
// while it is fresh; else read again first (a request about the topic
// failed, or it is older than maxAge), within ctx, so that a retry after
// NOT_LEADER or LEADER_NOT_AVAILABLE goes to the leader the server names
// now. When that read fails the last known leader is used (the zero
// leaderAddr, the bootstrap connection, when none is).
func (cl *cluster) leader(ctx context.Context, topic string, partition uint32) leaderAddr {
	if m, ok := cl.cachedAt(topic, time.Now()); ok {
		return m.leader(partition)
	}
	if m, err := cl.refresh(ctx, topic); err == nil {
		return m.leader(partition)
	}
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	if e := cl.topics[topic]; e != nil && e.valid {
		return e.meta.leader(partition)
	}
	return leaderAddr{}
}

// notePartitionError is noteError for a request about one partition: a
// NOT_LEADER that names the leader (api.Error.LeaderID, LeaderAddr) points
// the partition at it at once, without reading the metadata (follow); a
// NOT_LEADER without a usable name drops a leader taken from an earlier
// one (the node named did not lead) and marks the metadata stale, as do
// the errors of refreshes. A leader that could not be reached or is
// shutting down (leaderGone) is avoided by keyless placement for a while
// and the metadata is read again (noteLeaderGone).
func (cl *cluster) notePartitionError(topic string, partition uint32, err error) {
	if leaderGone(err) {
		cl.noteLeaderGone(topic, partition)
		return
	}
	var e *api.Error
	if errors.As(err, &e) && e.Code == api.CodeNotLeader {
		if cl.follow(topic, partition, e) {
			return
		}
		cl.unhint(topic, partition)
	}
	cl.noteError(topic, err)
}

// follow points partition at the leader e names, keeping the epoch the
// core knew with it marked hinted (newer than that epoch). It returns
// false when e names no leader the core can reach on its plane (a
// gRPC-plane core needs the node's gRPC address from the brokers list),
// names the leader the core already has, or the topic is not cached.
func (cl *cluster) follow(topic string, partition uint32, e *api.Error) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	ent := cl.topics[topic]
	if ent == nil || !ent.valid || partition >= ent.meta.partitions {
		return false
	}
	addr, ok := cl.hintAddrLocked(e)
	if !ok {
		return false
	}
	cur := ent.meta.leader(partition)
	if cur.addr == addr && (e.LeaderID == "" || cur.nodeID == e.LeaderID) {
		return false // the node that refused is the one named: read the metadata
	}
	cl.setLeaderLocked(topic, ent, partition, leaderAddr{nodeID: e.LeaderID, addr: addr, epoch: cur.epoch, hinted: true})
	return true
}

// hintAddrLocked returns the address, on the core's plane, of the leader a
// NOT_LEADER names: the node's address from the latest brokers list, else,
// on the data plane, the data address the error carries. cl.mu held.
func (cl *cluster) hintAddrLocked(e *api.Error) (string, bool) {
	if addr, ok := cl.brokers[e.LeaderID]; ok && e.LeaderID != "" {
		return addr, true
	}
	if cl.bootstrap != nil && e.LeaderAddr != "" {
		return e.LeaderAddr, true
	}
	return "", false
}

// unhint drops the hinted mark of partition's leader, so that the next
// metadata answer replaces it whatever its epoch.
func (cl *cluster) unhint(topic string, partition uint32) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	ent := cl.topics[topic]
	if ent == nil || !ent.valid || partition >= ent.meta.partitions {
		return
	}
	if cur := ent.meta.leader(partition); cur.hinted {
		cur.hinted = false
		cl.setLeaderLocked(topic, ent, partition, cur)
	}
}

// setLeaderLocked replaces partition's leader in ent, copying the leaders
// (answers already handed out are never changed). cl.mu held.
func (cl *cluster) setLeaderLocked(topic string, ent *topicEntry, partition uint32, b leaderAddr) {
	leaders := slices.Clone(ent.meta.leaders)
	for uint32(len(leaders)) < ent.meta.partitions {
		leaders = append(leaders, leaderAddr{})
	}
	leaders[partition] = b
	ent.meta.leaders = leaders
	ent.hot = &hotTopic{name: topic, meta: ent.meta, fetched: ent.fetched}
	cl.coolLocked(topic)
}

// LeaderClient returns the connection to partition's leader as the
// producer knows it, reading the topic's metadata first when it is stale
// or unknown (bounded by ctx): for callers that send requests about a
// partition on a Client themselves, such as prebuilt batches with
// Client.Publish instead of Send (`sq produce`), or Client.Fetch and
// Client.ListOffsets without a Consumer (`sq bench`, `sq consume
// --from-time`, which route through a Producer that sends nothing).
// Report each failed request with NoteError, so that the next
// LeaderClient follows a NOT_LEADER (to the leader it names, or the
// metadata's). The Client belongs to the producer: do not close it.
func (p *Producer) LeaderClient(ctx context.Context, topic string, partition uint32) *Client {
	return p.core.client(ctx, topic, partition)
}

// NoteError reports err, the failure of a request about partition sent
// on a LeaderClient: a NOT_LEADER moves the partition to the leader it
// names, or makes the next LeaderClient read the metadata, as do
// UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID, UNKNOWN_PARTITION,
// LEADER_NOT_AVAILABLE and NO_QUORUM; other errors change nothing.
func (p *Producer) NoteError(topic string, partition uint32, err error) {
	p.core.notePartitionError(topic, partition, err)
}

// LeaderClient returns the connection to partition's leader as the
// consumer knows it, as Producer.LeaderClient does, for callers that
// read with Client.Fetch or Client.ListOffsets themselves; report
// failures with NoteError. The Client belongs to the consumer: do not
// close it.
func (c *Consumer) LeaderClient(ctx context.Context, partition uint32) *Client {
	return c.core.client(ctx, c.cfg.Topic, partition)
}

// NoteError reports err, the failure of a request about partition sent
// on a LeaderClient, as Producer.NoteError does.
func (c *Consumer) NoteError(partition uint32, err error) {
	c.core.notePartitionError(c.cfg.Topic, partition, err)
}
