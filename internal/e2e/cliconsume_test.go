package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// consumeWait bounds each wait for output of a running `sq consume`; it
// only guards against hangs.
const consumeWait = 30 * time.Second

// lines splits output into its non-empty lines.
func lines(s string) []string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// produceKeyed produces n records "v<first+i>" with keys spread over the
// topic's partitions and returns the values.
func produceKeyed(t *testing.T, addr, topic string, first, n int) []string {
	t.Helper()
	var in strings.Builder
	var vals []string
	for i := first; i < first+n; i++ {
		v := fmt.Sprintf("v%d", i)
		fmt.Fprintf(&in, "key%d:%s\n", i, v)
		vals = append(vals, v)
	}
	sqOK(t, addr, []byte(in.String()), "produce", "--topic", topic, "--key-separator", ":")
	return vals
}

// TestCLIConsume covers `sq consume` as a group member (partitions shared
// between CLI and SDK members, commits of what was printed, Ctrl-C), its
// short flags, relative offsets, --from-time forms, --format templates and
// the refusal of ambiguous input.
func TestCLIConsume(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	t.Run("two CLI members share the partitions", func(t *testing.T) { testTwoCLIMembers(t, srv) })
	t.Run("CLI member with an SDK member", func(t *testing.T) { testCLIWithSDKMember(t, srv) })
	t.Run("Ctrl-C commits what was printed", func(t *testing.T) { testInterruptCommits(t, srv) })
	t.Run("relative offsets", func(t *testing.T) { testRelativeOffsets(t, srv) })
	t.Run("from-time", func(t *testing.T) { testFromTimeForms(t, srv) })
	t.Run("format template", func(t *testing.T) { testFormatTemplate(t, srv) })
	t.Run("refused input", func(t *testing.T) { testConsumeRefuses(t, srv) })
	// Last: it kills the server.
	t.Run("killed server", func(t *testing.T) { testConsumeKilledServer(t, srv) })
}

// groupMembers returns the member count `sq group describe` shows.
func groupMembers(t *testing.T, addr, group string) int {
	t.Helper()
	out := sqOK(t, addr, nil, "group", "describe", group)
	i := strings.Index(out, "Members: ")
	if i < 0 {
		t.Fatalf("group describe %s: no member count in\n%s", group, out)
	}
	n, err := strconv.Atoi(strings.Fields(out[i+len("Members: "):])[0])
	if err != nil {
		t.Fatalf("group describe %s: %v in\n%s", group, err, out)
	}
	return n
}

// assignedMembers returns, from `sq group describe`, the number of
// members and how many of them hold partitions.
func assignedMembers(t *testing.T, addr, group string) (members, holding int) {
	t.Helper()
	in := false
	for _, l := range strings.Split(sqOK(t, addr, nil, "group", "describe", group), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && f[0] == "MEMBER":
			in = true
		case len(f) == 0:
			in = false
		case in:
			members++
			if f[len(f)-1] != "-" {
				holding++
			}
		}
	}
	return members, holding
}

