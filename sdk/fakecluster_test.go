package sdk

import (
	"fmt"
	"sync"
	"testing"

	"github.com/seedqueue/sq/api"
)

// fakeCluster makes fakeServers the nodes of one cluster for the routing
// tests: each partition is led by one node at a leader epoch, and the
// metadata of every node lists the nodes (brokers) and each partition's
// leader. A node asked to publish to or fetch from a partition it does
// not lead answers NOT_LEADER, naming the leader (id and data address)
// unless noHint is set; a partition can be made to answer chosen codes
// first (refuse), whatever node is asked.
type fakeCluster struct {
	nodes []*fakeServer

	mu       sync.Mutex
	ids      []string
	addrs    []string
	lead     map[topicPartition]fakeLead
	reported map[topicPartition]fakeLead // what metadata states instead of lead (a lagging node)
	noHint   bool
	refuse   map[topicPartition][]api.Code
	refused  map[string]int // refusals (NOT_LEADER and refuse codes) answered, per node id
}

// fakeLead is a partition's leader: an index into nodes, and its epoch.
type fakeLead struct {
	node  int
	epoch uint32
}

// newFakeCluster starts n nodes, node-0 to node-(n-1).
func newFakeCluster(t testing.TB, n int) *fakeCluster {
	fc := &fakeCluster{lead: map[topicPartition]fakeLead{}, reported: map[topicPartition]fakeLead{},
		refuse: map[topicPartition][]api.Code{}, refused: map[string]int{}}
	for i := range n {
		s := newFakeNode(t, fmt.Sprintf("node-%d", i), fc)
		fc.nodes = append(fc.nodes, s)
		fc.mu.Lock()
		fc.ids = append(fc.ids, s.limits.NodeID)
		fc.addrs = append(fc.addrs, s.addr)
		fc.mu.Unlock()
	}
	return fc
}

// createTopic creates topic on every node, partition p led by node p mod
// n at epoch 1.
func (fc *fakeCluster) createTopic(topic string, partitions int) {
	for _, s := range fc.nodes {
		s.createTopic(topic, partitions)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for p := range partitions {
		fc.lead[topicPartition{topic, uint32(p)}] = fakeLead{node: p % len(fc.nodes), epoch: 1}
	}
}

// move makes node lead partition, at the next epoch.
func (fc *fakeCluster) move(topic string, partition uint32, node int) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	tp := topicPartition{topic, partition}
	fc.lead[tp] = fakeLead{node: node, epoch: fc.lead[tp].epoch + 1}
}

// report makes metadata state l as partition's leader (nil l: the real one).
func (fc *fakeCluster) report(topic string, partition uint32, l *fakeLead) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	tp := topicPartition{topic, partition}
	if l == nil {
		delete(fc.reported, tp)
		return
	}
	fc.reported[tp] = *l
}

// refusePartition makes the next requests for partition answer codes, in
// order, on whatever node.
func (fc *fakeCluster) refusePartition(topic string, partition uint32, codes ...api.Code) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	tp := topicPartition{topic, partition}
	fc.refuse[tp] = append(fc.refuse[tp], codes...)
}

// refusals returns the refusals node i answered.
func (fc *fakeCluster) refusals(i int) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.refused[fc.ids[i]]
}

// gate returns the error s answers a request for partition with: nil
// when s leads it (or fc is nil: no cluster).
func (fc *fakeCluster) gate(s *fakeServer, topic string, partition uint32) error {
	if fc == nil {
		return nil
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	tp := topicPartition{topic, partition}
	l, ok := fc.lead[tp]
	if !ok {
		return nil
	}
	id := s.limits.NodeID
	if codes := fc.refuse[tp]; len(codes) > 0 {
		fc.refuse[tp] = codes[1:]
		fc.refused[id]++
		return api.NewError(codes[0], "refused by the test")
	}
	if fc.ids[l.node] == id {
		return nil
	}
	fc.refused[id]++
	e := api.NewError(api.CodeNotLeader, "%s does not lead %s/%d", id, topic, partition)
	if !fc.noHint {
		e.LeaderID, e.LeaderAddr = fc.ids[l.node], fc.addrs[l.node]
	}
	return e
}

// describe fills a metadata response: the brokers, and each topic of
// infos with its partitions' leaders and epochs.
func (fc *fakeCluster) describe(r api.MetadataResponse, infos []TopicInfo) {
	if fc == nil {
		return
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	bl, _ := r.NewBrokers(int32(len(fc.ids)))
	for i := range fc.ids {
		b := bl.At(i)
		_ = b.SetNodeId(fc.ids[i])
		_ = b.SetDataAddress(fc.addrs[i])
		b.SetAlive(true)
	}
	_ = r.SetClusterId("fake-cluster")
	for i := range infos {
		ti := &infos[i]
		for p := range ti.Partitions {
			tp := topicPartition{ti.Name, p}
			pi := PartitionInfo{Partition: p}
			l, ok := fc.reported[tp]
			if !ok {
				l, ok = fc.lead[tp]
			}
			if ok {
				pi.Leader, pi.LeaderEpoch = fc.ids[l.node], l.epoch
			}
			ti.PartitionInfos = append(ti.PartitionInfos, pi)
		}
	}
}
