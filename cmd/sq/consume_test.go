package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/internal/testnet"
)

// consumeBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type consumeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *consumeBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *consumeBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// execConsumeCLI runs the sq command line with args and stdin under ctx
// and returns its stdout, stderr and error.
func execConsumeCLI(ctx context.Context, stdin string, args ...string) (string, string, error) {
	var out, errOut consumeBuffer
	root := newRootCommand(strings.NewReader(stdin), &out, &errOut, func(string) string { return "" })
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// Bad flag values and combinations are refused before sq connects: the
// server address is closed, so reaching it would give another error.
func TestConsumeRefusesBadInput(t *testing.T) {
	addr := testnet.FreeAddr(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-p", "-2"}, `invalid argument "-2" for "-p, --partition" flag: want a partition number (0 or more) or "all"`},
		{[]string{"--partition=-7"}, "want a partition number (0 or more)"},
		{[]string{"-p", "x"}, "want a partition number"},
		{[]string{"-p", "1", "-g", "g"}, "--partition/-p 1 with --group"},
		{[]string{"-g", "g", "-o", "-10"}, "-N or +N with --group"},
		{[]string{"-g", "g", "--from", "+3"}, "-N or +N with --group"},
		{[]string{"-o", "sometime"}, `--from/-o "sometime": want earliest`},
		{[]string{"-o", "end", "--from-time", "-1h"}, "cannot be combined"},
		{[]string{"--from-time", "1796079000"}, "looks like seconds — write 1796079000s or 1796079000000ms"},
		{[]string{"--from-time", "2h"}, "takes a minus sign"},
		{[]string{"-f", "%q"}, "unknown token %q"},
		{[]string{"-f", "xml"}, `--format "xml": want raw, json, or a template`},
		{[]string{"-c", "-3"}, "want 0 (no limit) or more"},
	}
	for _, tt := range tests {
		args := append([]string{"--server", addr, "consume", "-t", "orders"}, tt.args...)
		_, _, err := execConsumeCLI(context.Background(), "", args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("sq %v: %v, want an error containing %q", tt.args, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "cannot reach") {
			t.Errorf("sq %v: connected before refusing the input: %v", tt.args, err)
		}
	}
	// Valid input gets as far as connecting, which names the address.
	for _, args := range [][]string{{"-p", "all"}, {"-p", "-1"}, {"-o", "-10"}, {"-o", "+2"}, {"-o", "BEGINNING"}, {"-f", "JSON"},
		{"--from-time", "1796079000s"}, {"--from-time", "-30m"}, {"-g", "g", "-o", "end"}, {"-g", "g", "--from-time", "1796079000000"}} {
		_, _, err := execConsumeCLI(context.Background(), "", append([]string{"--server", addr, "consume", "-t", "orders"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "cannot reach the SQ server at "+addr) {
			t.Errorf("sq consume %v: %v, want a connection error naming %s", args, err, addr)
		}
	}
}

// Short flags, -o -N and a template, against an in-process server.
func TestConsumeShortFlagsAndTail(t *testing.T) {
	addr, _ := startData(t, false)
	var in strings.Builder
	for i := range 30 {
		in.WriteString("k" + string(rune('a'+i%5)) + ":" + strings.Repeat("x", i) + "\n")
	}
	if _, stderr, err := execConsumeCLI(context.Background(), in.String(), "--server", addr, "produce", "--topic", "orders", "--key-separator", ":"); err != nil {
		t.Fatalf("produce: %v %s", err, stderr)
	}
	all, _, err := execConsumeCLI(context.Background(), "", "--server", addr, "consume", "-t", "orders", "-f", `%p %o\n`)
	if err != nil {
		t.Fatal(err)
	}
	hw := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(all), "\n") {
		p, _, _ := strings.Cut(l, " ")
		hw[p]++
	}
	if hw["0"]+hw["1"] != 30 || hw["0"] == 0 || hw["1"] == 0 {
		t.Fatalf("records per partition %v, want 30 over both", hw)
	}
	tail, _, err := execConsumeCLI(context.Background(), "", "--server", addr, "consume", "-t", "orders", "-o", "-3", "-f", `%p:%o,`)
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, p := range []string{"0", "1"} {
		for o := max(0, hw[p]-3); o < hw[p]; o++ {
			want += p + ":" + strconv.Itoa(o) + ","
		}
	}
	if tail != want {
		t.Errorf("-o -3 printed %q, want %q", tail, want)
	}
	one, _, err := execConsumeCLI(context.Background(), "", "--server", addr, "consume", "-t", "orders", "-p", "1", "-o", "+1", "-c", "2", "-f", `%p:%o,`)
	if err != nil || one != "1:1,1:2," {
		t.Errorf("-p 1 -o +1 -c 2 printed %q, %v; want \"1:1,1:2,\"", one, err)
	}
}

// After an interrupt, consume prints the one-line summary of what it
// printed and returns no error (main exits 130).
func TestConsumeInterruptSummary(t *testing.T) {
	addr, _ := startData(t, false)
	if _, stderr, err := execConsumeCLI(context.Background(), "a:1\nb:2\nc:3\n", "--server", addr, "produce", "--topic", "orders", "--partition", "0"); err != nil {
		t.Fatalf("produce: %v %s", err, stderr)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var out, errOut consumeBuffer
	root := newRootCommand(nil, &out, &errOut, func(string) string { return "" })
	root.SetArgs([]string{"--server", addr, "consume", "-t", "orders", "--follow"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	waitUntil(t, "three records printed", func() bool { return strings.Count(out.String(), "\n") == 3 })
	cancel(errInterrupted{syscall.SIGINT})
	if err := <-done; err != nil {
		t.Fatalf("consume after the interrupt: %v", err)
	}
	want := "sq: interrupted: printed 3 records of orders; next offsets 0:3 1:0\n"
	if got := errOut.String(); got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}