// waitShared polls `sq group describe` until the group is stable with n
// members, each holding partitions.
func waitShared(t *testing.T, addr, group string, n int) {
	t.Helper()
	deadline := time.Now().Add(consumeWait)
	for {
		members, holding := assignedMembers(t, addr, group)
		stable := strings.Contains(sqOK(t, addr, nil, "group", "describe", group), "State: stable")
		if members == n && holding == n && stable && groupMembers(t, addr, group) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s does not have %d members holding partitions within %v:\n%s", group, n, consumeWait, sqOK(t, addr, nil, "group", "describe", group))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkShared requires every value of want printed exactly once across
// outs (each a list of "partition offset value" lines), and each member to
// have printed from partitions no other printed from.
func checkShared(t *testing.T, want []string, outs ...[]string) {
	t.Helper()
	seen := map[string]int{}
	owner := map[string]int{}
	for i, out := range outs {
		for _, l := range out {
			f := strings.Fields(l)
			if len(f) != 3 {
				t.Fatalf("member %d printed %q, want \"partition offset value\"", i, l)
			}
			seen[f[2]]++
			if o, ok := owner[f[0]]; ok && o != i {
				t.Errorf("partition %s printed by members %d and %d", f[0], o, i)
			}
			owner[f[0]] = i
		}
	}
	for _, v := range want {
		if seen[v] != 1 {
			t.Errorf("record %s printed %d times, want once", v, seen[v])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d distinct records printed, want %d", len(seen), len(want))
	}
}

// countLines returns the number of lines the processes printed.
func countLines(outs ...*cliProc) int {
	n := 0
	for _, p := range outs {
		n += len(lines(p.stdout.String()))
	}
	return n
}

func testTwoCLIMembers(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "shared4", "--partitions", "4")
	a := startCLI(t, srv.addr, nil, "consume", "-t", "shared4", "-g", "pair", "--follow", "-f", `%p %o %v\n`)
	a.waitFor(t, a.stderr, "member a's assignment", func(s string) bool { return strings.Contains(s, "assigned partition") })
	b := startCLI(t, srv.addr, nil, "consume", "-t", "shared4", "-g", "pair", "--follow", "-f", `%p %o %v\n`)
	b.waitFor(t, b.stderr, "member b's assignment", func(s string) bool { return strings.Contains(s, "assigned partition") })
	a.waitFor(t, a.stderr, "member a's revocation", func(s string) bool {
		return strings.Contains(s, "released partition") && strings.Contains(s, "(the group is rebalancing)")
	})
	waitShared(t, srv.addr, "pair", 2)
	want := produceKeyed(t, srv.addr, "shared4", 0, 400)
	deadline := time.Now().Add(consumeWait)
	for countLines(a, b) < len(want) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range []*cliProc{a, b} {
		if code := p.interrupt(t); code != 130 {
			t.Errorf("member exited %d after SIGINT, want 130; stderr:\n%s", code, p.stderr)
		}
		if !strings.Contains(p.stderr.String(), "sq: interrupted: printed ") {
			t.Errorf("no summary after SIGINT; stderr:\n%s", p.stderr)
		}
	}
	outA, outB := lines(a.stdout.String()), lines(b.stdout.String())
	if len(outA) == 0 || len(outB) == 0 {
		t.Errorf("members printed %d and %d records; want both to hold partitions", len(outA), len(outB))
	}
	checkShared(t, want, outA, outB)
	// Both committed what they printed: nothing is left for the group.
	if out := sqOK(t, srv.addr, nil, "consume", "-t", "shared4", "-g", "pair"); out != "" {
		t.Errorf("after both members stopped the group reads %q, want nothing", truncate(out, 500))
	}
}

func testCLIWithSDKMember(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "mixed4", "--partitions", "4")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cons, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: srv.addr, Topic: "mixed4", ConsumerGroup: "mixed", AutoCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cons.Close() }) // on an early failure; Close is idempotent
	var mu sync.Mutex
	var sdkOut []string
	polled := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			msgs, err := cons.Poll(ctx)
			if err != nil && ctx.Err() == nil {
				polled <- err
				return
			}
			mu.Lock()
			for _, m := range msgs {
				sdkOut = append(sdkOut, fmt.Sprintf("%d %d %s", m.Partition, m.Offset, m.Value))
			}
			mu.Unlock()
		}
		polled <- nil
	}()
	cli := startCLI(t, srv.addr, nil, "consume", "-t", "mixed4", "-g", "mixed", "--follow", "-f", `%p %o %v\n`)
	cli.waitFor(t, cli.stderr, "the CLI member's assignment", func(s string) bool { return strings.Contains(s, "assigned partition") })
	waitShared(t, srv.addr, "mixed", 2)
	deadline := time.Now().Add(consumeWait)
	for len(cons.Assignment()) != 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := cons.Assignment(); len(got) != 2 {
		t.Fatalf("the SDK member holds %v with a CLI member in the group, want 2 partitions", got)
	}
	want := produceKeyed(t, srv.addr, "mixed4", 0, 200)
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(sdkOut) + len(lines(cli.stdout.String()))
	}
	for total() < len(want) && time.Now().Before(deadline.Add(consumeWait)) {
		time.Sleep(20 * time.Millisecond)
	}
	if code := cli.interrupt(t); code != 130 {
		t.Errorf("CLI member exited %d after SIGINT, want 130; stderr:\n%s", code, cli.stderr)
	}
	if strings.Contains(cli.stderr.String(), "FENCED") {
		t.Errorf("CLI member was fenced:\n%s", cli.stderr)
	}
	cancel()
	if err := <-polled; err != nil {
		t.Errorf("SDK member: %v", err)
	}
	if err := cons.Close(); err != nil {
		t.Errorf("SDK member close: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	checkShared(t, want, sdkOut, lines(cli.stdout.String()))
}

func testInterruptCommits(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "stopped", "--partitions", "2")
	first := produceKeyed(t, srv.addr, "stopped", 0, 40)
	p := startCLI(t, srv.addr, nil, "consume", "-t", "stopped", "-g", "cc", "--follow")
	p.waitFor(t, p.stdout, "the first records", func(s string) bool { return len(lines(s)) == len(first) })
	if code := p.interrupt(t); code != 130 {
		t.Fatalf("exit status %d after SIGINT, want 130; stderr:\n%s", code, p.stderr)
	}
	var summary string
	for _, l := range lines(p.stderr.String()) {
		if strings.HasPrefix(l, "sq: interrupted:") {
			summary = l
		}
	}
	if !strings.HasPrefix(summary, "sq: interrupted: printed 40 records of stopped; next offsets 0:") ||
		!strings.HasSuffix(summary, "; committed for group cc") {
		t.Errorf("summary %q; stderr:\n%s", summary, p.stderr)
	}
	// The summary's positions are the group's committed offsets.
	printed := map[string]string{}
	rest, _ := strings.CutSuffix(summary[strings.Index(summary, "next offsets ")+len("next offsets "):], "; committed for group cc")
	for _, pos := range strings.Fields(rest) {
		part, off, _ := strings.Cut(pos, ":")
		printed[part] = off
	}
	committed := map[string]string{}
	for _, l := range lines(sqOK(t, srv.addr, nil, "group", "describe", "cc")) {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "stopped" {
			committed[f[1]] = f[2]
		}
	}
	if fmt.Sprint(printed) != fmt.Sprint(committed) || len(printed) == 0 {
		t.Errorf("summary positions %v, committed offsets %v; want equal", printed, committed)
	}
	// A later member resumes right after: no record again, none skipped.
	more := produceKeyed(t, srv.addr, "stopped", 40, 10)
	got := lines(sqOK(t, srv.addr, nil, "consume", "-t", "stopped", "-g", "cc"))
	sort.Strings(got)
	sort.Strings(more)
	if strings.Join(got, ",") != strings.Join(more, ",") {
		t.Errorf("the next member read %v, want the records produced after the stop %v", got, more)
	}
	// Without --group, Ctrl-C prints the summary too.
	p = startCLI(t, srv.addr, nil, "consume", "-t", "stopped", "-o", "beginning", "--follow")
	p.waitFor(t, p.stdout, "every record", func(s string) bool { return len(lines(s)) == 50 })
	if code := p.interrupt(t); code != 130 {
		t.Fatalf("exit status %d after SIGINT, want 130; stderr:\n%s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "sq: interrupted: printed 50 records of stopped; next offsets 0:") {
		t.Errorf("no summary after SIGINT; stderr:\n%s", p.stderr)
	}
}

// partitionOffsets reads a whole topic with -f '%p %o' and returns each
// partition's offsets.
func partitionOffsets(t *testing.T, addr, topic string, args ...string) map[string][]int {
	t.Helper()
	out := sqOK(t, addr, nil, append([]string{"consume", "-t", topic, "-f", `%p %o\n`}, args...)...)
	got := map[string][]int{}
	for _, l := range lines(out) {
		part, off, _ := strings.Cut(l, " ")
		n, err := strconv.Atoi(off)
		if err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		got[part] = append(got[part], n)
	}
	return got
}

func testRelativeOffsets(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "tail3", "--partitions", "3")
	produceKeyed(t, srv.addr, "tail3", 0, 60)
	all := partitionOffsets(t, srv.addr, "tail3")
	for _, tc := range []struct {
		from string
		n    int
	}{{"-10", 10}, {"-1", 1}, {"-1000", 1000}, {"-0", 0}} {
		got := partitionOffsets(t, srv.addr, "tail3", "-o", tc.from)
		for part, offs := range all {
			hw := offs[len(offs)-1] + 1
			var want []int
			for o := max(0, hw-tc.n); o < hw; o++ {
				want = append(want, o)
			}
			if fmt.Sprint(got[part]) != fmt.Sprint(want) && !(len(want) == 0 && len(got[part]) == 0) {
				t.Errorf("-o %s: partition %s printed offsets %v, want %v", tc.from, part, got[part], want)
			}
		}
	}
	got := partitionOffsets(t, srv.addr, "tail3", "-o", "+2", "-p", "1")
	if len(got) != 1 || len(got["1"]) != len(all["1"])-2 || got["1"][0] != 2 {
		t.Errorf("-o +2 -p 1 printed %v, want partition 1 from offset 2 (of %v)", got, all["1"])
	}
	for _, alias := range [][2]string{{"beginning", "earliest"}, {"end", "latest"}, {"BEGINNING", "earliest"}} {
		a := partitionOffsets(t, srv.addr, "tail3", "-o", alias[0])
		b := partitionOffsets(t, srv.addr, "tail3", "--from", alias[1])
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("-o %s printed %v, --from %s %v", alias[0], a, alias[1], b)
		}
	}
	if got := partitionOffsets(t, srv.addr, "tail3", "-c", "5"); len(lines(fmt.Sprint(got))) == 0 {
		t.Errorf("-c 5 printed nothing")
	}
	if out := sqOK(t, srv.addr, nil, "consume", "-t", "tail3", "-c", "5"); len(lines(out)) != 5 {
		t.Errorf("-c 5 printed %d records, want 5", len(lines(out)))
	}
}

