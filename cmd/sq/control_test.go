package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
)

// startControl serves a control plane over a fresh engine on loopback
// and returns its gRPC address; it stops at the end of the test.
func startControl(t *testing.T) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := control.New(control.Options{NodeID: "cli-node", ClusterID: "cli-cluster", Version: "cli-test", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), Logger: quiet, Observer: srv.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateTopic("orders", 2, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	srv.SetEngine(eng)
	srv.SetReady(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.ServeGRPC(ln); close(done) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-done
		eng.Close()
	})
	return ln.Addr().String()
}

func TestControlCommands(t *testing.T) {
	addr := startControl(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantOut []string
		wantErr string
	}{
		{"cluster info", nil, []string{"--control", addr, "cluster", "info"},
			[]string{"cli-node", "cli-cluster", "cli-test", "I/O backend:", "(this node)"}, ""},
		{"control from env", map[string]string{"SQ_CONTROL": addr}, []string{"cluster", "info"}, []string{"cli-node"}, ""},
		{"flag wins over env", map[string]string{"SQ_CONTROL": deadAddr}, []string{"--control", addr, "cluster", "info"}, []string{"cli-node"}, ""},
		{"unreachable", nil, []string{"--control", deadAddr, "cluster", "info"}, nil, "cannot reach the SQ control plane at " + deadAddr},
		{"alter", nil, []string{"--control", addr, "topic", "alter", "orders", "--retention-ms", "60000", "--sync-policy", "none"},
			[]string{"Topic:", "orders", "none", "1m"}, ""},
		{"alter without flags", nil, []string{"--control", addr, "topic", "alter", "orders"}, nil, "nothing to change: give at least one of --sync-policy, --retention-ms, --retention-bytes, --segment-ms, --max-record-bytes, --min-insync-replicas, --unclean-leader-election, --local-retention-ms, --local-retention-bytes, or --partitions N to grow the topic to N partitions"},
		{"alter bad name", nil, []string{"--control", addr, "topic", "alter", "bad/name", "--retention-ms", "5"}, nil, "bad/name"},
		{"add partitions", nil, []string{"--control", addr, "topic", "alter", "orders", "--partitions", "4"},
			[]string{"topic orders now has 4 partitions", "Partitions:             4", "      3          0"}, ""},
		{"add partitions not more", nil, []string{"--control", addr, "topic", "alter", "orders", "--partitions", "4"}, nil,
			"INVALID_CONFIG: topic \"orders\" has 4 partitions; the new total 4 must be larger"},
		{"add partitions fewer", nil, []string{"--control", addr, "topic", "alter", "orders", "--partitions", "1"}, nil, "the new total 1 must be larger"},
		{"add partitions above the maximum", nil, []string{"--control", addr, "topic", "alter", "orders", "--partitions", "10001"}, nil, "above the maximum 10000"},
		{"add partitions zero", nil, []string{"--control", addr, "topic", "alter", "orders", "--partitions", "0"}, nil, "--partitions 0: give the topic's new partition count in all"},
		{"add partitions negative", nil, []string{"--control", addr, "topic", "alter", "orders", "--partitions", "-2"}, nil, "--partitions -2"},
		{"add partitions huge", nil, []string{"--control", addr, "topic", "alter", "orders", "--partitions", "4294967296"}, nil, "--partitions 4294967296"},
		{"add partitions not a number", nil, []string{"--control", addr, "topic", "alter", "orders", "--partitions", "many"}, nil, "--partitions"},
		{"add partitions unknown topic", nil, []string{"--control", addr, "topic", "alter", "nope", "--partitions", "3"}, nil, "UNKNOWN_TOPIC"},
		{"add partitions with a setting", nil, []string{"--control", addr, "topic", "alter", "orders", "--partitions", "5", "--sync-policy", "none"}, nil,
			"--partitions is given on its own, not with --sync-policy"},
		{"rpk add-partitions", nil, []string{"--control", addr, "topic", "add-partitions", "orders", "--num", "2"}, nil,
			"sq topic has no add-partitions command: grow a topic with sq topic alter orders --partitions N"},
		{"rpk add-partitions without flags", nil, []string{"--control", addr, "topic", "add-partitions", "orders"}, nil, "sq topic alter orders --partitions N"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			root := newRootCommand(nil, &out, &errOut, func(k string) string { return tc.env[k] })
			root.SetArgs(tc.args)
			err := root.ExecuteContext(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
