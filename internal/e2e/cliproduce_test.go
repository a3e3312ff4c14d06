package e2e

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// endlessLines feeds numbered lines into w until w fails (the reader is
// gone) and reports how many bytes were written so far.
type endlessLines struct {
	mu      sync.Mutex
	written int
	changed chan struct{}
	done    chan struct{}
	// reader, when set, is the process reading the lines: its exit ends
	// a wait for more of them.
	reader *cliProc
}

func feedLines(w io.WriteCloser) *endlessLines {
	e := &endlessLines{changed: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(e.done)
		defer w.Close()
		var buf []byte
		for i := 0; ; i++ {
			buf = fmt.Appendf(buf[:0], "record %d of an endless stream\n", i)
			if _, err := w.Write(buf); err != nil {
				return
			}
			e.mu.Lock()
			e.written += len(buf)
			if e.written%(64<<10) < len(buf) {
				close(e.changed)
				e.changed = make(chan struct{})
			}
			e.mu.Unlock()
		}
	}()
	return e
}

// readerExited is closed when the reading process exited; nil (never
// ready) without one.
func (e *endlessLines) readerExited() <-chan struct{} {
	if e.reader == nil {
		return nil
	}
	return e.reader.exited
}

// waitWritten waits until n bytes were taken by the reader.
func (e *endlessLines) waitWritten(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(exitGuard)
	for {
		e.mu.Lock()
		w, changed := e.written, e.changed
		e.mu.Unlock()
		if w >= n {
			return
		}
		select {
		case <-changed:
		case <-e.done:
			t.Fatalf("the reader stopped after %d bytes", w)
		case <-e.readerExited():
			t.Fatalf("sq exited (%v) after reading %d of %d bytes; stdout:\n%s\nstderr:\n%s", e.reader.err, w, n, e.reader.stdout, e.reader.stderr)
		case <-deadline:
			t.Fatalf("only %d of %d bytes read within %v", w, n, exitGuard)
		}
	}
}

// produceStream starts `sq produce` on topic with an endless stdin and
// waits until it has read a few MB (so it is sending).
func produceStream(t *testing.T, srv *server, topic string, extra ...string) *cliProc {
	t.Helper()
	c, _ := produceStreamFeed(t, srv, topic, extra...)
	return c
}

// produceStreamFeed is produceStream that also returns the feed of the
// endless input.
func produceStreamFeed(t *testing.T, srv *server, topic string, extra ...string) (*cliProc, *endlessLines) {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pr.Close() })
	c := startCLI(t, srv.addr, pr, append([]string{"produce", "-t", topic}, extra...)...)
	feed := feedLines(pw)
	feed.reader = c
	feed.waitWritten(t, 4<<20)
	return c, feed
}

// bytesWritten returns how many bytes the reader took so far.
func (e *endlessLines) bytesWritten() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.written
}

// A server killed and restarted on the same address under `sq produce`
// costs retries, not records: the CLI goes on reading its input after the
// restart (with and without -p, whose publishes the CLI retries itself).
func TestCLIProduceRidesOutARestart(t *testing.T) {
	for _, extra := range [][]string{nil, {"-p", "1"}} {
		t.Run(fmt.Sprint("args ", extra), func(t *testing.T) {
			addr, flags := fixedAddrs(t)
			dir := t.TempDir()
			srv := startServer(t, dir, flags...)
			sqOK(t, srv.addr, nil, "topic", "create", "stream", "--partitions", "2")
			c, feed := produceStreamFeed(t, srv, "stream", extra...)
			srv.kill()
			before := feed.bytesWritten()
			srv = startServer(t, dir, flags...)
			if srv.addr != addr {
				t.Fatalf("restarted server listens on %s, want %s", srv.addr, addr)
			}
			feed.waitWritten(t, before+(8<<20))
			c.signal(t, os.Interrupt)
			if code := c.exitCode(t); code != 130 {
				t.Fatalf("exit status %d after SIGINT, want 130; stdout:\n%s\nstderr:\n%s", code, c.stdout, c.stderr)
			}
			if !strings.HasPrefix(c.stdout.String(), "produced ") || !strings.HasPrefix(c.stderr.String(), "sq: interrupted: ") {
				t.Fatalf("stdout:\n%s\nstderr:\n%s", c.stdout, c.stderr)
			}
		})
	}
}