func testFromTimeForms(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "timed", "--partitions", "2")
	want := produceKeyed(t, srv.addr, "timed", 0, 20)
	count := func(args ...string) int {
		return len(lines(sqOK(t, srv.addr, nil, append([]string{"consume", "-t", "timed"}, args...)...)))
	}
	for _, ft := range []string{"-1h", "-30m", "1000000000s", "1000000000000ms", "1000000000000"} {
		if n := count("--from-time", ft); n != len(want) {
			t.Errorf("--from-time %s printed %d records, want all %d", ft, n, len(want))
		}
	}
	for _, ft := range []string{"4102444800s", "4102444800000ms", "2100-01-01T00:00:00Z"} {
		if n := count("--from-time", ft); n != 0 {
			t.Errorf("--from-time %s (2100) printed %d records, want none", ft, n)
		}
	}
	// The example of the documentation is accepted.
	count("--from-time", "1796079000s")
	for _, tc := range []struct{ ft, want string }{
		{"1796079000", "--from-time 1796079000: a bare number is ambiguous; looks like seconds — write 1796079000s or 1796079000000ms"},
		{"1h", "takes a minus sign"},
		{"tomorrow", "RFC 3339"},
	} {
		if stderr := sqFails(t, srv.addr, nil, "consume", "-t", "timed", "--from-time", tc.ft); !strings.Contains(stderr, tc.want) {
			t.Errorf("--from-time %s: stderr %q, want %q", tc.ft, stderr, tc.want)
		}
	}
	// With a group: partitions without a committed offset start at the time.
	if n := count("-g", "timed-g", "--from-time", "4102444800s"); n != 0 {
		t.Errorf("-g with --from-time in 2100 printed %d records, want none", n)
	}
	if n := count("-g", "timed-g2", "--from-time", "-1h"); n != len(want) {
		t.Errorf("-g with --from-time -1h printed %d records, want %d", n, len(want))
	}
}

