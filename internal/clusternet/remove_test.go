package clusternet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRemoveLiveNode removes a running node that is not the controller
// with `sq cluster remove-node`: the node logs an ERROR saying it was
// removed and what to do, records removed_at in its node.json and exits
// with status 1; the others list two members; a restart on its data
// directory is refused at once with an error that says why, and exits 1.
func TestRemoveLiveNode(t *testing.T) {
	c := newCluster(t, 3)
	startCluster(t, c)
	ctl, err := controllerOf(t, c, 1, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	vi := 3
	if ctl == 3 {
		vi = 2
	}
	victim, ctlNode := c.Node(vi), c.Node(ctl)
	vid := fmt.Sprintf("node-%d", vi)
	proc := victim.Process()
	sqOK(t, c.Client(), ctlNode.Addr, "", "--control", grpcAddr(ctlNode), "cluster", "remove-node", vid)

	code, sig, ok := proc.ExitStatus(waitTimeout)
	if !ok || code != 1 {
		t.Fatalf("removed node: exited %v, status %d, signal %v; want status 1; log:\n%s", ok, code, sig, tailOf(proc.Log(), 40))
	}
	var logged bool
	for _, line := range strings.Split(proc.Log(), "\n") {
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "ERROR" &&
			strings.Contains(rec.Msg, "removed from the cluster") && strings.Contains(rec.Msg, "--data-dir") {
			logged = true
		}
	}
	if !logged {
		t.Errorf("no ERROR saying the node was removed and what to do; log:\n%s", tailOf(proc.Log(), 40))
	}
	b, err := os.ReadFile(filepath.Join(victim.DataDir, "cluster", "node.json"))
	if err != nil || !strings.Contains(string(b), `"removed_at"`) {
		t.Errorf("node.json after the removal: %s (%v)", b, err)
	}
	eventually(t, "two members left", func() error {
		ms, err := members(t, c, ctlNode.Addr, grpcAddr(ctlNode))
		if err != nil {
			return err
		}
		if len(ms) != 2 {
			return fmt.Errorf("members %+v, want 2", ms)
		}
		for _, m := range ms {
			if m.NodeID == vid || m.State != "alive" {
				return fmt.Errorf("members %+v: want the two others alive", ms)
			}
		}
		return nil
	})

	// A restart on the removed data directory is refused.
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := victim.Command(ctx, bins.server, victim.ServerArgs("--seeds", grpcAddr(c.Node(1)))...)
	cmd.Dir = victim.Dir
	cmd.Env = append(cmd.Env, "SQ_DATA_DIR="+victim.DataDir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("restart on the removed data directory: %v (context %v), want exit status 1; output:\n%s", err, ctx.Err(), out)
	}
	for _, w := range []string{"removed from cluster", vid, "--data-dir"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("the refused restart does not say %q:\n%s", w, out)
		}
	}
}