// Killing the server under `sq produce` of an endless stdin, then Ctrl-C:
// sq prints what was acknowledged, one line with the count of records not
// acknowledged and the server's address, and exits with status 130.
func TestCLIProduceInterruptAfterServerDied(t *testing.T) {
	srv := startServer(t, t.TempDir())
	sqOK(t, srv.addr, nil, "topic", "create", "stream", "--partitions", "2")
	c := produceStream(t, srv, "stream")
	srv.kill()
	c.signal(t, os.Interrupt)
	if code := c.exitCode(t); code != 130 {
		t.Fatalf("exit status %d after SIGINT, want 130; stdout:\n%s\nstderr:\n%s", code, c.stdout, c.stderr)
	}
	if !strings.HasPrefix(c.stdout.String(), "produced ") {
		t.Fatalf("stdout lacks the summary of what was acknowledged:\n%s", c.stdout)
	}
	stderr := c.stderr.String()
	if !strings.HasPrefix(stderr, "sq: interrupted: ") || !strings.Contains(stderr, srv.addr) || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("stderr is not one line naming the server %s:\n%s", srv.addr, stderr)
	}
	if !strings.Contains(stderr, "not acknowledged") && !strings.Contains(stderr, "acknowledged; the input after them was not sent") {
		t.Fatalf("stderr does not say what was acknowledged:\n%s", stderr)
	}
}

// Without Ctrl-C, `sq produce` against a server that died gives up within
// the SDK's retries: exit status 1, one line with the count of records not
// acknowledged, their line numbers and the address.
func TestCLIProduceServerDiedExitsWithCount(t *testing.T) {
	for _, extra := range [][]string{nil, {"-p", "1"}} {
		t.Run(fmt.Sprint("args ", extra), func(t *testing.T) { produceUntilServerDies(t, extra) })
	}
}

func produceUntilServerDies(t *testing.T, extra []string) {
	srv := startServer(t, t.TempDir())
	sqOK(t, srv.addr, nil, "topic", "create", "stream", "--partitions", "2")
	c := produceStream(t, srv, "stream", extra...)
	srv.kill()
	if code := c.exitCode(t); code != 1 {
		t.Fatalf("exit status %d, want 1; stdout:\n%s\nstderr:\n%s", code, c.stdout, c.stderr)
	}
	stderr := c.stderr.String()
	want := "records not acknowledged (lines "
	if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, want) ||
		!strings.Contains(stderr, "server "+srv.addr+" unreachable") {
		t.Fatalf("stderr is not one line with %q and %q:\n%s", want, "server "+srv.addr+" unreachable", stderr)
	}
	var failed, sent int
	if _, err := fmt.Sscanf(stderr, "sq: %d of %d records", &failed, &sent); err != nil || failed < 1 || failed > sent {
		t.Fatalf("stderr does not count the records (%v):\n%s", err, stderr)
	}
	if !strings.Contains(c.stdout.String(), fmt.Sprintf("(%d not acknowledged)", failed)) {
		t.Fatalf("stdout summary does not count the %d records:\n%s", failed, c.stdout)
	}
}

// benchProgress waits for the first progress line of a bench run (stderr
// is not a terminal) so the run is publishing.
func benchProgress(t *testing.T, c *cliProc) {
	t.Helper()
	c.waitFor(t, c.stderr, "a progress line", func(s string) bool {
		return strings.Contains(s, "sq bench produce: ") && strings.Contains(s, "s: acked ")
	})
}