func testFormatTemplate(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "fmt1", "--partitions", "1")
	sqOK(t, srv.addr, []byte("k1:hello\n:empty-key\nno key\n"), "produce", "--topic", "fmt1", "--key-separator", ":")
	out := sqOK(t, srv.addr, nil, "consume", "-t", "fmt1", "-f", `%t|%p|%o|%k|%v|%K|%S|100%%\t\n`)
	want := "fmt1|0|0|k1|hello|2|5|100%\t\n" + "fmt1|0|1||empty-key|0|9|100%\t\n" + "fmt1|0|2||no key|-1|6|100%\t\n"
	if out != want {
		t.Errorf("-f template printed %q, want %q", out, want)
	}
	if out := sqOK(t, srv.addr, nil, "consume", "-t", "fmt1", "-f", `%v\0`, "-c", "2"); out != "hello\x00empty-key\x00" {
		t.Errorf("-f '%%v\\0' printed %q", out)
	}
	for _, f := range []string{"JSON", "Raw"} {
		sqOK(t, srv.addr, nil, "consume", "-t", "fmt1", "-f", f)
	}
	stderr := sqFails(t, srv.addr, nil, "consume", "-t", "fmt1", "-f", "%k %x")
	for _, w := range []string{"unknown token %x", "%t topic", "%h headers"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("-f '%%k %%x': stderr %q does not contain %q", stderr, w)
		}
	}
}

