package dataplane

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// clusterMemBroker is a memBroker in a cluster of three nodes, as the
// cluster layer presents it: it lists the nodes and fills in each
// partition's placement, in DescribeTopic and ListTopics alike.
type clusterMemBroker struct {
	*memBroker
	cmu     sync.Mutex
	created []engine.TopicConfig
}

func (b *clusterMemBroker) Nodes() []api.Node {
	return []api.Node{
		{ID: "a", DataAddr: "10.0.0.1:6064", GRPCAddr: "10.0.0.1:6060", Alive: true},
		{ID: "b", DataAddr: "10.0.0.2:6064", GRPCAddr: "10.0.0.2:6060", Alive: true},
		{ID: "c", DataAddr: "10.0.0.3:6064", GRPCAddr: "10.0.0.3:6060", Alive: false},
	}
}

func (b *clusterMemBroker) ClusterID() string { return "prod" }

func (b *clusterMemBroker) CreateTopic(name string, partitions int, cfg engine.TopicConfig) (engine.TopicInfo, error) {
	b.cmu.Lock()
	b.created = append(b.created, cfg)
	b.cmu.Unlock()
	ti, err := b.memBroker.CreateTopic(name, partitions, cfg)
	return b.place(ti), err
}

func (b *clusterMemBroker) place(ti engine.TopicInfo) engine.TopicInfo {
	ti.Config.ReplicationFactor = 2
	if len(ti.Partitions) == 0 {
		for i := range ti.PartitionCount {
			ti.Partitions = append(ti.Partitions, engine.PartitionInfo{Partition: i})
		}
	}
	nodes := []string{"a", "b", "c"}
	for i := range ti.Partitions {
		p := &ti.Partitions[i]
		p.Leader = nodes[i%3]
		p.LeaderEpoch = uint32(10 + i)
		p.Replicas = []string{nodes[i%3], nodes[(i+1)%3]}
		p.ISR = []string{nodes[i%3]}
	}
	return ti
}

func (b *clusterMemBroker) DescribeTopic(name string) (engine.TopicInfo, error) {
	ti, err := b.memBroker.DescribeTopic(name)
	return b.place(ti), err
}

func (b *clusterMemBroker) ListTopics() []engine.TopicInfo {
	ts := b.memBroker.ListTopics()
	for i := range ts {
		ts[i] = b.place(ts[i])
	}
	return ts
}

// createTopicRFReq is createTopicReq with a replication factor.
func createTopicRFReq(name string, partitions, rf uint32) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewCreateTopicRequest()
		if err != nil {
			return err
		}
		r.SetPartitions(partitions)
		r.SetReplicationFactor(rf)
		return r.SetName(name)
	}
}

// placement is one partition's placement as a client reads it.
type placement struct {
	partition     uint32
	leader        string
	epoch         uint32
	replicas, isr []string
}

