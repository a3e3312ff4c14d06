package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
