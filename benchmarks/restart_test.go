package benchmarks

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/seedqueue/sq/engine"
)

// restartLogBytes is the size of the log the restart benchmarks recover.
const restartLogBytes = 512 << 20

// fillLog appends 1000-record batches of 100 B values to topic "t" of eng
// until restartLogBytes are written.
func fillLog(b *testing.B, eng *engine.Engine) {
	b.Helper()
	info, err := eng.DescribeTopic("t")
	if err != nil {
		b.Fatal(err)
	}
	tmpl := hpBatch(b, 1000)
	for i, written := 0, 0; written < restartLogBytes; i, written = i+1, written+len(tmpl) {
		p := i % info.PartitionCount
		if _, err := eng.Append(context.Background(), "t", p, append([]byte(nil), tmpl...)); err != nil {
			b.Fatal(err)
		}
	}
}

// openEngine opens the engine on dir and reports its log end offset.
func openEngine(b *testing.B, dir string) *engine.Engine {
	b.Helper()
	opts := engine.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)}
	eng, err := engine.Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

// BenchmarkRestart measures engine.Open of a 512 MiB log, in one partition
// or spread over 4 for crash-image/partitions=4 (100 B
// records in 1000-record batches; sync policy none, so no recovery-point
// checkpoint is ever written):
//
//   - clean: after engine.Close (sync, trim, checkpoint at the log end);
//   - crash-image: a copy of the data directory taken while the engine was
//     still open, as a SIGKILL leaves it, so recovery scans every batch
//     after the (absent) recovery point: the worst case.
//
// One op is one Open (plus, for clean, the Close before it). MB/s is the
// log size recovered per second.
func BenchmarkRestart(b *testing.B) {
	b.Run("clean", func(b *testing.B) {
		dir := b.TempDir()
		eng := hpEngineIn(b, dir, 1)
		fillLog(b, eng)
		if err := eng.Close(); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(restartLogBytes)
		for b.Loop() {
			eng := openEngine(b, dir)
			b.StopTimer()
			if err := eng.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	for _, parts := range []int{1, 4} {
		b.Run(fmt.Sprintf("crash-image/partitions=%d", parts), func(b *testing.B) {
			dir := b.TempDir()
			eng := hpEngineIn(b, dir, parts)
			fillLog(b, eng)
			image := filepath.Join(b.TempDir(), "image")
			if err := copyDir(dir, image); err != nil {
				b.Fatal(err)
			}
			if err := eng.Close(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(restartLogBytes)
			for b.Loop() {
				b.StopTimer()
				run := filepath.Join(b.TempDir(), fmt.Sprint("run-", b.N))
				if err := copyDir(image, run); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				eng := openEngine(b, run)
				b.StopTimer()
				if err := eng.Close(); err != nil {
					b.Fatal(err)
				}
				os.RemoveAll(run)
				b.StartTimer()
			}
		})
	}
}

// hpEngineIn opens an engine with sync policy none on dir with topic "t"
// of parts partitions.
func hpEngineIn(b *testing.B, dir string, parts int) *engine.Engine {
	b.Helper()
	eng, err := engine.Open(engine.Options{DataDir: dir, SyncPolicy: "none", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := eng.CreateTopic("t", parts, engine.TopicConfig{}); err != nil {
		b.Fatal(err)
	}
	return eng
}

// copyDir copies the regular files and directories under src to dst,
// skipping the LOCK file.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if d.Name() == "LOCK" || !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