func readTextList(t *testing.T, l capnp.TextList, err error) []string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := 0; i < l.Len(); i++ {
		s, err := l.At(i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func readPlacements(t *testing.T, ti api.TopicInfo) []placement {
	t.Helper()
	l, err := ti.PartitionInfos()
	if err != nil {
		t.Fatal(err)
	}
	var out []placement
	for i := 0; i < l.Len(); i++ {
		p := l.At(i)
		leader, _ := p.Leader()
		r, rerr := p.Replicas()
		s, serr := p.Isr()
		out = append(out, placement{p.Partition(), leader, p.LeaderEpoch(), readTextList(t, r, rerr), readTextList(t, s, serr)})
	}
	return out
}

// metadataTopics returns the metadata response's topics by name.
func metadataTopics(t *testing.T, md api.MetadataResponse) map[string]api.TopicInfo {
	t.Helper()
	l, err := md.Topics()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]api.TopicInfo{}
	for i := 0; i < l.Len(); i++ {
		name, _ := l.At(i).Name()
		out[name] = l.At(i)
	}
	return out
}

func TestMetadataOfASingleNode(t *testing.T) {
	h := startServer(t, newMemBroker(), Options{ClusterID: "solo"})
	c, _ := connect(t, h.addr)
	c.createTopic("t", 2)
	for _, req := range [][]string{nil, {"t"}} { // ListTopics, then DescribeTopic
		r := c.call(metadataReq(req...), nil)
		expectWhich(t, r, api.Frame_Which_metadataResponse)
		md, _ := r.f.MetadataResponse()
		if id, _ := md.ClusterId(); id != "solo" {
			t.Errorf("cluster id %q, want solo", id)
		}
		bl, err := md.Brokers()
		if err != nil || bl.Len() != 1 {
			t.Fatalf("brokers: %d, %v; want this node alone", bl.Len(), err)
		}
		b := bl.At(0)
		id, _ := b.NodeId()
		addr, _ := b.DataAddress()
		if id != "node-1" || addr != h.addr || !b.Alive() {
			t.Errorf("broker %s at %s alive %v, want node-1 at %s, alive", id, addr, b.Alive(), h.addr)
		}
		ti := metadataTopics(t, md)["t"]
		if ti.ReplicationFactor() != 1 {
			t.Errorf("replication factor %d, want 1", ti.ReplicationFactor())
		}
		want := []placement{{0, "node-1", 0, []string{"node-1"}, []string{"node-1"}}, {1, "node-1", 0, []string{"node-1"}, []string{"node-1"}}}
		if got := readPlacements(t, ti); !slices.EqualFunc(got, want, samePlacement) {
			t.Errorf("metadata %v placement %+v, want %+v", req, got, want)
		}
	}

	// A single node holds one replica of each partition.
	r := c.call(createTopicRFReq("t3", 1, 3), nil)
	ct, _ := r.f.CreateTopicResponse()
	we, _ := ct.Error()
	if err := api.FromWire(we); api.AsError(err).Code != api.CodeInvalidConfig ||
		!strings.Contains(err.Error(), "replication factor 3 exceeds the 1 node(s) of this cluster") {
		t.Fatalf("rf 3 on a single node: %v", err)
	}
	r = c.call(createTopicRFReq("t1", 1, 1), nil)
	ct, _ = r.f.CreateTopicResponse()
	if we, _ := ct.Error(); api.FromWire(we) != nil {
		t.Fatalf("rf 1: %v", api.FromWire(we))
	}
	r = c.call(describeTopicReq("t"), nil)
	dt, _ := r.f.DescribeTopicResponse()
	ti, _ := dt.Topic()
	if got := readPlacements(t, ti); len(got) != 2 || got[1].leader != "node-1" || ti.ReplicationFactor() != 1 {
		t.Fatalf("describe placement %+v, replication factor %d", got, ti.ReplicationFactor())
	}
}

func samePlacement(a, b placement) bool {
	return a.partition == b.partition && a.leader == b.leader && a.epoch == b.epoch &&
		slices.Equal(a.replicas, b.replicas) && slices.Equal(a.isr, b.isr)
}

func TestMetadataOfACluster(t *testing.T) {
	b := &clusterMemBroker{memBroker: newMemBroker()}
	h := startServer(t, b, Options{ClusterID: "ignored"})
	c, _ := connect(t, h.addr)
	r := c.call(createTopicRFReq("t", 3, 2), nil)
	ct, _ := r.f.CreateTopicResponse()
	if we, _ := ct.Error(); api.FromWire(we) != nil {
		t.Fatalf("create: %v", api.FromWire(we))
	}
	c.call(createTopicRFReq("u", 1, 0), nil)
	if len(b.created) != 2 || b.created[0].ReplicationFactor != 2 || b.created[1].ReplicationFactor != 0 {
		t.Fatalf("broker got configs %+v, want replication factors 2 and 0", b.created)
	}
	want := []placement{
		{0, "a", 10, []string{"a", "b"}, []string{"a"}},
		{1, "b", 11, []string{"b", "c"}, []string{"b"}},
		{2, "c", 12, []string{"c", "a"}, []string{"c"}},
	}
	if ti, _ := ct.Topic(); !slices.EqualFunc(readPlacements(t, ti), want, samePlacement) || ti.ReplicationFactor() != 2 {
		t.Fatalf("create answered placement %+v, rf %d", readPlacements(t, ti), ti.ReplicationFactor())
	}
	for _, req := range [][]string{nil, {"t"}} {
		r := c.call(metadataReq(req...), nil)
		md, _ := r.f.MetadataResponse()
		if id, _ := md.ClusterId(); id != "prod" {
			t.Errorf("cluster id %q, want prod (the broker's)", id)
		}
		bl, _ := md.Brokers()
		var got []string
		for i := 0; i < bl.Len(); i++ {
			id, _ := bl.At(i).NodeId()
			da, _ := bl.At(i).DataAddress()
			ga, _ := bl.At(i).GrpcAddress()
			got = append(got, id+" "+da+" "+ga+" "+map[bool]string{true: "alive", false: "down"}[bl.At(i).Alive()])
		}
		wantB := []string{"a 10.0.0.1:6064 10.0.0.1:6060 alive", "b 10.0.0.2:6064 10.0.0.2:6060 alive", "c 10.0.0.3:6064 10.0.0.3:6060 down"}
		if !slices.Equal(got, wantB) {
			t.Errorf("brokers %v, want %v", got, wantB)
		}
		ti := metadataTopics(t, md)["t"]
		if got := readPlacements(t, ti); !slices.EqualFunc(got, want, samePlacement) || ti.ReplicationFactor() != 2 {
			t.Errorf("metadata %v: placement %+v rf %d, want %+v rf 2", req, got, ti.ReplicationFactor(), want)
		}
		// Metadata carries placement only, no offsets or sizes.
		l, _ := ti.PartitionInfos()
		if l.At(0).LogEndOffset() != 0 || l.At(0).SegmentCount() != 0 {
			t.Errorf("metadata partition carries offsets or sizes")
		}
	}
}
