package e2e

import (
	"bufio"
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// followTimeout bounds the wait for a record to reach `sq consume
// --follow`'s output.
const followTimeout = 20 * time.Second

// TestCLIKeysGroupsFollow covers the CLI features around the plain round
// trip: keys from --key-separator, consumer groups resuming from committed
// offsets (also across a SIGKILL of the server), --follow stopped by SIGINT
// with a commit, and an unreachable server.
func TestCLIKeysGroupsFollow(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())

	t.Run("keys", func(t *testing.T) { testKeys(t, srv) })
	t.Run("group resumes", func(t *testing.T) { testGroupResumes(t, srv) })
	t.Run("follow and SIGINT", func(t *testing.T) { testFollowSIGINT(t, srv) })
	t.Run("unreachable server", func(t *testing.T) { testUnreachable(t, srv) })

	// Last, as it replaces the server.
	t.Run("group offsets survive SIGKILL", func(t *testing.T) { testGroupOffsetsSurviveKill(t, srv) })
}

// testKeys produces keyed lines and checks each key stays in one partition,
// in order.
func testKeys(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "keyed", "--partitions", "4")
	var in strings.Builder
	for i := range 200 {
		in.WriteString("key" + string(rune('a'+i%7)) + ":" + strings.Repeat("v", i) + "\n")
	}
	in.WriteString("no separator here\n")
	sqOK(t, srv.addr, []byte(in.String()), "produce", "--topic", "keyed", "--key-separator", ":")
	got := parseConsumed(t, sqOK(t, srv.addr, nil, "consume", "--topic", "keyed", "--format", "json"))
	partOf := map[string]uint32{}
	lastLen := map[string]int{}
	total := 0
	for p, recs := range got {
		for _, r := range recs {
			total++
			if r.Key == nil {
				if r.value(t) != "no separator here" {
					t.Errorf("keyless record %q", r.value(t))
				}
				continue
			}
			k := *r.Key
			if q, ok := partOf[k]; ok && q != p {
				t.Errorf("key %q in partitions %d and %d", k, q, p)
			}
			partOf[k] = p
			if l, ok := lastLen[k]; ok && len(r.value(t)) <= l {
				t.Errorf("key %q: value of length %d after %d: out of order", k, len(r.value(t)), l)
			}
			lastLen[k] = len(r.value(t))
		}
	}
	if total != 201 || len(partOf) != 7 {
		t.Errorf("consumed %d records with %d keys, want 201 and 7", total, len(partOf))
	}
}

// testGroupResumes reads a topic in two runs of one group.
func testGroupResumes(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "grouped", "--partitions", "1")
	sqOK(t, srv.addr, []byte("1\n2\n3\n4\n5\n"), "produce", "--topic", "grouped")
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "grouped", "--group", "g", "--count", "2"); out != "1\n2\n" {
		t.Fatalf("first read %q", out)
	}
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "grouped", "--group", "g"); out != "3\n4\n5\n" {
		t.Fatalf("second read %q, want the records after the committed offset", out)
	}
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "grouped", "--group", "g"); out != "" {
		t.Fatalf("third read %q, want nothing", out)
	}
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "grouped", "--from", "3"); out != "4\n5\n" {
		t.Fatalf("--from 3 read %q", out)
	}
}

// testFollowSIGINT follows a topic, stops with SIGINT and checks the commit.
func testFollowSIGINT(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "followed", "--partitions", "2")
	sqOK(t, srv.addr, []byte("a\nb\n"), "produce", "--topic", "followed")
	cmd := exec.Command(bins.cli, "--server", srv.addr, "consume", "--topic", "followed", "--group", "fg", "--follow")
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	expect := func(want ...string) {
		t.Helper()
		seen := map[string]bool{}
		deadline := time.After(followTimeout)
		for len(seen) < len(want) {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("consume --follow ended early; stderr:\n%s", stderr.String())
				}
				seen[l] = true
			case <-deadline:
				t.Fatalf("consume --follow printed %v within %v, want %v", seen, followTimeout, want)
			}
		}
		for _, w := range want {
			if !seen[w] {
				t.Fatalf("consume --follow printed %v, want %v", seen, want)
			}
		}
	}
	expect("a", "b")
	sqOK(t, srv.addr, []byte("c\nd\n"), "produce", "--topic", "followed")
	expect("c", "d")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range lines { // drain until the process closes stdout
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("consume --follow after SIGINT: %v, want exit status 130; stderr:\n%s", err, stderr.String())
	}
	// The group's offsets were committed at the stop.
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "followed", "--group", "fg"); out != "" {
		t.Fatalf("after the committed stop the group reads %q, want nothing", out)
	}
	sqOK(t, srv.addr, []byte("e\n"), "produce", "--topic", "followed")
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "followed", "--group", "fg"); out != "e\n" {
		t.Fatalf("the group reads %q, want only the new record", out)
	}
}

// testUnreachable checks the error for a server that is not there, named by
// --server or SQ_SERVER.
func testUnreachable(t *testing.T, srv *server) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	stderr := sqFails(t, dead, nil, "topic", "list")
	for _, want := range []string{dead, "--server", "SQ_SERVER"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not name %q", stderr, want)
		}
	}
	// SQ_SERVER is used when --server is absent.
	cmd := exec.Command(bins.cli, "topic", "list")
	cmd.Env = cleanEnv("SQ_SERVER=" + dead)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), dead) {
		t.Errorf("SQ_SERVER=%s sq topic list: %v, output %q; want a failure naming the address", dead, err, out)
	}
	cmd = exec.Command(bins.cli, "topic", "list")
	cmd.Env = cleanEnv("SQ_SERVER=" + srv.addr)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("SQ_SERVER=%s sq topic list: %v, output %q", srv.addr, err, out)
	}
}

// testGroupOffsetsSurviveKill commits, SIGKILLs the server and resumes.
func testGroupOffsetsSurviveKill(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "durable", "--partitions", "1")
	sqOK(t, srv.addr, []byte("1\n2\n3\n4\n"), "produce", "--topic", "durable")
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "durable", "--group", "dg", "--count", "3"); out != "1\n2\n3\n" {
		t.Fatalf("first read %q", out)
	}
	srv.kill()
	srv = startServer(t, srv.dataDir)
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "durable", "--group", "dg"); out != "4\n" {
		t.Fatalf("after SIGKILL the group reads %q, want the record after its committed offset", out)
	}
}
