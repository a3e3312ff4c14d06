package gossip

import (
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics is the prometheus.Collector of the sq_cluster_* metrics, read
// from the node at every scrape.
type metrics struct {
	n          *Node
	members    *prometheus.Desc
	term       *prometheus.Desc
	commit     *prometheus.Desc
	applied    *prometheus.Desc
	controller *prometheus.Desc
	leaderless *prometheus.Desc
}

func newMetrics(n *Node) *metrics {
	return &metrics{
		n: n,
		members: prometheus.NewDesc("sq_cluster_members",
			"Nodes of the cluster metadata by membership state as this node's gossip sees them (alive, suspect, dead, left, unknown).", []string{"state"}, nil),
		term:    prometheus.NewDesc("sq_cluster_raft_term", "Current Raft term of the metadata log on this node.", nil, nil),
		commit:  prometheus.NewDesc("sq_cluster_raft_commit_index", "Index of the last committed entry of the metadata log known to this node.", nil, nil),
		applied: prometheus.NewDesc("sq_cluster_raft_applied_index", "Index of the last metadata log entry applied to this node's state.", nil, nil),
		controller: prometheus.NewDesc("sq_cluster_controller",
			"1 on the controller (the Raft leader), else 0.", nil, nil),
		leaderless: prometheus.NewDesc("sq_cluster_leaderless_partitions",
			"Partitions whose leader is not alive or that have none (they answer LEADER_NOT_AVAILABLE).", nil, nil),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	if r == nil {
		return nil
	}
	return r.Register(m)
}

func (m *metrics) unregister(r prometheus.Registerer) {
	if r != nil {
		r.Unregister(m)
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.members, m.term, m.commit, m.applied, m.controller, m.leaderless} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	n := m.n
	counts := map[string]int{StateAlive: 0, StateSuspect: 0, StateDead: 0, StateLeft: 0, StateUnknown: 0}
	st := n.State()
	for id := range st.Nodes {
		counts[n.memberState(id)]++
	}
	for s, c := range counts {
		ch <- prometheus.MustNewConstMetric(m.members, prometheus.GaugeValue, float64(c), s)
	}
	ctl := 0.0
	if n.raft.State() == raft.Leader {
		ctl = 1
	}
	ch <- prometheus.MustNewConstMetric(m.term, prometheus.GaugeValue, float64(n.raft.CurrentTerm()))
	ch <- prometheus.MustNewConstMetric(m.commit, prometheus.GaugeValue, float64(n.raft.CommitIndex()))
	ch <- prometheus.MustNewConstMetric(m.applied, prometheus.GaugeValue, float64(n.AppliedIndex()))
	ch <- prometheus.MustNewConstMetric(m.controller, prometheus.GaugeValue, ctl)
	ch <- prometheus.MustNewConstMetric(m.leaderless, prometheus.GaugeValue, float64(st.Leaderless(n.Alive)))
}