// Killing the server under `sq bench produce --count <big>`, then Ctrl-C:
// the partial results are printed, written to --json with "interrupted":
// true, and sq exits with status 130.
func TestCLIBenchInterruptAfterServerDied(t *testing.T) {
	srv := startServer(t, t.TempDir())
	grpcAddr, _ := controlAddrs(t, srv)
	jsonFile := filepath.Join(t.TempDir(), "partial.json")
	c := startCLI(t, srv.addr, nil, "--control", grpcAddr, "bench", "produce", "--count", "2000000000", "--json", jsonFile)
	benchProgress(t, c)
	if strings.Contains(c.stderr.String(), "consumed") {
		t.Fatalf("produce-mode progress mentions consumers:\n%s", c.stderr)
	}
	srv.kill()
	c.signal(t, os.Interrupt)
	if code := c.exitCode(t); code != 130 {
		t.Fatalf("exit status %d after SIGINT, want 130; stdout:\n%s\nstderr:\n%s", code, c.stdout, c.stderr)
	}
	out := c.stdout.String()
	for _, want := range []string{"interrupted after ", "partial results", "records/s", "ack latency", "conditions:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("partial results lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "consumed") || strings.Contains(out, "consume ") {
		t.Fatalf("produce-mode results mention consumers:\n%s", out)
	}
	data, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatalf("--json after Ctrl-C: %v", err)
	}
	var res struct {
		Interrupted bool `json:"interrupted"`
	}
	if err := json.Unmarshal(data, &res); err != nil || !res.Interrupted {
		t.Fatalf("--json after Ctrl-C: interrupted %v (%v), want true:\n%s", res.Interrupted, err, data)
	}
}

// A second Ctrl-C ends sq at once when the first one left it waiting: here
// on a server that is stopped (SIGSTOP), so the topic clean-up after the
// partial results cannot finish.
func TestCLIBenchSecondInterruptExitsAtOnce(t *testing.T) {
	srv := startServer(t, t.TempDir())
	grpcAddr, _ := controlAddrs(t, srv)
	c := startCLI(t, srv.addr, nil, "--control", grpcAddr, "bench", "produce", "--count", "2000000000")
	benchProgress(t, c)
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.cmd.Process.Signal(syscall.SIGCONT) })
	c.signal(t, os.Interrupt)
	c.waitFor(t, c.stdout, "partial results", func(s string) bool { return strings.Contains(s, "conditions:") })
	c.signal(t, os.Interrupt)
	if code := c.exitCode(t); code != 130 {
		t.Fatalf("exit status %d after two SIGINTs, want 130; stdout:\n%s\nstderr:\n%s", code, c.stdout, c.stderr)
	}
	if !strings.Contains(c.stderr.String(), "sq: interrupted again, exiting now") {
		t.Fatalf("stderr lacks the second interrupt:\n%s", c.stderr)
	}
	_ = srv.cmd.Process.Signal(syscall.SIGCONT)
}

// After one Ctrl-C on a server that is stopped (SIGSTOP), the clean-up of
// the bench topic gives up within its bound and says why, naming the
// server, and sq exits with status 130.
func TestCLIBenchTopicCleanupBoundedOnStoppedServer(t *testing.T) {
	// Parallel: after the server is gone or stopped the run only waits.
	t.Parallel()
	srv := startServer(t, t.TempDir())
	grpcAddr, _ := controlAddrs(t, srv)
	c := startCLI(t, srv.addr, nil, "--control", grpcAddr, "bench", "produce", "--count", "2000000000")
	benchProgress(t, c)
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.cmd.Process.Signal(syscall.SIGCONT) })
	c.signal(t, os.Interrupt)
	if code := c.exitCode(t); code != 130 {
		t.Fatalf("exit status %d after SIGINT, want 130; stdout:\n%s\nstderr:\n%s", code, c.stdout, c.stderr)
	}
	want := "could not delete topic sq-bench-"
	if s := c.stderr.String(); !strings.Contains(s, want) || !strings.Contains(s, ": no answer from "+srv.addr+" within 10s") {
		t.Fatalf("stderr does not say the clean-up got no answer from %s:\n%s", srv.addr, s)
	}
}

// Killing the server during the publish phase of `sq bench consume`,
// without Ctrl-C: the run gives up within the SDK's delivery timeout,
// does not start reading back (no consumer dialing a dead server, whose
// error would point at --server), and ends as `sq produce` does: the
// count of records not acknowledged and the server's address, status 1.
func TestCLIBenchConsumeServerDiedWhilePublishing(t *testing.T) {
	// Parallel: after the server is gone or stopped the run only waits.
	t.Parallel()
	srv := startServer(t, t.TempDir())
	grpcAddr, _ := controlAddrs(t, srv)
	c := startCLI(t, srv.addr, nil, "--control", grpcAddr, "bench", "consume", "--count", "2000000000")
	c.waitFor(t, c.stderr, "a progress line", func(s string) bool {
		return strings.Contains(s, "sq bench consume: ") && strings.Contains(s, "s: acked ")
	})
	srv.kill()
	if code := c.exitCode(t); code != 1 {
		t.Fatalf("exit status %d, want 1; stdout:\n%s\nstderr:\n%s", code, c.stdout, c.stderr)
	}
	if out := c.stdout.String(); !strings.Contains(out, "consume  not run (the publish phase did not complete)") {
		t.Errorf("the report does not say the read phase did not run:\n%s", out)
	}
	stderr := c.stderr.String()
	want := "records not acknowledged: server " + srv.addr + " unreachable"
	if !strings.Contains(stderr, want) || strings.Contains(stderr, "set the address") {
		t.Errorf("stderr does not say %q (or points at --server):\n%s", want, stderr)
	}
}

