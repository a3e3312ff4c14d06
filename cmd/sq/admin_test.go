package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/testnet"
	"github.com/seedqueue/sq/sdk"
)

// runSQ runs the sq command line in-process and returns stdout and the
// error.
func runSQ(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCommand(nil, &out, &errOut, func(k string) string { return env[k] })
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // guards against a hang only
	defer cancel()
	err := root.ExecuteContext(ctx)
	if ctx.Err() != nil {
		t.Fatalf("sq %v ran into the test's guard deadline", args)
	}
	return out.String(), err
}

// jsonKeys parses out as one JSON object and returns its keys, sorted.
func jsonKeys(t *testing.T, out string) (map[string]any, []string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON document:\n%s", out)
	}
	var keys []string
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return doc, keys
}

func sortedKeys(v any) []string {
	m, _ := v.(map[string]any)
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestAdminCommandsJSON(t *testing.T) {
	data, _ := startData(t, false)
	ctl := startControl(t)
	topicKeys := []string{"config", "name", "partition_count", "topic_id"}
	configKeys := []string{"local_retention_bytes", "local_retention_ms", "max_record_bytes", "min_insync_replicas", "retention_bytes", "retention_ms", "segment_bytes", "segment_ms",
		"sync_policy", "unclean_leader_election"}

	out, err := runSQ(t, nil, "--server", data, "topic", "list", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	doc, keys := jsonKeys(t, out)
	if !slices.Equal(keys, []string{"topics"}) {
		t.Fatalf("topic list keys %v", keys)
	}
	topics := doc["topics"].([]any)
	if len(topics) != 1 || !slices.Equal(sortedKeys(topics[0]), topicKeys) ||
		!slices.Equal(sortedKeys(topics[0].(map[string]any)["config"]), configKeys) {
		t.Fatalf("topic list:\n%s", out)
	}

	out, err = runSQ(t, nil, "--server", data, "topic", "describe", "orders", "--format", "JSON")
	if err != nil {
		t.Fatal(err)
	}
	doc, keys = jsonKeys(t, out)
	if !slices.Equal(keys, []string{"config", "name", "partition_count", "partitions", "replication_factor", "topic_id"}) ||
		doc["partition_count"] != 2.0 || doc["replication_factor"] != 1.0 {
		t.Fatalf("topic describe:\n%s", out)
	}
	parts := doc["partitions"].([]any)
	wantPart := []string{"high_watermark", "isr", "leader", "leader_epoch", "log_end_offset", "log_start_offset", "partition",
		"replicas", "segment_count", "size_bytes"}
	if len(parts) != 2 || !slices.Equal(sortedKeys(parts[1]), wantPart) {
		t.Fatalf("topic describe partitions:\n%s", out)
	}
	if p := parts[1].(map[string]any); p["leader"] != "cli-node" || fmt.Sprint(p["replicas"]) != "[cli-node]" || fmt.Sprint(p["isr"]) != "[cli-node]" {
		t.Fatalf("topic describe placement:\n%s", out)
	}

	out, err = runSQ(t, nil, "--server", data, "group", "list", "-f", "Json")
	if err != nil {
		t.Fatal(err)
	}
	if doc, keys = jsonKeys(t, out); !slices.Equal(keys, []string{"groups"}) || len(doc["groups"].([]any)) != 0 {
		t.Fatalf("group list:\n%s", out)
	}

	c, err := sdk.Dial(context.Background(), sdk.ClientConfig{Addr: data})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CommitOffsets(context.Background(), "billing", []sdk.OffsetCommit{{Topic: "orders", Partition: 1, Offset: 0}})
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, err = runSQ(t, nil, "--server", data, "group", "describe", "billing", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	if _, keys = jsonKeys(t, out); !slices.Equal(keys, []string{"generation", "group", "member_count", "members", "offsets", "state"}) {
		t.Fatalf("group describe keys %v:\n%s", keys, out)
	}

	out, err = runSQ(t, nil, "--control", ctl, "cluster", "info", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	doc, keys = jsonKeys(t, out)
	want := []string{"applied_index", "capnp_address", "cluster_id", "commit_index", "controller_id", "data_bytes", "data_dir",
		"data_dir_free_bytes", "data_dir_total_bytes", "drained_nodes", "grpc_address", "http_address", "io_backend", "last_log_index",
		"leaderless_partitions", "member_count", "members", "metadata_hash", "node_id", "orphaned_topics", "partition_count", "raft_state",
		"raft_term", "ready", "topic_count", "uptime_ms", "version", "voter_count"}
	if !slices.Equal(keys, want) || doc["node_id"] != "cli-node" {
		t.Fatalf("cluster info keys %v, want %v:\n%s", keys, want, out)
	}
	members := doc["members"].([]any)
	if len(members) != 1 || !slices.Equal(sortedKeys(members[0]), []string{"capnp_address", "controller", "drained", "gossip_address",
		"grpc_address", "http_address", "node_id", "raft_address", "self", "state", "voter"}) {
		t.Fatalf("cluster info members:\n%s", out)
	}
}

func TestGroupDescribeJSONFields(t *testing.T) {
	var out bytes.Buffer
	err := printGroupJSON(&out, groupDescriptionFixture())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Members []struct {
			MemberID   string              `json:"member_id"`
			Assignment map[string][]uint32 `json:"assignment"`
		} `json:"members"`
		Offsets []struct {
			CommittedOffset *int64  `json:"committed_offset"`
			MemberID        *string `json:"member_id"`
			Lag             int64   `json:"lag"`
		} `json:"offsets"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Members) != 1 || !slices.Equal(got.Members[0].Assignment["orders"], []uint32{0, 1}) {
		t.Errorf("members: %+v", got.Members)
	}
	if len(got.Offsets) != 2 || *got.Offsets[0].CommittedOffset != 5 || *got.Offsets[0].MemberID != "m-1" ||
		got.Offsets[1].CommittedOffset != nil || got.Offsets[1].MemberID != nil || got.Offsets[1].Lag != 2 {
		t.Errorf("offsets:\n%s", out.String())
	}
}

// TestTopicDescribeUnknownStatistics: a partition whose leader is not
// available shows UNAVAILABLE, a failed one FAILED, both with "-" for
// their statistics in the table and null in JSON (unknown, not 0), and
// their error; an empty healthy partition keeps its zeros.
func TestTopicDescribeUnknownStatistics(t *testing.T) {
	info := sdk.TopicInfo{Name: "orders", Partitions: 3, PartitionInfos: []sdk.PartitionInfo{
		{Partition: 0, Leader: "n1", Replicas: []string{"n1"}, ISR: []string{"n1"}},
		{Partition: 1, Leader: "n2", Replicas: []string{"n2"}, Err: api.NewError(api.CodeLeaderNotAvailable, "the leader of orders/1, node n2, is not alive")},
		{Partition: 2, Leader: "n1", Replicas: []string{"n1"}, Err: api.NewError(api.CodePartitionFailed, "fdatasync failed")},
	}}
	var out bytes.Buffer
	if err := printTopicDescription(&out, topicView{TopicInfo: info, placed: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"0          0               0        0   0 B         0           ok      n1",
		"1          -               -        -     -         -  UNAVAILABLE      n2",
		"2          -               -        -     -         -       FAILED      n1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	for _, line := range []string{"partition 1: LEADER_NOT_AVAILABLE: the leader of orders/1, node n2, is not alive", "partition 2: PARTITION_FAILED: fdatasync failed"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
	b, err := json.Marshal(toTopicViewJSON(topicView{TopicInfo: info, placed: true}))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Partitions []map[string]any `json:"partitions"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Partitions) != 3 {
		t.Fatalf("%v: %s", err, b)
	}
	for i, p := range doc.Partitions {
		for _, k := range []string{"log_start_offset", "high_watermark", "log_end_offset", "size_bytes", "segment_count"} {
			v, ok := p[k]
			if !ok || (i == 0) != (v != nil) || i == 0 && v != 0.0 {
				t.Errorf("partition %d: %s = %v (present %v), want 0 when healthy, null otherwise: %s", i, k, v, ok, b)
			}
		}
		if _, hasErr := p["error"]; hasErr != (i > 0) {
			t.Errorf("partition %d: error present %v: %s", i, hasErr, b)
		}
	}
}

func TestAdminFormatRefused(t *testing.T) {
	dead := testnet.FreeAddr(t)
	for _, args := range [][]string{
		{"topic", "list"}, {"topic", "describe", "orders"}, {"group", "list"}, {"group", "describe", "g"}, {"cluster", "info"},
	} {
		for _, bad := range []string{"yaml", "", "raw", "%v"} {
			all := append([]string{"--server", dead, "--control", dead}, args...)
			_, err := runSQ(t, nil, append(all, "--format", bad)...)
			if err == nil || !strings.Contains(err.Error(), "want one of text, json") || !strings.Contains(err.Error(), `"`+bad+`"`) {
				t.Errorf("sq %v --format %q: %v, want the accepted formats", args, bad, err)
			}
		}
	}
}

func TestTopicAlterOffersOnlyWhatTheServerChanges(t *testing.T) {
	ctl := startControl(t)
	_, err := runSQ(t, nil, "--control", ctl, "topic", "alter", "orders", "--segment-bytes", "1048576")
	if err == nil || !strings.Contains(err.Error(), "unknown flag: --segment-bytes") || !strings.Contains(err.Error(), "fixed when a topic is created") {
		t.Fatalf("alter --segment-bytes: %v", err)
	}
	// The partition count grows (engine.CreatePartitions); it is never
	// lowered.
	out, err := runSQ(t, nil, "--control", ctl, "topic", "alter", "orders", "--partitions", "3")
	if err != nil || !strings.Contains(out, "topic orders now has 3 partitions") {
		t.Fatalf("alter --partitions 3: %v\n%s", err, out)
	}
	_, err = runSQ(t, nil, "--control", ctl, "topic", "alter", "orders", "--partitions", "2")
	if err == nil || !strings.Contains(err.Error(), "has 3 partitions; the new total 2 must be larger") {
		t.Fatalf("alter --partitions 2: %v", err)
	}
	for _, flag := range []string{"--sync-policy=none", "--retention-ms=60000", "--retention-bytes=-1", "--segment-ms=3600000", "--max-record-bytes=2048"} {
		if _, err := runSQ(t, nil, "--control", ctl, "topic", "alter", "orders", flag); err != nil {
			t.Errorf("alter %s: %v", flag, err)
		}
	}
}

func TestWrongPlaneIsNamed(t *testing.T) {
	data, _ := startData(t, false)
	ctl := startControl(t)
	_, err := runSQ(t, nil, "--server", ctl, "topic", "list")
	if err == nil || !strings.Contains(err.Error(), ctl+" is not an SQ data plane (it speaks HTTP/2; the data plane is on port 6064 by default)") {
		t.Errorf("--server <gRPC address>: %v", err)
	}
	_, err = runSQ(t, nil, "--control", data, "cluster", "info")
	if err == nil || !strings.Contains(err.Error(), data+" is not an SQ control plane (it speaks SQ's data-plane protocol; the gRPC control plane is on port 6060 by default)") {
		t.Errorf("--control <data-plane address>: %v", err)
	}
}

func TestTimeoutBoundsASilentListener(t *testing.T) {
	addr := testnet.SilentListener(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"data plane", nil, []string{"--timeout", "200ms", "--server", addr, "topic", "list"},
			"no answer from the SQ server at " + addr + " within 200ms"},
		{"data plane, SQ_TIMEOUT", map[string]string{"SQ_TIMEOUT": "150ms"}, []string{"--server", addr, "group", "list"},
			"no answer from the SQ server at " + addr + " within 150ms"},
		{"flag wins over SQ_TIMEOUT", map[string]string{"SQ_TIMEOUT": "1h"}, []string{"--timeout", "150ms", "--server", addr, "topic", "describe", "t"},
			"within 150ms"},
		{"control plane", nil, []string{"--timeout", "200ms", "--control", addr, "cluster", "info"},
			"no answer from the SQ control plane at " + addr + " within 200ms"},
		{"topic alter", nil, []string{"--timeout", "200ms", "--control", addr, "topic", "alter", "t", "--retention-ms", "1"},
			"no answer from the SQ control plane at " + addr + " within 200ms"},
		// The commands that build their own producer, consumer or bench
		// clients honour the same bound.
		{"produce", nil, []string{"--timeout", "200ms", "--server", addr, "produce", "-t", "t"},
			"no answer from the SQ server at " + addr + " within 200ms"},
		{"consume", nil, []string{"--timeout", "200ms", "--server", addr, "consume", "-t", "t"},
			"no answer from the SQ server at " + addr + " within 200ms"},
		{"consume as a group member", nil, []string{"--timeout", "200ms", "--server", addr, "consume", "-t", "t", "-g", "g"},
			"no answer from the SQ server at " + addr + " within 200ms"},
		{"bench", nil, []string{"--timeout", "200ms", "--server", addr, "bench", "produce", "--count", "10"},
			"no answer from the SQ server at " + addr + " within 200ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runSQ(t, tc.env, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestTimeoutRefusesBadValues(t *testing.T) {
	dead := testnet.FreeAddr(t)
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{nil, []string{"--timeout", "-1s"}, "--timeout -1s: want a positive duration"},
		{nil, []string{"--timeout", "5"}, `invalid argument "5" for "--timeout" flag: want a duration with its unit, such as 5s, 500ms or 1m30s`},
		{nil, []string{"--timeout", "soon"}, `invalid argument "soon" for "--timeout" flag: want a duration with its unit`},
		{map[string]string{"SQ_TIMEOUT": "soon"}, nil, `SQ_TIMEOUT="soon": want a duration with its unit, such as 5s`},
		{map[string]string{"SQ_TIMEOUT": "5"}, nil, `SQ_TIMEOUT="5": want a duration with its unit`},
		{map[string]string{"SQ_TIMEOUT": "0"}, nil, "SQ_TIMEOUT 0s: want a positive duration"},
	} {
		_, err := runSQ(t, tc.env, append(tc.args, "--server", dead, "topic", "list")...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: %v, want %q", tc.env, tc.args, err, tc.want)
		}
	}
}

func TestVersion(t *testing.T) {
	re := regexp.MustCompile(`^sq \S+ \(commit (unknown|[0-9a-f]{1,7}(-dirty)?), go\d+\.\d+\)\n$`)
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := runSQ(t, nil, args...)
		if err != nil || !re.MatchString(out) {
			t.Errorf("sq %v: %q, %v; want a match of %v", args, out, err, re)
		}
	}
}
