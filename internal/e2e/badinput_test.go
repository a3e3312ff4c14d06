package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/sdk"
)

// badInputMaxRecord is the server's --max-record-bytes in TestBadInput.
const badInputMaxRecord = 1024

// disconnectTimeout bounds how long the server may take to drop a client
// that sent garbage.
const disconnectTimeout = 10 * time.Second

// badInputEnv is what the cases of TestBadInput share.
type badInputEnv struct {
	ctx       context.Context
	srv       *server
	bystander *sdk.Client // connected through every case
}

// stillServing fails the test unless the server runs and serves both the
// client connected all along and a new one.
func (env *badInputEnv) stillServing(t *testing.T) {
	t.Helper()
	if !env.srv.running() {
		t.Fatalf("sq-server exited; log:\n%s", env.srv.log)
	}
	if _, err := env.bystander.DescribeTopic(env.ctx, "good"); err != nil {
		t.Fatalf("the connected client fails after the bad input: %v", err)
	}
	if out := sqOK(t, env.srv.addr, nil, "topic", "list"); !strings.Contains(out, "good") {
		t.Fatalf("topic list after the bad input:\n%s", out)
	}
}

// TestBadInput sends malformed and refused input to one server and checks
// each documented error, and that the server keeps serving a client that
// was connected all along and new clients.
func TestBadInput(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := startServer(t, t.TempDir(), "--max-record-bytes", "1024")
	// bystander stays connected through every case below.
	bystander, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: srv.addr, ClientID: "bystander"})
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close()
	sqOK(t, srv.addr, nil, "topic", "create", "good", "--partitions", "2")

	env := &badInputEnv{ctx: ctx, srv: srv, bystander: bystander}
	t.Run("unknown topic", func(t *testing.T) { testUnknownTopic(t, env) })
	t.Run("invalid topic names", func(t *testing.T) { testInvalidTopicNames(t, env) })
	t.Run("record over the limit", func(t *testing.T) { testRecordOverLimit(t, env) })
	t.Run("empty values", func(t *testing.T) { testEmptyValues(t, env) })
	t.Run("garbage length prefix", func(t *testing.T) { testGarbageLengthPrefix(t, env) })
	t.Run("disconnect mid-frame", func(t *testing.T) { testDisconnectMidFrame(t, env) })
	t.Run("second server on the same data directory", func(t *testing.T) { testSecondServer(t, env) })
}

// dialRaw opens a plain TCP connection to addr.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// expectDisconnect reads from nc until the server closes it, failing the
// test if it stays open for disconnectTimeout.
func expectDisconnect(t *testing.T, nc net.Conn) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(disconnectTimeout))
	_, err := io.Copy(io.Discard, nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open %v after garbage", disconnectTimeout)
	}
}

// testUnknownTopic checks the exact message for a topic that does not exist.
func testUnknownTopic(t *testing.T, env *badInputEnv) {
	const want = "sq: UNKNOWN_TOPIC: topic \"nope\" does not exist\n"
	if got := sqFails(t, env.srv.addr, nil, "consume", "--topic", "nope"); got != want {
		t.Errorf("consume: stderr %q, want %q", got, want)
	}
	if got := sqFails(t, env.srv.addr, []byte("x\n"), "produce", "--topic", "nope"); got != want {
		t.Errorf("produce: stderr %q, want %q", got, want)
	}
	if got := sqFails(t, env.srv.addr, nil, "topic", "describe", "nope"); got != want {
		t.Errorf("describe: stderr %q, want %q", got, want)
	}
	env.stillServing(t)
}

// testInvalidTopicNames creates topics with names the server must refuse.
func testInvalidTopicNames(t *testing.T, env *badInputEnv) {
	for _, name := range []string{"", strings.Repeat("t", 250), "..", "a/b"} {
		stderr := sqFails(t, env.srv.addr, nil, "topic", "create", name, "--partitions", "1")
		if name == "" {
			// The CLI refuses an empty NAME itself, before any call.
			if !strings.Contains(stderr, `empty topic NAME ""`) {
				t.Errorf("create %q: stderr %q, want the CLI's refusal of an empty NAME", name, stderr)
			}
		} else if !strings.HasPrefix(stderr, "sq: INVALID_TOPIC_NAME: ") {
			t.Errorf("create %q: stderr %q, want INVALID_TOPIC_NAME", truncate(name, 20), stderr)
		}
		_, err := env.bystander.CreateTopic(env.ctx, name, 1, sdk.TopicConfig{})
		if !errors.Is(err, api.ErrInvalidTopicName) {
			t.Errorf("SDK CreateTopic(%q): %v, want INVALID_TOPIC_NAME", truncate(name, 20), err)
		}
	}
	if entries, err := os.ReadDir(env.srv.dataDir + "/topics"); err == nil {
		for _, e := range entries {
			if e.Name() != "good" {
				t.Errorf("data directory has topics/%s after refused creates", e.Name())
			}
		}
	}
	env.stillServing(t)
}

