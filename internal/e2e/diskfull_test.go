package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/sdk"
)

// mountTmpfs mounts a tmpfs of sizeMiB MiB under the test's temporary
// directory and unmounts it at cleanup (after the servers the test starts
// later have stopped). It skips the test where mounting is not possible.
func mountTmpfs(t *testing.T, sizeMiB int) string {
	t.Helper()
	const fallback = "the fault-FS variants cover it: engine TestDiskFloor and TestENOSPCMidWrite"
	if os.Geteuid() != 0 {
		t.Skipf("mounting a tmpfs needs root; %s", fallback)
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.Itoa(sizeMiB)+"m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("mount -t tmpfs failed (%v: %s); %s", err, strings.TrimSpace(string(out)), fallback)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			_ = exec.Command("umount", "-l", mnt).Run()
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// freeBytes returns the bytes available on the file system of dir.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// ballast fills dir's file system until leave bytes are free (leave 0:
// until ENOSPC) with the file path.
func ballast(t *testing.T, path string, leave int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := freeBytes(t, filepath.Dir(path)) - leave; n > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil && !errors.Is(err, unix.ENOSPC) {
			t.Fatal(err)
		}
	}
	if leave > 0 {
		return
	}
	fi, _ := f.Stat()
	chunk := make([]byte, 4096)
	for off := fi.Size(); ; off += int64(len(chunk)) {
		if _, err := f.WriteAt(chunk, off); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// pollPublish publishes values to full/0 every 10 ms until the outcome is
// wantFull (DISK_FULL) or success, appending accepted values to acked.
func pollPublish(ctx context.Context, t *testing.T, c *sdk.Client, acked *[]string, wantFull bool, values ...string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := publishValues(ctx, c, "full", 0, values...)
		switch {
		case err == nil:
			if res.BaseOffset != uint64(len(*acked)) {
				t.Fatalf("publish at %d, want %d (offsets must stay dense)", res.BaseOffset, len(*acked))
			}
			*acked = append(*acked, values...)
			if !wantFull {
				return
			}
		case errors.Is(err, api.ErrDiskFull):
			if !api.IsRetriable(err) {
				t.Fatalf("DISK_FULL not retriable: %v", err)
			}
			if wantFull {
				return
			}
		default:
			t.Fatalf("publish: %v", err)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("publish never reached the wanted state (disk full %v) within 20s", wantFull)
		}
	}
}

// TestDiskFullTmpfs (case j) fills a 64 MiB tmpfs under the server: below
// --min-free-bytes publishes that do not fit in the space their partition
// preallocated get DISK_FULL while fetches, commits and
// DescribeTopic work; with the floor at 0 a real ENOSPC also answers
// DISK_FULL; nothing acknowledged is lost, offsets stay dense, and
// publishing resumes once the ballast is removed.
func TestDiskFullTmpfs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mnt := mountTmpfs(t, 64)
	data, ball := filepath.Join(mnt, "data"), filepath.Join(mnt, "ballast")
	floor := []string{"--min-free-bytes", strconv.Itoa(24 << 20)}
	srv := startServer(t, data, floor...)
	c := dialT(ctx, t, srv.addr)
	if _, err := c.CreateTopic(ctx, "full", 1, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var acked []string
	for i := 0; i < 20; i++ {
		pollPublish(ctx, t, c, &acked, false, numbered("d", len(acked), 10)...)
	}

	// Below the floor. A batch that fits in the space the partition has
	// preallocated (1 MiB so far) is still accepted; a larger one is not.
	ballast(t, ball, 12<<20)
	pollPublish(ctx, t, c, &acked, true, strings.Repeat("a", 700<<10), strings.Repeat("b", 700<<10))
	if got := fetchValues(ctx, t, c, "full", 0); !slicesEqual(got, acked) {
		t.Fatalf("fetch while full: %d records, want %d", len(got), len(acked))
	}
	if res, err := c.CommitOffsets(ctx, "g", []sdk.OffsetCommit{{Topic: "full", Partition: 0, Offset: uint64(len(acked))}}); err != nil || res[0].Err != nil {
		t.Fatalf("commit while full: %v %+v", err, res)
	}
	if _, err := c.DescribeTopic(ctx, "full"); err != nil {
		t.Fatalf("describe while full: %v", err)
	}
	if err := os.Remove(ball); err != nil {
		t.Fatal(err)
	}
	pollPublish(ctx, t, c, &acked, false, "space returned")

	// A real ENOSPC, with no floor: the active segment's preallocated
	// space runs out and growing it fails.
	c.Close()
	if code := srv.stop(); code != 0 {
		t.Fatalf("exit status %d; log:\n%s", code, srv.log)
	}
	srv = startServer(t, data, "--min-free-bytes", "0")
	c = dialT(ctx, t, srv.addr)
	ballast(t, ball, 0)
	big := strings.Repeat("b", 60<<10)
	for i := 0; ; i++ {
		res, err := publishValues(ctx, c, "full", 0, big)
		if errors.Is(err, api.ErrDiskFull) {
			break
		}
		if err != nil || res.BaseOffset != uint64(len(acked)) {
			t.Fatalf("publish %d on a full disk: %+v, %v", i, res, err)
		}
		acked = append(acked, big)
		if i > 2000 {
			t.Fatal("no DISK_FULL after 2000 publishes of 60 KiB on a 64 MiB tmpfs")
		}
	}
	srv.waitLogLine(t, "append failed", "no space left on device") // logged after the answer
	if got := fetchValues(ctx, t, c, "full", 0); !slicesEqual(got, acked) {
		t.Fatalf("fetch after ENOSPC: %d records, want %d", len(got), len(acked))
	}
	if err := os.Remove(ball); err != nil {
		t.Fatal(err)
	}
	pollPublish(ctx, t, c, &acked, false, "after ENOSPC")
	c.Close()
	srv = srv.restart(t)
	c = dialT(ctx, t, srv.addr)
	if got := fetchValues(ctx, t, c, "full", 0); !slicesEqual(got, acked) {
		t.Fatalf("after a restart: %d records, want %d", len(got), len(acked))
	}
}
