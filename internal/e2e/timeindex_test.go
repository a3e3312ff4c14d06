package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// timeIndexes returns the .timeindex files under dir (one partition's) in
// base offset order, with their bytes.
func timeIndexes(t *testing.T, dir string) (paths []string, data map[string][]byte) {
	t.Helper()
	data = make(map[string][]byte)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".timeindex") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		paths = append(paths, path)
		data[path] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths) // names are zero-padded base offsets
	return paths, data
}

// TestRedatedTimeIndexStaysPut: through the real binaries, a sealed
// segment's .timeindex removed while the server is stopped is rebuilt at
// the next start, and the restarts after it change no .timeindex again
// (before, the rebuilt date, the .log's modification time, was later than
// the next segment's correct first time, so each restart rebuilt one more
// segment). consume --from-time at an undamaged segment's first append time
// returns every record from that segment on, exactly from the second
// segment after the damage, at each restart.
func TestRedatedTimeIndexStaysPut(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	extra := []string{"--segment-bytes", "16384", "--max-batch-bytes", "8192", "--max-record-bytes", "4096", "--min-free-bytes", "0"}
	srv := startServer(t, dataDir, extra...)
	sqOK(t, srv.addr, nil, "topic", "create", "ti", "--partitions", "1", "--segment-bytes", "16384")
	// One produce per round: one batch under --max-batch-bytes, so one
	// append and one time index entry, in its own millisecond.
	value := strings.Repeat("x", 600)
	const rounds, perRound = 16, 10
	for i := 0; i < rounds; i++ {
		var in strings.Builder
		for j := 0; j < perRound; j++ {
			fmt.Fprintf(&in, "r%d-%d-%s\n", i, j, value)
		}
		sqOK(t, srv.addr, []byte(in.String()), "produce", "--topic", "ti", "--partition", "0")
	}
	if code := srv.stop(); code != 0 {
		t.Fatalf("sq-server exited with status %d after SIGTERM; log:\n%s", code, srv.log)
	}
	paths, orig := timeIndexes(t, dataDir)
	if len(paths) < 6 {
		t.Fatalf("%d segments; the test wants at least 6", len(paths))
	}
	damaged := len(paths) / 2
	if err := os.Remove(paths[damaged]); err != nil {
		t.Fatal(err)
	}
	var first map[string][]byte
	for restart := 1; restart <= 3; restart++ {
		srv = startServer(t, dataDir, extra...)
		for k := damaged + 1; k < len(paths); k++ {
			base, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(paths[k]), ".timeindex"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			ms := int64(binary.LittleEndian.Uint64(orig[paths[k]]))
			out := sqOK(t, srv.addr, nil, "consume", "--topic", "ti", "--from-time", fmt.Sprintf("%dms", ms))
			got, want := strings.Count(out, "\n"), rounds*perRound-int(base)
			if got < want || (k > damaged+1 && got != want) {
				t.Fatalf("restart %d: --from-time %dms (first append of the segment at offset %d) printed %d records, want %d",
					restart, ms, base, got, want)
			}
		}
		if code := srv.stop(); code != 0 {
			t.Fatalf("sq-server exited with status %d after SIGTERM; log:\n%s", code, srv.log)
		}
		_, files := timeIndexes(t, dataDir)
		for k, path := range paths {
			if k != damaged && !bytes.Equal(files[path], orig[path]) {
				t.Fatalf("restart %d: %s changed: % x, was % x", restart, filepath.Base(path), files[path], orig[path])
			}
			if first != nil && !bytes.Equal(files[path], first[path]) {
				t.Fatalf("restart %d: %s changed again: % x, after the first restart % x", restart, filepath.Base(path), files[path], first[path])
			}
		}
		if first == nil {
			first = files
		}
	}
}
