package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestRecoverHoleBySyncPolicy: three acknowledged one-record batches, a
// crash that keeps the page cache (kill -9), then the second batch's magic
// byte set to 0. Under every-batch that is damage to synced data: the
// partition is failed with an error naming the file and position, its file
// keeps every byte, and the other partition of the topic keeps serving.
// Under an interval policy and none the hole is cut off, logged at ERROR
// with the offsets dropped, and the next publish gets offset 1.
func TestRecoverHoleBySyncPolicy(t *testing.T) {
	dir := t.TempDir()
	opts, fs := faultOptions(dir)
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]string{"eb": "every-batch", "iv": "60000ms", "nn": "none"}
	for name, pol := range policies {
		if _, err := e.CreateTopic(name, 2, TopicConfig{SyncPolicy: pol}); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"a", "b", "c"} {
			appendValues(t, e, name, 0, v)
		}
		appendValues(t, e, name, 1, "z")
	}
	fs.Crash() // nothing more reaches the files; what was written stays
	e.Close()
	segOf := func(topic string) string {
		return filepath.Join(dir, "topics", topic, "0", "00000000000000000000.log")
	}
	second := map[string]int64{}
	sizes := map[string]int64{}
	for name := range policies {
		data, err := os.ReadFile(segOf(name))
		if err != nil {
			t.Fatal(err)
		}
		pos := int64(12 + binary.LittleEndian.Uint32(data[8:])) // after the first batch
		second[name], sizes[name] = pos, int64(len(data))
		data[pos+16] = 0 // magic
		if err := os.WriteFile(segOf(name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logs syncBuffer
	opts = testOptions(dir)
	opts.ScrubBytesPerSec = -1
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	e = openTest(t, opts)

	ti, err := e.DescribeTopic("eb")
	if err != nil {
		t.Fatal(err)
	}
	perr := ti.Partitions[0].Err
	where := fmt.Sprintf("%s at byte %d", segOf("eb"), second["eb"])
	if codeOf(perr) != api.CodePartitionFailed || !strings.Contains(perr.Error(), where) {
		t.Fatalf("every-batch partition error %v; want PARTITION_FAILED naming %q", perr, where)
	}
	if _, err := e.Append(context.Background(), "eb", 0, mkBatch(t, "d")); codeOf(err) != api.CodePartitionFailed {
		t.Fatalf("append to the damaged every-batch partition = %v; want PARTITION_FAILED", err)
	}
	if fi, err := os.Stat(segOf("eb")); err != nil || fi.Size() != sizes["eb"] {
		t.Fatalf("damaged file after restart: %v, %v; want %d bytes (nothing cut)", fi, err, sizes["eb"])
	}
	appendValues(t, e, "eb", 1, "y")
	if got := readAll(t, e, "eb", 1); !equal(got, []string{"z", "y"}) {
		t.Fatalf("every-batch partition 1: %v", got)
	}

	for _, name := range []string{"iv", "nn"} {
		if ti, _ := e.DescribeTopic(name); ti.Partitions[0].Err != nil {
			t.Fatalf("%s (%s): partition failed: %v", name, policies[name], ti.Partitions[0].Err)
		}
		if got := readAll(t, e, name, 0); !equal(got, []string{"a"}) {
			t.Fatalf("%s (%s): readable %v, want [a]", name, policies[name], got)
		}
		if res := appendValues(t, e, name, 0, "d"); res.BaseOffset != 1 {
			t.Fatalf("%s (%s): next publish at offset %d, want 1", name, policies[name], res.BaseOffset)
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "hole before valid data") {
			if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "from_offset=1 to_offset=3") {
				t.Fatalf("hole log line %q; want ERROR with from_offset=1 to_offset=3", line)
			}
		}
	}
	if n := strings.Count(logs.String(), "hole before valid data"); n != 2 {
		t.Fatalf("%d hole reports, want 2 (interval and none):\n%s", n, logs.String())
	}
}
