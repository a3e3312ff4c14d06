package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
	"github.com/seedqueue/sq/sdk"
)

// fixedRemoteLog is an engine.RemoteLog with no remote data whose Stats
// answer from a table by partition.
type fixedRemoteLog map[int]engine.RemoteStats

func (fixedRemoteLog) Bounds(string, api.TopicID, int) (uint64, uint64, bool) { return 0, 0, false }

func (fixedRemoteLog) Fetch(context.Context, string, api.TopicID, int, uint64, int) ([][]byte, error) {
	return nil, api.NewError(api.CodeOffsetOutOfRange, "no remote log")
}

func (f fixedRemoteLog) Stats(_ string, _ api.TopicID, partition int) (engine.RemoteStats, bool) {
	s, ok := f[partition]
	return s, ok
}

// TestTopicDescribeTiered: with tiered storage, topic describe shows the
// local log start, the remote log start ("-" while the remote log is
// empty), the uploaded segments and their size and the upload lag in the
// table, and the remote_* and upload_lag_* fields in JSON (the remote
// offsets null while empty); without it, neither.
func TestTopicDescribeTiered(t *testing.T) {
	remote := fixedRemoteLog{
		0: {LogStartOffset: 1200, EndOffset: 90000, Segments: 12, Bytes: 48 << 20, LagSegments: 2, LagBytes: 8 << 20},
		1: {},
	}
	data := serveEngine(t, func(eng *engine.Engine) dataplane.Broker {
		eng.SetRemoteLog(remote)
		return eng
	})
	out, err := runSQ(t, nil, "--server", data, "topic", "describe", "orders")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	var header string
	rows := map[string]string{}
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && f[0] == "PARTITION":
			header = l
		case header != "" && len(f) > 0:
			rows[f[0]] = strings.Join(f, " ")
		}
	}
	for _, col := range []string{"LOCAL START", "REMOTE START", "REMOTE SEGS", "REMOTE SIZE", "UPLOAD LAG"} {
		if !strings.Contains(header, col) {
			t.Errorf("header lacks %q:\n%s", col, out)
		}
	}
	if want := "0 0 0 0 0 B 1 1200 12 48.0 MiB 2 (8.0 MiB) ok"; !strings.HasPrefix(rows["0"], want) {
		t.Errorf("partition 0: %q, want %q...:\n%s", rows["0"], want, out)
	}
	if want := "1 0 0 0 0 B 1 - 0 0 B 0 ok"; !strings.HasPrefix(rows["1"], want) {
		t.Errorf("partition 1: %q, want %q...:\n%s", rows["1"], want, out)
	}

	out, err = runSQ(t, nil, "--server", data, "topic", "describe", "orders", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Partitions []map[string]any `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Partitions) != 2 {
		t.Fatalf("%v:\n%s", err, out)
	}
	want := []map[string]any{
		{"remote_log_start_offset": 1200.0, "remote_log_end_offset": 90000.0, "remote_segments": 12.0, "remote_bytes": float64(48 << 20),
			"upload_lag_segments": 2.0, "upload_lag_bytes": float64(8 << 20)},
		{"remote_log_start_offset": nil, "remote_log_end_offset": nil, "remote_segments": 0.0, "remote_bytes": 0.0,
			"upload_lag_segments": 0.0, "upload_lag_bytes": 0.0},
	}
	for i, w := range want {
		for k, v := range w {
			got, ok := doc.Partitions[i][k]
			if !ok || got != v {
				t.Errorf("partition %d: %s = %v (present %v), want %v:\n%s", i, k, got, ok, v, out)
			}
		}
	}

	// Without tiered storage: no remote columns or fields.
	plain := serveEngine(t, func(eng *engine.Engine) dataplane.Broker { return eng })
	out, err = runSQ(t, nil, "--server", plain, "topic", "describe", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "REMOTE") || strings.Contains(out, "UPLOAD LAG") || !strings.Contains(out, "LOG START") {
		t.Errorf("describe without tiered storage:\n%s", out)
	}
	out, err = runSQ(t, nil, "--server", plain, "topic", "describe", "orders", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "remote_") || strings.Contains(out, "upload_lag") {
		t.Errorf("JSON describe without tiered storage:\n%s", out)
	}
}

// TestTopicDescribeTieredUnavailable: in a tiered topic, a partition
// whose leader is not available shows "-" in the remote columns too, and
// its JSON has no remote fields.
func TestTopicDescribeTieredUnavailable(t *testing.T) {
	info := sdk.TopicInfo{Name: "orders", Partitions: 2, PartitionInfos: []sdk.PartitionInfo{
		{Partition: 0, SegmentCount: 1, Remote: &sdk.RemoteStats{LogStartOffset: 5, EndOffset: 9, Segments: 1, Bytes: 2048}},
		{Partition: 1, Err: api.NewError(api.CodeLeaderNotAvailable, "the leader of orders/1, node n2, is not alive")},
	}}
	var out bytes.Buffer
	if err := printTopicDescription(&out, topicView{TopicInfo: info}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"0            0               0        0   0 B         1             5            1      2.0 KiB           0           ok",
		"1            -               -        -     -         -             -            -            -           -  UNAVAILABLE",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	b, err := json.Marshal(toTopicViewJSON(topicView{TopicInfo: info}))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Partitions []map[string]any `json:"partitions"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Partitions) != 2 {
		t.Fatalf("%v: %s", err, b)
	}
	if doc.Partitions[0]["remote_log_start_offset"] != 5.0 || doc.Partitions[0]["remote_bytes"] != 2048.0 {
		t.Errorf("partition 0: %s", b)
	}
	if _, ok := doc.Partitions[1]["remote_segments"]; ok {
		t.Errorf("an unavailable partition has remote fields: %s", b)
	}
}
