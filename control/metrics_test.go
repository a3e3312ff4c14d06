package control_test

import (
	"context"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/sdk"
)

// scrape parses /metrics with the Prometheus text parser.
func scrape(t *testing.T, n *node) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, "http://"+n.httpAddr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the sample of family name whose labels
// include want, or -1 when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func TestMetricsMoveByTheRecordsSent(t *testing.T) {
	n := startNode(t, control.Options{Version: "v-test"})
	ctx := context.Background()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "m", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	before := scrape(t, n)
	if v := value(before, "sq_published_records_total", map[string]string{"topic": "m"}); v > 0 {
		t.Fatalf("published before any publish = %v", v)
	}
	msg := sqv1.NewMessagingClient(n.conn)
	const grpcRecords = 7
	req := &sqv1.PublishRequest{Topic: "m", Partition: 1}
	for range grpcRecords {
		req.Records = append(req.Records, &sqv1.Record{Value: []byte("abc")})
	}
	if _, err := msg.Publish(ctx, req); err != nil {
		t.Fatal(err)
	}
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const capnpRecords = 5
	var msgs []sdk.ProducerMessage
	for range capnpRecords {
		msgs = append(msgs, sdk.NewProducerMessage("m", []byte("xyz")))
	}
	if _, err := p.SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, n)
	topic := map[string]string{"topic": "m"}
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"sq_published_records_total", value(fams, "sq_published_records_total", topic), grpcRecords + capnpRecords},
		{"sq_publish_latency_seconds count", value(fams, "sq_publish_latency_seconds", nil), 2},
		{"sq_fsync_latency_seconds count", value(fams, "sq_fsync_latency_seconds", nil), 2},
		{"sq_fsync_batches count", value(fams, "sq_fsync_batches", nil), 2},
		{"sq_partition_log_end_offset p0+p1", leo(fams, "0") + leo(fams, "1"), grpcRecords + capnpRecords},
		{"sq_build_info", value(fams, "sq_build_info", map[string]string{"version": "v-test"}), 1},
		{"sq_connections capnp", value(fams, "sq_connections", map[string]string{"plane": "capnp"}), 1},
		{"sq_connections grpc", value(fams, "sq_connections", map[string]string{"plane": "grpc"}), 1},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	for _, name := range []string{"sq_published_bytes_total", "sq_disk_free_bytes", "sq_disk_min_free_bytes", "sq_partition_high_watermark",
		"sq_partition_log_start_offset", "sq_partition_size_bytes", "sq_inflight_requests", "sq_grpc_inflight_requests"} {
		if value(fams, name, nil) < 0 {
			t.Errorf("%s missing", name)
		}
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "sq_") {
			continue
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				switch l.GetName() {
				case "topic", "partition", "group", "code", "plane", "version", "io_backend", "node_id", "cluster_id":
				default:
					t.Errorf("%s has label %s: cardinality must stay per topic/partition", name, l.GetName())
				}
			}
		}
	}

	// Fetch counters move by the records read over gRPC Subscribe.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := msg.Subscribe(sctx, &sqv1.SubscribeRequest{Topic: "m", Partition: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := msg.CommitOffsets(ctx, &sqv1.CommitOffsetsRequest{Group: "lagging", Offsets: []*sqv1.OffsetEntry{{Topic: "m", Partition: 1, Offset: 2}}}); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, n)
	if got, want := value(fams, "sq_fetched_records_total", topic), leo(fams, "1"); got != want {
		t.Errorf("sq_fetched_records_total = %v, want %v", got, want)
	}
	lag := value(fams, "sq_consumer_group_lag_records", map[string]string{"group": "lagging", "topic": "m", "partition": "1"})
	if want := leo(fams, "1") - 2; lag != want {
		t.Errorf("sq_consumer_group_lag_records = %v, want %v", lag, want)
	}
}

// leo is the log end offset of partition p of topic m.
func leo(fams map[string]*dto.MetricFamily, p string) float64 {
	return value(fams, "sq_partition_log_end_offset", map[string]string{"topic": "m", "partition": p})
}

// The per-topic series of a deleted topic are gone at the next scrape;
// those of a live topic stay.
func TestMetricsForgetDeletedTopics(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx := context.Background()
	topics := sqv1.NewTopicsClient(n.conn)
	msg := sqv1.NewMessagingClient(n.conn)
	for _, name := range []string{"gone", "kept"} {
		if _, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: name, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := msg.Publish(ctx, &sqv1.PublishRequest{Topic: name, Records: []*sqv1.Record{{Value: []byte("v")}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := n.eng.Fetch(ctx, name, 0, 0, 1<<20, 0); err != nil {
			t.Fatal(err)
		}
	}
	families := []string{"sq_published_records_total", "sq_published_bytes_total", "sq_fetched_records_total", "sq_fetched_bytes_total"}
	before := scrape(t, n)
	for _, f := range families {
		if value(before, f, map[string]string{"topic": "gone"}) <= 0 {
			t.Fatalf("%s{topic=gone} missing before the delete", f)
		}
	}
	if _, err := topics.DeleteTopic(ctx, &sqv1.DeleteTopicRequest{Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	after := scrape(t, n)
	for name, f := range after {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "topic" && l.GetValue() == "gone" {
					t.Errorf("%s still has a series for the deleted topic", name)
				}
			}
		}
	}
	for _, f := range families {
		if value(after, f, map[string]string{"topic": "kept"}) <= 0 {
			t.Errorf("%s{topic=kept} missing after deleting another topic", f)
		}
	}
}
