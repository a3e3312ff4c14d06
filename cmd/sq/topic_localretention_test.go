package main

import (
	"strings"
	"testing"
)

// sq topic create --local-retention-ms --local-retention-bytes sets the
// topic's local retention, topic describe shows it in text and JSON (-2
// as "same as retention.ms" / "same as retention.bytes"), and topic alter
// changes it.
func TestTopicLocalRetentionFlags(t *testing.T) {
	data, _ := startData(t, false)
	out, err := runSQ(t, nil, "--server", data, "topic", "create", "tiered", "--retention-ms", "7200000", "--local-retention-ms", "3600000",
		"--retention-bytes", "1073741824", "--local-retention-bytes", "1048576")
	if err != nil || !strings.Contains(out, "created topic tiered") {
		t.Fatalf("create: %v\n%s", err, out)
	}
	out, err = runSQ(t, nil, "--server", data, "topic", "describe", "tiered")
	if err != nil {
		t.Fatal(err)
	}
	if !hasSetting(out, "Local retention", "3600000 ms (1h)") || !hasSetting(out, "Local retention bytes", "1.0 MiB") {
		t.Errorf("describe lacks the local retention:\n%s", out)
	}
	out, err = runSQ(t, nil, "--server", data, "topic", "describe", "tiered", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := jsonKeys(t, out)
	cfg, _ := doc["config"].(map[string]any)
	if cfg["local_retention_ms"] != 3600000.0 || cfg["local_retention_bytes"] != 1048576.0 {
		t.Fatalf("describe JSON config %v", cfg)
	}
	// The default topic: the same as the whole log's.
	out, err = runSQ(t, nil, "--server", data, "topic", "describe", "orders")
	if err != nil || !hasSetting(out, "Local retention", "same as retention.ms") || !hasSetting(out, "Local retention bytes", "same as retention.bytes") {
		t.Fatalf("describe orders: %v\n%s", err, out)
	}
	out, err = runSQ(t, nil, "--server", data, "topic", "describe", "orders", "-f", "json")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ = jsonKeys(t, out)
	if cfg, _ := doc["config"].(map[string]any); cfg["local_retention_ms"] != -2.0 || cfg["local_retention_bytes"] != -2.0 {
		t.Fatalf("describe orders JSON config %v", cfg)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--local-retention-ms", "-3"}, "--local-retention-ms -3: want -2"},
		{[]string{"--local-retention-bytes", "-9"}, "--local-retention-bytes -9: want -2"},
		{[]string{"--retention-ms", "1000", "--local-retention-ms", "2000"}, "local.retention.ms 2000: exceeds retention.ms 1000"},
		{[]string{"--retention-ms", "1000", "--local-retention-ms", "-1"}, "INVALID_CONFIG"},
		{[]string{"--local-retention-ms", "x"}, `invalid argument "x"`},
	} {
		_, err := runSQ(t, nil, append([]string{"--server", data, "topic", "create", "bad"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create %v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestTopicAlterLocalRetentionFlags(t *testing.T) {
	ctl := startControl(t)
	out, err := runSQ(t, nil, "--control", ctl, "topic", "alter", "orders", "--local-retention-ms", "60000", "--local-retention-bytes", "4096")
	if err != nil {
		t.Fatal(err)
	}
	if !hasSetting(out, "Local retention", "60000 ms (1m)") || !hasSetting(out, "Local retention bytes", "4.0 KiB") {
		t.Fatalf("alter output:\n%s", out)
	}
	out, err = runSQ(t, nil, "--control", ctl, "topic", "alter", "orders", "--local-retention-ms", "-2")
	if err != nil || !hasSetting(out, "Local retention", "same as retention.ms") || !hasSetting(out, "Local retention bytes", "4.0 KiB") {
		t.Fatalf("alter --local-retention-ms -2: %v\n%s", err, out)
	}
	for _, tc := range []struct{ args, want string }{
		{"--local-retention-bytes -3", "--local-retention-bytes -3: want -2"},
		{"--retention-bytes 1000", "local.retention.bytes 4096: exceeds retention.bytes 1000"},
	} {
		_, err := runSQ(t, nil, append([]string{"--control", ctl, "topic", "alter", "orders"}, strings.Fields(tc.args)...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("alter %s: %v, want %q", tc.args, err, tc.want)
		}
	}
}