// jsonRecord is one line of `sq consume --format json`, with headers.
type jsonRecord struct {
	consumedRecord
	Headers []struct {
		Key           string `json:"key"`
		Value         string `json:"value"`
		ValueEncoding string `json:"value_encoding"`
	} `json:"headers"`
}

// consumeAll reads topic from the start as JSON records, in offset order
// of its only partition.
func consumeAll(t *testing.T, addr, topic string) []jsonRecord {
	t.Helper()
	out := sqOK(t, addr, nil, "consume", "--topic", topic, "--from", "earliest", "--format", "json")
	var recs []jsonRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var r jsonRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("consume output %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

// key decodes a record's key; "<nil>" when it has none.
func (r jsonRecord) key(t *testing.T) string {
	t.Helper()
	if r.Key == nil {
		return "<nil>"
	}
	if r.KeyEncoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(*r.Key)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return *r.Key
}

// -H headers, -k and -p come back through `sq consume --format json`;
// --delimiter splits binary input at NUL and at multi-byte delimiters;
// --value-file sends a binary file byte for byte as one record.
func TestCLIProduceKeysHeadersDelimitersValueFile(t *testing.T) {
	srv := startServer(t, t.TempDir())
	t.Run("headers and key", func(t *testing.T) {
		sqOK(t, srv.addr, nil, "topic", "create", "hdr", "--partitions", "3")
		out := sqOK(t, srv.addr, []byte("a\nb\n"), "produce", "-t", "hdr", "-p", "2", "-k", "user-7",
			"-H", "source=web", "--header", "trace=", "-H", "eq=a=b")
		if !strings.Contains(out, "produced 2 records to hdr: partition 2 offsets 0-1") {
			t.Fatalf("summary %q", out)
		}
		recs := consumeAll(t, srv.addr, "hdr")
		if len(recs) != 2 {
			t.Fatalf("%d records, want 2", len(recs))
		}
		for i, r := range recs {
			if r.Partition != 2 || r.value(t) != []string{"a", "b"}[i] || r.key(t) != "user-7" {
				t.Fatalf("record %d: partition %d key %q value %q", i, r.Partition, r.key(t), r.value(t))
			}
			got := fmt.Sprint(r.Headers)
			if want := "[{source web } {trace  } {eq a=b }]"; got != want {
				t.Fatalf("record %d headers %s, want %s", i, got, want)
			}
		}
	})
	t.Run("delimiters", func(t *testing.T) {
		for i, tc := range []struct {
			delim string
			in    string
			want  []string
		}{
			{`\0`, "a\x00b\x00\x00c\x00", []string{"a", "b", "", "c"}},
			{`\0`, "x\ny\x00z", []string{"x\ny", "z"}},
			{`\r\n`, "one\r\ntwo\nstill two\r\n\r\nfour", []string{"one", "two\nstill two", "", "four"}},
			{`--`, "a---b--", []string{"a", "-b"}},
			{`\t`, "k1\tk2", []string{"k1", "k2"}},
			{`\x1e`, "r1\x1er2\x1e", []string{"r1", "r2"}},
		} {
			topic := fmt.Sprintf("delim-%d", i)
			sqOK(t, srv.addr, nil, "topic", "create", topic, "--partitions", "1")
			sqOK(t, srv.addr, []byte(tc.in), "produce", "-t", topic, "--delimiter", tc.delim)
			recs := consumeAll(t, srv.addr, topic)
			var got []string
			for _, r := range recs {
				got = append(got, r.value(t))
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("--delimiter %s of %q: records %q, want %q", tc.delim, tc.in, got, tc.want)
			}
		}
	})
	t.Run("key separator escapes", func(t *testing.T) {
		sqOK(t, srv.addr, nil, "topic", "create", "tsv", "--partitions", "1")
		sqOK(t, srv.addr, []byte("user-1\t{\"a\":1}\nno tab here\n\tempty key\nk\\tliteral\n"), "produce", "-t", "tsv", "--key-separator", `\t`)
		recs := consumeAll(t, srv.addr, "tsv")
		var got []string
		for _, r := range recs {
			got = append(got, r.key(t)+"|"+r.value(t))
		}
		want := []string{`user-1|{"a":1}`, "<nil>|no tab here", "|empty key", `<nil>|k\tliteral`}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
			t.Fatalf("--key-separator '\\t': key|value %q, want %q", got, want)
		}
	})
	t.Run("value file", func(t *testing.T) {
		sqOK(t, srv.addr, nil, "topic", "create", "blob", "--partitions", "1")
		data := make([]byte, 300_000)
		for i := range data {
			data[i] = byte(i*7 + i/256)
		}
		data = append(data, "\x00\x00tail\r\nwithout a final newline\x00x"...)
		path := filepath.Join(t.TempDir(), "blob.bin")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sqOK(t, srv.addr, nil, "produce", "-t", "blob", "--value-file", path, "-k", "blob.bin")
		sqOK(t, srv.addr, data, "produce", "-t", "blob", "--value-file", "-")
		sqOK(t, srv.addr, []byte{}, "produce", "-t", "blob", "--value-file", "-")
		recs := consumeAll(t, srv.addr, "blob")
		if len(recs) != 3 {
			t.Fatalf("%d records, want 3 (one per --value-file)", len(recs))
		}
		for i, want := range [][]byte{data, data, {}} {
			if got := recs[i].value(t); !bytes.Equal([]byte(got), want) {
				t.Fatalf("record %d: %d bytes differ from the %d of the file", i, len(got), len(want))
			}
		}
		if recs[0].key(t) != "blob.bin" || recs[1].key(t) != "<nil>" {
			t.Fatalf("keys %q %q", recs[0].key(t), recs[1].key(t))
		}
	})
	t.Run("refused", func(t *testing.T) {
		sqOK(t, srv.addr, nil, "topic", "create", "refuse", "--partitions", "1")
		big := filepath.Join(t.TempDir(), "big")
		if err := os.WriteFile(big, make([]byte, 2<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"-p", "-2"}, "--partition -2: a partition is 0 or more, or -1 for any partition"},
			{[]string{"--partition", "-7"}, "--partition -7"},
			{[]string{"-H", "novalue"}, `-H "novalue": a header is name=value`},
			{[]string{"-H", "=v"}, "the header name is empty"},
			{[]string{"-k", "a", "--key-separator", ":"}, "not both"},
			{[]string{"--delimiter", ""}, "--delimiter must not be empty"},
			{[]string{"--delimiter", `\q`}, `unknown escape \q`},
			{[]string{"--delimiter", `\x4`}, "two hex digits"},
			{[]string{"--value-file", big}, "record limit of"},
			{[]string{"--value-file", "-", "--delimiter", `\0`}, "--delimiter does not apply"},
			{[]string{"--value-file", filepath.Join(t.TempDir(), "missing")}, "--value-file: open"},
			{[]string{"--value-file", t.TempDir()}, "is a directory; give a file"},
			{[]string{"--file", t.TempDir()}, "is a directory; give a file"},
			{[]string{"--key-separator", ""}, "--key-separator must not be empty"},
			{[]string{"--key-separator", `\q`}, `--key-separator "\\q": unknown escape \q`},
		} {
			stderr := sqFails(t, srv.addr, []byte("x"), append([]string{"produce", "-t", "refuse"}, tc.args...)...)
			if !strings.Contains(stderr, tc.want) || !strings.HasPrefix(stderr, "sq: ") {
				t.Errorf("sq produce %v: stderr %q, want %q", tc.args, stderr, tc.want)
			}
		}
		if recs := consumeAll(t, srv.addr, "refuse"); len(recs) != 0 {
			t.Fatalf("refused commands stored %d records", len(recs))
		}
	})
}
