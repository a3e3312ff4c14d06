package main

import (
	"regexp"
	"strings"
	"testing"
)

// sq topic create --min-insync-replicas --unclean-leader-election sets the
// topic's replication settings, topic describe shows them in text and
// JSON, and topic alter changes them.
func TestTopicReplicationFlags(t *testing.T) {
	data, _ := startData(t, false)
	out, err := runSQ(t, nil, "--server", data, "topic", "create", "pay", "--min-insync-replicas", "1", "--unclean-leader-election")
	if err != nil || !strings.Contains(out, "created topic pay") {
		t.Fatalf("create: %v\n%s", err, out)
	}
	out, err = runSQ(t, nil, "--server", data, "topic", "describe", "pay")
	if err != nil {
		t.Fatal(err)
	}
	if !hasSetting(out, "Min in-sync", "1") || !hasSetting(out, "Unclean election", "true") || !strings.Contains(out, "ISR") {
		t.Errorf("describe lacks the settings or the ISR column:\n%s", out)
	}
	out, err = runSQ(t, nil, "--server", data, "topic", "describe", "pay", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := jsonKeys(t, out)
	cfg, _ := doc["config"].(map[string]any)
	if cfg["min_insync_replicas"] != 1.0 || cfg["unclean_leader_election"] != true {
		t.Fatalf("describe JSON config %v", cfg)
	}
	// The default topic: no minimum set, unclean election off.
	out, err = runSQ(t, nil, "--server", data, "topic", "describe", "orders")
	if err != nil || !hasSetting(out, "Min in-sync", "-") || !hasSetting(out, "Unclean election", "false") {
		t.Fatalf("describe orders: %v\n%s", err, out)
	}

	// A single node holds one replica: a larger minimum is refused.
	_, err = runSQ(t, nil, "--server", data, "topic", "create", "pay2", "--min-insync-replicas", "2")
	if err == nil || !strings.Contains(err.Error(), "INVALID_CONFIG") || !strings.Contains(err.Error(), "min.insync.replicas 2") {
		t.Fatalf("create --min-insync-replicas 2 on a single node: %v", err)
	}
	_, err = runSQ(t, nil, "--server", data, "topic", "create", "pay3", "--min-insync-replicas", "-1")
	if err == nil || !strings.Contains(err.Error(), "--min-insync-replicas -1") {
		t.Fatalf("create --min-insync-replicas -1: %v", err)
	}
}

func TestTopicAlterReplicationFlags(t *testing.T) {
	ctl := startControl(t)
	out, err := runSQ(t, nil, "--control", ctl, "topic", "alter", "orders", "--unclean-leader-election", "--min-insync-replicas", "1")
	if err != nil {
		t.Fatal(err)
	}
	if !hasSetting(out, "Min in-sync", "1") || !hasSetting(out, "Unclean election", "true") {
		t.Fatalf("alter output:\n%s", out)
	}
	out, err = runSQ(t, nil, "--control", ctl, "topic", "alter", "orders", "--unclean-leader-election=false")
	if err != nil || !hasSetting(out, "Unclean election", "false") || !hasSetting(out, "Min in-sync", "1") {
		t.Fatalf("alter --unclean-leader-election=false: %v\n%s", err, out)
	}
	for _, tc := range []struct{ value, want string }{
		{"0", "--min-insync-replicas 0: want 1 to the topic's replication factor"},
		{"2", "min_insync_replicas 2 exceeds the replication factor 1"},
	} {
		_, err := runSQ(t, nil, "--control", ctl, "topic", "alter", "orders", "--min-insync-replicas", tc.value)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("alter --min-insync-replicas %s: %v, want %q", tc.value, err, tc.want)
		}
	}
}

// hasSetting reports whether out has the line "label:", spaces, value.
func hasSetting(out, label, value string) bool {
	return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label+":") + ` +` + regexp.QuoteMeta(value) + `$`).MatchString(out)
}
