package clusternet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCheckSides(t *testing.T) {
	cases := []struct {
		n     int
		sides [][]int
		err   string // substring; "" for valid
	}{
		{3, [][]int{{3}, {1, 2}}, ""},
		{3, [][]int{{1}, {2}, {3}}, ""},
		{5, [][]int{{4, 5}, {1, 2, 3}}, ""},
		{3, [][]int{{1}, {2, 3}, {}}, ""},
		{3, [][]int{{1, 2, 3}}, "at least two non-empty sides"},
		{3, [][]int{{1, 2, 3}, {}}, "at least two non-empty sides"},
		{3, nil, "nodes 1,2,3 are on no side"},
		{3, [][]int{{1}, {2}}, "nodes 3 are on no side"},
		{3, [][]int{{1, 2}, {2, 3}}, "node 2 is on two sides"},
		{3, [][]int{{1}, {2, 3, 4}}, "node 4: the cluster has nodes 1..3"},
		{3, [][]int{{0}, {1, 2, 3}}, "node 0: the cluster has nodes 1..3"},
	}
	for _, tc := range cases {
		err := checkSides(tc.n, tc.sides)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("checkSides(%d, %v): %v, want nil", tc.n, tc.sides, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("checkSides(%d, %v): %v, want an error with %q", tc.n, tc.sides, err, tc.err)
		}
	}
}

func TestPartitionRules(t *testing.T) {
	got := partitionRules([][]int{{1}, {2, 3}})
	want := "flush chain bridge sqnet forward\n" +
		"add rule bridge sqnet forward iifname \"n1\" oifname \"n2\" drop\n" +
		"add rule bridge sqnet forward iifname \"n1\" oifname \"n3\" drop\n" +
		"add rule bridge sqnet forward iifname \"n2\" oifname \"n1\" drop\n" +
		"add rule bridge sqnet forward iifname \"n3\" oifname \"n1\" drop\n"
	if got != want {
		t.Errorf("partitionRules:\n%s\nwant:\n%s", got, want)
	}
	// Three sides of one node each: every ordered pair is cut.
	if n := strings.Count(partitionRules([][]int{{1}, {2}, {3}}), "drop"); n != 6 {
		t.Errorf("three sides: %d drop rules, want 6", n)
	}
}

func TestSkipOrFail(t *testing.T) {
	reason := errors.New("network namespaces need root (running as uid 1000)")
	for _, ci := range []string{"", "false", "1", "TRUE"} {
		fail, msg := skipOrFail(reason, ci)
		if fail || !strings.Contains(msg, "skipped") || !strings.Contains(msg, "uid 1000") {
			t.Errorf("CI=%q: fail %v, %q; want a skip naming the reason", ci, fail, msg)
		}
	}
	fail, msg := skipOrFail(reason, "true")
	if !fail || !strings.Contains(msg, "CI=true") || !strings.Contains(msg, "uid 1000") {
		t.Errorf("CI=true: fail %v, %q; want a failure naming the reason", fail, msg)
	}
}

func TestStaleOwner(t *testing.T) {
	cases := []struct {
		name, tag string
		ok        bool
	}{
		{"sqnet-123.456-7-n1", "123.456", true},
		{"sqnet-123.456-7-br", "123.456", true},
		{"sqnet-123.456-probe", "123.456", true},
		{"sqnet-123-7-n1", "", false},
		{"sqnet-x.456-7-n1", "", false},
		{"other-123.456-7-n1", "", false},
		{"sqnet-", "", false},
	}
	for _, tc := range cases {
		tag, ok := staleOwner(tc.name)
		if tag != tc.tag || ok != tc.ok {
			t.Errorf("staleOwner(%q) = %q, %v; want %q, %v", tc.name, tag, ok, tc.tag, tc.ok)
		}
	}
	if tag := selfTag(); !strings.HasPrefix(tag, fmt.Sprint(os.Getpid())+".") {
		t.Errorf("selfTag %q does not start with this pid", tag)
	}
}

// TestRemoveStale leaves a namespace as a crashed test run would (its
// owner gone, a process still inside) beside one of this live process:
// only the first goes, with its process.
func TestRemoveStale(t *testing.T) {
	Require(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d.1-1-n1", namePrefix, dead.Process.Pid)
	live := namePrefix + selfTag() + "-0-live"
	for _, name := range []string{stale, live} {
		if err := run("", "ip", "netns", "add", name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = deleteNetns(name) })
	}
	left := exec.Command("ip", "netns", "exec", stale, "sleep", "600")
	left.SysProcAttr = sysProcAttr()
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- left.Wait() }()
	// ip netns exec enters the namespace after Start returns: wait until
	// the process is inside, or removeStale would find it empty.
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, err := exec.Command("ip", "netns", "pids", stale).Output()
		if err == nil && len(strings.Fields(string(out))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process inside namespace %s 10s after it was started: %v", stale, err)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not a wait for state
	}

	removed, err := removeStale()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(removed, " "), stale) || strings.Contains(strings.Join(removed, " "), live) {
		t.Errorf("removed %v: want %s and not %s", removed, stale, live)
	}
	if _, err := os.Stat(netnsDir + "/" + stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale namespace after removeStale: %v", err)
	}
	if _, err := os.Stat(netnsDir + "/" + live); err != nil {
		t.Errorf("live namespace after removeStale: %v", err)
	}
	werr := <-waited // removeStale waited until no process was left inside
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the process left in the stale namespace ended with %v, want SIGKILL", werr)
	}
}