// testRecordOverLimit sends a record one byte over --max-record-bytes with
// the CLI and, past the SDK's own check, as a hand-built batch.
func testRecordOverLimit(t *testing.T, env *badInputEnv) {
	big := strings.Repeat("x", badInputMaxRecord+1)
	r := runSQ(t, env.srv.addr, []byte("fits\n"+big+"\nafter\n"), "produce", "--topic", "good")
	if r.code != 1 || !strings.Contains(r.stderr, "MESSAGE_TOO_LARGE") || !strings.Contains(r.stderr, "line 2") {
		t.Errorf("produce of a line over the limit: status %d, stderr %q; want 1 and MESSAGE_TOO_LARGE naming line 2", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "produced 1 record to good") {
		t.Errorf("produce stdout %q: want the line before the long one acknowledged", r.stdout)
	}
	// The server's own check, without the SDK's: a hand-built batch
	// with a record one byte over the limit.
	var b batch.Builder
	b.Add(nil, []byte(big), nil, 0)
	data, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.bystander.Publish(env.ctx, "good", 0, data); !errors.Is(err, api.ErrMessageTooLarge) {
		t.Errorf("publish of a %d-byte record: %v, want MESSAGE_TOO_LARGE", len(big), err)
	}
	// The limit itself is accepted.
	b.Reset()
	b.Add(nil, []byte(big[:badInputMaxRecord]), nil, 0)
	if data, err = b.Build(); err != nil {
		t.Fatal(err)
	}
	if _, err := env.bystander.Publish(env.ctx, "good", 0, data); err != nil {
		t.Errorf("publish of a record of exactly the limit: %v", err)
	}
	env.stillServing(t)
}

// testEmptyValues round-trips empty records and the line-splitting rule.
func testEmptyValues(t *testing.T, env *badInputEnv) {
	sqOK(t, env.srv.addr, nil, "topic", "create", "empty", "--partitions", "1")
	for _, in := range []struct {
		input string
		want  []string
	}{{"", nil}, {"\n", []string{""}}, {"a\n\nb", []string{"a", "", "b"}}, {"c\n", []string{"c"}}} {
		sqOK(t, env.srv.addr, []byte(in.input), "produce", "--topic", "empty")
	}
	out := sqOK(t, env.srv.addr, nil, "consume", "--topic", "empty", "--format", "json")
	var got []string
	for _, r := range parseConsumed(t, out)[0] {
		if r.Key != nil {
			t.Errorf("offset %d: key %q, want null", r.Offset, *r.Key)
		}
		got = append(got, r.value(t))
	}
	want := []string{"", "a", "", "b", "c"}
	if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
		t.Errorf("consumed %q, want %q", got, want)
	}
	raw := sqOK(t, env.srv.addr, nil, "consume", "--topic", "empty", "--format", "raw")
	if raw != "\na\n\nb\nc\n" {
		t.Errorf("raw output %q", raw)
	}
	env.stillServing(t)
}

// testGarbageLengthPrefix sends 8 bytes of 0xff: a frame header announcing
// far more than the frame limit.
func testGarbageLengthPrefix(t *testing.T, env *badInputEnv) {
	nc := dialRaw(t, env.srv.addr)
	if _, err := nc.Write([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	expectDisconnect(t, nc)
	env.stillServing(t)
}

// testDisconnectMidFrame closes a connection inside a frame.
func testDisconnectMidFrame(t *testing.T, env *badInputEnv) {
	nc := dialRaw(t, env.srv.addr)
	// A Cap'n Proto stream header announcing one segment of 64 words,
	// then 16 of its 512 bytes, then a close.
	frame := make([]byte, 8+16)
	binary.LittleEndian.PutUint32(frame[0:], 0)  // segment count - 1
	binary.LittleEndian.PutUint32(frame[4:], 64) // words in segment 0
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	env.stillServing(t)
}

// testSecondServer starts a second server on the data directory in use.
func testSecondServer(t *testing.T, env *badInputEnv) {
	p := launch(t, nil, "serve", "--capnp-host", "127.0.0.1:0", "--data-dir", env.srv.dataDir, "--log-format", "json")
	code, ok := p.exitCode(startTimeout)
	if !ok {
		t.Fatalf("a second sq-server on the same data directory is still running; log:\n%s", p.log)
	}
	if code == 0 || !strings.Contains(strings.ToLower(p.log.String()), "lock") {
		t.Errorf("second sq-server: status %d, output %q; want non-zero and a message about the lock", code, p.log)
	}
	env.stillServing(t)
}