func testConsumeRefuses(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "refuse2", "--partitions", "2")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-p", "-2"}, "want a partition number (0 or more)"},
		{[]string{"--partition", "-100"}, "want a partition number (0 or more)"},
		{[]string{"-p", "2"}, "has partitions 0-1, not 2"},
		{[]string{"-p", "0", "-g", "g"}, "a group member reads the partitions the group assigns it"},
		{[]string{"-o", "-10", "-g", "g"}, "-N or +N with --group"},
		{[]string{"-o", "first"}, "want earliest (or beginning), latest (or end)"},
		{[]string{"-o", "end", "--from-time", "-1h"}, "cannot be combined"},
		{[]string{"-c", "-1"}, "want 0 (no limit) or more"},
	} {
		stderr := sqFails(t, srv.addr, nil, append([]string{"consume", "-t", "refuse2"}, tc.args...)...)
		if !strings.Contains(stderr, tc.want) || !strings.HasPrefix(stderr, "sq: ") {
			t.Errorf("sq consume %v: stderr %q, want %q", tc.args, stderr, tc.want)
		}
	}
	// -1 stays the documented spelling of all partitions, as does "all".
	sqOK(t, srv.addr, nil, "consume", "-t", "refuse2", "-p", "-1")
	sqOK(t, srv.addr, nil, "consume", "-t", "refuse2", "-p", "all")
}

