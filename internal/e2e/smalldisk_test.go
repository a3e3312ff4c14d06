package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// mountExt4 makes an ext4 file system of sizeMiB MiB in an image file
// (mkfs.ext4 with its defaults), attaches it to a loop device and mounts
// it under the test's temporary directory. Cleanup unmounts it and
// detaches the loop device, also when the test fails, after the servers
// the test starts later have stopped. It skips the test where this is not
// possible (not root, no mkfs.ext4, no loop device, mount refused).
func mountExt4(t *testing.T, sizeMiB int64) string {
	t.Helper()
	const fallback = "engine TestSmallDiskFillsToTheFloor covers the same rule on a simulated 64 MiB disk"
	if os.Geteuid() != 0 {
		t.Skipf("a loop-mounted ext4 image needs root (losetup, mount); %s", fallback)
	}
	for _, tool := range []string{"mkfs.ext4", "losetup", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (%v); %s", tool, err, fallback)
		}
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "ext4.img"), filepath.Join(dir, "mnt")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(sizeMiB << 20)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.ext4 failed (%v: %s); %s", err, strings.TrimSpace(string(out)), fallback)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("losetup failed: no loop device (%v: %s); %s", err, strings.TrimSpace(string(out)), fallback)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "ext4", dev, mnt).CombinedOutput(); err != nil {
		t.Skipf("mount %s failed (%v: %s); %s", dev, err, strings.TrimSpace(string(out)), fallback)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			_ = exec.Command("umount", "-l", mnt).Run()
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// TestSmallExt4DiskDefaults: sq-server with its default settings on a
// 64 MiB ext4 volume (loop-mounted image) sets the free-space floor to 5%
// of the volume (about 3 MiB, not 256 MiB), accepts the first records and
// keeps accepting them, its segments preallocating in shrinking steps,
// until the free space is within about one batch per partition plus 1 MiB
// of the floor; only then publishes get DISK_FULL (retriable), never
// another error. Every acknowledged record is read back, also after a
// restart.
func TestSmallExt4DiskDefaults(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mnt := mountExt4(t, 64)
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	floor := int64(st.Blocks) * int64(st.Bsize) / 20
	data := filepath.Join(mnt, "data")
	srv := startServer(t, data) // every setting at its default
	line := srv.waitLogLine(t, "free-space floor set automatically")
	var logged struct {
		MinFree int64 `json:"min_free_bytes"`
	}
	if err := json.Unmarshal([]byte(line), &logged); err != nil || logged.MinFree != floor {
		t.Fatalf("floor logged as %d (%v), want 5%% of %d bytes = %d: %s", logged.MinFree, err, int64(st.Blocks)*int64(st.Bsize), floor, line)
	}

	c := dialT(ctx, t, srv.addr)
	const parts = 2
	if _, err := c.CreateTopic(ctx, "small", parts, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	const recs, valueBytes = 8, 16 << 10
	batchBytes := int64(recs * valueBytes)
	slack := parts*batchBytes + 1<<20
	acked := make([][]string, parts)
	full := make([]bool, parts)
	for i := 0; !full[0] || !full[1]; i++ {
		p := i % parts
		if full[p] {
			continue
		}
		values := make([]string, recs)
		for j := range values {
			values[j] = fmt.Sprintf("%d-%06d-%s", p, len(acked[p])+j, strings.Repeat("v", valueBytes-20))
		}
		res, err := publishValues(ctx, c, "small", uint32(p), values...)
		free := freeBytes(t, mnt)
		switch {
		case err == nil:
			if res.BaseOffset != uint64(len(acked[p])) {
				t.Fatalf("partition %d: publish at offset %d, want %d", p, res.BaseOffset, len(acked[p]))
			}
			acked[p] = append(acked[p], values...)
		case errors.Is(err, api.ErrDiskFull):
			if !api.IsRetriable(err) {
				t.Fatalf("DISK_FULL not retriable: %v", err)
			}
			if len(acked[p]) == 0 {
				t.Fatalf("partition %d: the first publish got DISK_FULL with %d bytes free (floor %d): %v", p, free, floor, err)
			}
			if free > floor+slack {
				t.Fatalf("partition %d: DISK_FULL with %d bytes free, above the floor %d + %d: %v", p, free, floor, slack, err)
			}
			full[p] = true
		default:
			t.Fatalf("partition %d: publish %d with %d bytes free (floor %d): %v, want success or DISK_FULL", p, i, free, floor, err)
		}
		if i > 10000 {
			t.Fatalf("no DISK_FULL after %d publishes of %d bytes on a 64 MiB volume", i, batchBytes)
		}
	}
	free := freeBytes(t, mnt)
	if free < floor-slack {
		t.Errorf("%d bytes free when full: the floor %d was overrun by more than %d", free, floor, slack)
	}
	stored := int64(len(acked[0])+len(acked[1])) * valueBytes
	t.Logf("64 MiB ext4: floor %d, %d bytes of records stored, %d bytes free when full", floor, stored, free)
	for p := range parts {
		if got := fetchValues(ctx, t, c, "small", uint32(p)); !slicesEqual(got, acked[p]) {
			t.Fatalf("partition %d: %d records read, %d acknowledged", p, len(got), len(acked[p]))
		}
	}
	c.Close()
	srv = srv.restart(t)
	c = dialT(ctx, t, srv.addr)
	for p := range parts {
		if got := fetchValues(ctx, t, c, "small", uint32(p)); !slicesEqual(got, acked[p]) {
			t.Fatalf("after a restart, partition %d: %d records read, %d acknowledged", p, len(got), len(acked[p]))
		}
	}
}

// TestSmallExt4DiskRestartWhenFull: on a 32 MiB ext4 volume filled to the
// last block (no free-space floor, then a ballast file), sq-server is
// killed with SIGKILL, sealed segments' .index and .timeindex files are
// deleted, and it restarts with no free byte: every partition opens
// (/readyz 200, not degraded), every acknowledged record reads back, and a WARN says the
// index files could not be written. Once the ballast is removed, publishes
// succeed and a clean stop writes the index files.
func TestSmallExt4DiskRestartWhenFull(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mnt := mountExt4(t, 32)
	data := filepath.Join(mnt, "data")
	srv := startServer(t, data, "--min-free-bytes", "0", "--max-batch-bytes", "262144", "--max-record-bytes", "131072", "--segment-bytes", "1048576")
	c := dialT(ctx, t, srv.addr)
	const parts = 2
	if _, err := c.CreateTopic(ctx, "full", parts, sdk.TopicConfig{SyncPolicy: "every-batch"}); err != nil {
		t.Fatal(err)
	}
	const recs, valueBytes = 8, 16 << 10
	acked := make([][]string, parts)
	full := make([]bool, parts)
	for i := 0; !full[0] || !full[1]; i++ {
		p := i % parts
		if full[p] {
			continue
		}
		values := make([]string, recs)
		for j := range values {
			values[j] = fmt.Sprintf("%d-%06d-%s", p, len(acked[p])+j, strings.Repeat("v", valueBytes-20))
		}
		switch _, err := publishValues(ctx, c, "full", uint32(p), values...); {
		case err == nil:
			acked[p] = append(acked[p], values...)
		case errors.Is(err, api.ErrDiskFull):
			full[p] = true
		default:
			t.Fatalf("partition %d: publish %d: %v, want success or DISK_FULL", p, i, err)
		}
		if i > 10000 {
			t.Fatal("no DISK_FULL on a 32 MiB volume")
		}
	}
	c.Close()
	ballastPath := filepath.Join(mnt, "ballast")
	ballast(t, ballastPath, 0)
	srv.kill()
	var removed []string
	for p, suffix := range []string{".index", ".timeindex"} {
		names, err := filepath.Glob(filepath.Join(data, "topics", "full", strconv.Itoa(p), "*"+suffix))
		if err != nil || len(names) < 3 {
			t.Fatalf("partition %d: %d %s files, want at least 3 (%v)", p, len(names), suffix, err)
		}
		for _, name := range names[:2] { // sealed
			if err := os.Remove(name); err != nil {
				t.Fatal(err)
			}
			removed = append(removed, name)
		}
	}
	ballast(t, ballastPath+"2", 0) // the space the deleted files freed
	if free := freeBytes(t, mnt); free != 0 {
		t.Logf("%d bytes free for unprivileged users before the restart", free)
	}

	srv = startServer(t, data, srv.extra...)
	_, httpAddr := controlAddrs(t, srv)
	for deadline := time.Now().Add(startTimeout); ; time.Sleep(10 * time.Millisecond) {
		code, body := httpBody(t, "http://"+httpAddr+"/readyz")
		if code == http.StatusOK {
			if strings.Contains(body, "degraded") {
				t.Fatalf("/readyz on a full disk: %s\nlog:\n%s", body, srv.log)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d on a full disk: %s\nlog:\n%s", code, body, srv.log)
		}
	}
	c = dialT(ctx, t, srv.addr)
	for p := range parts {
		if got := fetchValues(ctx, t, c, "full", uint32(p)); !slicesEqual(got, acked[p]) {
			t.Fatalf("on a full disk, partition %d: %d records read, %d acknowledged", p, len(got), len(acked[p]))
		}
	}
	if !strings.Contains(srv.log.String(), "could not write an index file") {
		t.Errorf("no WARN about index files not written; log:\n%s", srv.log)
	}

	for _, b := range []string{ballastPath, ballastPath + "2"} {
		if err := os.Remove(b); err != nil {
			t.Fatal(err)
		}
	}
	values := []string{"after-1", "after-2"}
	for p := range parts {
		if _, err := publishValues(ctx, c, "full", uint32(p), values...); err != nil {
			t.Fatalf("partition %d: publish after space was freed: %v", p, err)
		}
		acked[p] = append(acked[p], values...)
	}
	c.Close()
	srv = srv.restart(t)
	for _, name := range removed {
		if _, err := os.Stat(name); err != nil {
			t.Errorf("%s not written back after space was freed: %v", name, err)
		}
	}
	c = dialT(ctx, t, srv.addr)
	defer c.Close()
	for p := range parts {
		if got := fetchValues(ctx, t, c, "full", uint32(p)); !slicesEqual(got, acked[p]) {
			t.Fatalf("after a clean restart, partition %d: %d records read, %d acknowledged", p, len(got), len(acked[p]))
		}
	}
}