func testConsumeKilledServer(t *testing.T, srv *server) {
	sqOK(t, srv.addr, nil, "topic", "create", "gone", "--partitions", "2")
	produceKeyed(t, srv.addr, "gone", 0, 10)
	// --follow keeps retrying, and Ctrl-C stops at once.
	plain := startCLI(t, srv.addr, nil, "consume", "-t", "gone", "--follow")
	member := startCLI(t, srv.addr, nil, "consume", "-t", "gone", "-g", "gone-g", "--follow")
	for _, p := range []*cliProc{plain, member} {
		p.waitFor(t, p.stdout, "the records", func(s string) bool { return len(lines(s)) == 10 })
	}
	srv.kill()
	for _, p := range []*cliProc{plain, member} {
		p.waitFor(t, p.stderr, "the retry notice", func(s string) bool { return strings.Contains(s, "retrying until it answers") })
		if code := p.interrupt(t); code != 130 {
			t.Errorf("exit status %d after SIGINT, want 130; stderr:\n%s", code, p.stderr)
		}
		if !strings.Contains(p.stderr.String(), "sq: interrupted: printed 10 records of gone") {
			t.Errorf("no summary after SIGINT; stderr:\n%s", p.stderr)
		}
	}
	// Without --follow the command fails, naming the address.
	for _, args := range [][]string{{"consume", "-t", "gone"}, {"consume", "-t", "gone", "-g", "gone-g"}} {
		if stderr := sqFails(t, srv.addr, nil, args...); !strings.Contains(stderr, srv.addr) {
			t.Errorf("sq %v against a killed server: stderr %q does not name %s", args, stderr, srv.addr)
		}
	}
}

// TestCLIConsumeServerDiesMidRead kills the server (SIGKILL), or stops it
// (SIGSTOP: it keeps its connections and answers nothing), while `sq
// consume` (without --follow; alone and as a group member) is in the
// middle of a topic: it must fail saying it lost the server at its address
// instead of waiting for the server. The consumer's stdout is not read
// until the server is gone, so it blocks after at most a few MiB of the
// 6 MiB partition.
func TestCLIConsumeServerDiesMidRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		stop bool // SIGSTOP instead of SIGKILL
	}{
		{"alone killed", []string{"consume", "-t", "big"}, false},
		{"group member killed", []string{"consume", "-t", "big", "-g", "big-g"}, false},
		{"alone stopped", []string{"consume", "-t", "big"}, true},
		{"group member stopped", []string{"consume", "-t", "big", "-g", "big-g"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testConsumeServerGone(t, tc.args, tc.stop)
		})
	}
}

// serverGoneWait guards the wait for `sq consume` to give up on a server
// that stopped answering: the probe's --timeout (5 s), the consumer's
// request bound and, for a group member, the final commit's, with room.
const serverGoneWait = 90 * time.Second

func testConsumeServerGone(t *testing.T, args []string, stop bool) {
	srv := startServer(t, t.TempDir())
	sqOK(t, srv.addr, nil, "topic", "create", "big", "--partitions", "1")
	line := strings.Repeat("x", 1023) + "\n"
	sqOK(t, srv.addr, []byte(strings.Repeat(line, 6<<10)), "produce", "--topic", "big")
	cmd := exec.Command(bins.cli, append([]string{"--server", srv.addr}, args...)...)
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := newLogBuffer()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	first := make([]byte, len(line))
	if _, err := io.ReadFull(stdout, first); err != nil {
		t.Fatalf("first record: %v; stderr:\n%s", err, stderr)
	}
	if stop {
		if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.cmd.Process.Signal(syscall.SIGCONT) })
	} else {
		srv.kill()
	}
	n, _ := io.Copy(io.Discard, stdout) // until sq exits
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-time.After(serverGoneWait):
		t.Fatalf("sq %v did not exit within %v of the server's end; stderr:\n%s", args, serverGoneWait, stderr)
	}
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("sq %v: %v after printing %d more bytes, want exit status 1; stderr:\n%s", args, werr, n, stderr)
	}
	if total := int64(len(line)) + n; total >= int64(len(line))*(6<<10) {
		t.Fatalf("sq printed the whole partition (%d bytes) before the server ended", total)
	}
	if !strings.Contains(stderr.String(), "sq: stopped: printed ") {
		t.Errorf("stderr does not say what was printed:\n%s", stderr)
	}
	if want := "lost the SQ server at " + srv.addr; !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "set the address") {
		t.Errorf("stderr does not say %q (or points at the address as if it were wrong):\n%s", want, stderr)
	}
	if stop && !strings.Contains(stderr.String(), "no answer within 5s (--timeout)") {
		t.Errorf("stderr does not say the stopped server did not answer:\n%s", stderr)
	}
}
