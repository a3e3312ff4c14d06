package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/ring"
)

// The file systems whose type statfs(2) reports in f_type (linux/magic.h)
// and on which SQ's durability argument does not hold: tmpfs and ramfs
// lose everything at a reboot, overlayfs forwards fsync to an upper layer
// a container runtime may discard, and NFS acknowledges writes with the
// server's, not the disk's, guarantees (and locks differ).
var unsafeFS = map[int64]string{
	0x01021994: "tmpfs",
	0x858458f6: "ramfs",
	0x794c7630: "overlayfs",
	0x6969:     "nfs",
}

// knownFS names the common local file systems by their statfs(2) f_type
// (linux/magic.h), for the check's OK line.
var knownFS = map[int64]string{
	0xef53:     "ext2/ext3/ext4",
	0x58465342: "xfs",
	0x9123683e: "btrfs",
	0x2fc12fc1: "zfs",
	0xf2f52010: "f2fs",
}

// fsName is the name of the file system type t, or its number in hex.
func fsName(t int64) string {
	if n, ok := knownFS[t]; ok {
		return n
	}
	if n, ok := unsafeFS[t]; ok {
		return n
	}
	return fmt.Sprintf("type 0x%x", t)
}

// checkLevel is the outcome of one host check.
type checkLevel int

const (
	checkOK checkLevel = iota
	// checkWarn: serve logs a WARN with the fix and starts.
	checkWarn
	// checkFail: `sq-server check` exits non-zero; serve logs a WARN,
	// and refuses to start only for an unsafe file system under
	// --require-durable-fs.
	checkFail
)

func (l checkLevel) String() string {
	return [...]string{"OK", "WARN", "FAIL"}[l]
}

// checkResult is one host check's finding: what it checked, what it
// found, and the fix when not OK.
type checkResult struct {
	name  string
	level checkLevel
	msg   string
	fix   string
}

// hostProbe reads the host: each reader is a seam tests replace.
type hostProbe struct {
	// statfs returns the file system type (f_type), total and available
	// (f_bavail) bytes of the file system holding dir (statfs(2)).
	statfs func(dir string) (fsType int64, total, avail int64, err error)
	// nofile returns the soft and hard RLIMIT_NOFILE of this process
	// (getrlimit(2); the Go runtime raises the soft limit to the hard
	// one at start, so the soft one is what serve gets).
	nofile func() (soft, hard uint64, err error)
	// sysctl returns the value of a sysctl (kernel.io_uring_disabled)
	// from /proc/sys, trimmed; fs.ErrNotExist when the kernel lacks it.
	sysctl func(name string) (string, error)
	// writable returns nil when this process may create files in the
	// directory dir (access(2) with W_OK|X_OK: the permissions, and
	// EROFS for a read-only mount).
	writable func(dir string) error
}

// readSysctl reads /proc/sys/<name with dots as slashes> (sysctl(8)).
func readSysctl(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/")))
	return strings.TrimSpace(string(b)), err
}

// nofileNeed is the RLIMIT_NOFILE the settings need: the segment files
// and mappings bound, a connection per --max-connections, and 256 for
// listeners, Raft, gossip, the metadata store and the runtime.
func (c *config) nofileNeed() uint64 {
	return uint64(max(c.MaxSegFiles, 0)) + uint64(max(c.MaxConnections, 0)) + 256
}

// mapCountNeed is the vm.max_map_count the settings need: every mapping
// --max-open-segment-files allows, and 1024 for the Go runtime and
// libraries.
func (c *config) mapCountNeed() int64 { return int64(max(c.MaxSegFiles, 0)) + 1024 }

// hostChecks runs every check of the host against c, in a fixed order:
// open files, memory maps, the data directory's file system, io_uring,
// free space.
func (c *config) hostChecks(p hostProbe) []checkResult {
	out := []checkResult{c.checkNofile(p), c.checkMapCount(p)}
	out = append(out, c.checkDataDir(p)...)
	return append(out, c.checkIOUring(p))
}

func (c *config) checkNofile(p hostProbe) checkResult {
	r := checkResult{name: "open files"}
	soft, hard, err := p.nofile()
	need := c.nofileNeed()
	switch {
	case err != nil:
		r.level, r.msg = checkWarn, "getrlimit(RLIMIT_NOFILE): "+err.Error()
	case soft < need:
		r.level = checkWarn
		r.msg = fmt.Sprintf("RLIMIT_NOFILE %d (hard %d) is below --max-open-segment-files %d + --max-connections %d + 256 = %d: connections and segments will fail with EMFILE",
			soft, hard, c.MaxSegFiles, c.MaxConnections, need)
		r.fix = fmt.Sprintf("raise the limit to at least %d: LimitNOFILE=%d in the systemd unit, or ulimit -n %d (and the hard limit in /etc/security/limits.conf) before starting; or lower --max-open-segment-files / --max-connections", need, need, need)
	default:
		r.msg = fmt.Sprintf("RLIMIT_NOFILE %d >= %d", soft, need)
	}
	return r
}

func (c *config) checkMapCount(p hostProbe) checkResult {
	r := checkResult{name: "memory maps"}
	v, err := p.sysctl("vm.max_map_count")
	need := c.mapCountNeed()
	n, perr := strconv.ParseInt(v, 10, 64)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.msg = "vm.max_map_count not present"
	case err != nil || perr != nil:
		r.level, r.msg = checkWarn, fmt.Sprintf("vm.max_map_count unreadable: %v", errors.Join(err, perr))
	case n < need:
		r.level = checkWarn
		r.msg = fmt.Sprintf("vm.max_map_count %d is below --max-open-segment-files %d + 1024 = %d: reads of sealed segments will fail to map (ENOMEM)", n, c.MaxSegFiles, need)
		r.fix = fmt.Sprintf("sysctl -w vm.max_map_count=%d, kept across reboots in /etc/sysctl.d/60-sq.conf; or lower --max-open-segment-files", need)
	default:
		r.msg = fmt.Sprintf("vm.max_map_count %d >= %d", n, need)
	}
	return r
}

// checkDataDir checks the data directory, or its nearest existing parent
// before the first start: that serve can use it (checkDataDirAccess), its
// file system's type (unsafeFS) and its free space against the floor of
// --min-free-bytes.
func (c *config) checkDataDir(p hostProbe) []checkResult {
	dir := existingDir(c.DataDir)
	fsType, total, avail, err := p.statfs(dir)
	if err != nil {
		return []checkResult{{name: "data directory", level: checkFail, msg: fmt.Sprintf("statfs %s: %v", dir, err),
			fix: "create the data directory (--data-dir) and make it readable by the server's user"}}
	}
	var out []checkResult
	if r := c.checkDataDirAccess(p, dir); r.level != checkOK {
		out = append(out, r)
	}
	fsr := checkResult{name: "file system", msg: fmt.Sprintf("%s on %s", dir, fsName(fsType))}
	if name, bad := unsafeFS[fsType]; bad {
		fsr.level = checkWarn
		if c.RequireDurableFS {
			fsr.level = checkFail
		}
		fsr.msg = fmt.Sprintf("data directory %s is on %s: fsync there does not make records durable on this host's disk (%s)", c.DataDir, name, unsafeWhy(name))
		fsr.fix = "put --data-dir on a local disk file system (ext4, xfs); in a container, on a volume or bind mount of one. --require-durable-fs makes serve refuse to start on " + name
	}
	free := checkResult{name: "free space"}
	floor := c.MinFreeBytes
	if floor == engine.MinFreeAuto {
		floor = engine.AutoMinFreeBytes(total)
	}
	switch {
	case floor == 0:
		free.msg = fmt.Sprintf("%d bytes available; no floor (--min-free-bytes 0)", avail)
	case avail < floor:
		free.level = checkFail
		free.msg = fmt.Sprintf("%d bytes available on the file system of %s, below the floor %d (--min-free-bytes %s): publishes will get DISK_FULL", avail, dir, floor, minFreeFlag{&c.MinFreeBytes})
		free.fix = "free space on the file system, move --data-dir to a larger one, or lower --min-free-bytes"
	default:
		free.msg = fmt.Sprintf("%d bytes available >= floor %d", avail, floor)
	}
	return append(out, fsr, free)
}

// checkDataDirAccess checks that serve can use the data directory: a
// directory this user may create files in, or, before the first start,
// a path serve can create (its nearest existing parent, dir, a writable
// directory). As root only a read-only mount fails it.
func (c *config) checkDataDirAccess(p hostProbe, dir string) checkResult {
	r := checkResult{name: "data directory"}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		r.level, r.msg = checkFail, fmt.Sprintf("--data-dir %s: %s is not a directory", c.DataDir, dir)
		r.fix = "give --data-dir a directory, or a path that does not exist yet (serve creates it)"
		return r
	}
	exists := filepath.Clean(dir) == filepath.Clean(c.DataDir)
	if err := p.writable(dir); err != nil {
		r.level = checkFail
		if exists {
			r.msg = fmt.Sprintf("data directory %s is not writable by this user (uid %d): %v", dir, os.Getuid(), err)
			r.fix = fmt.Sprintf("make it the server's user's: chown -R sq:sq %s (the package's user), or run as its owner", dir)
		} else {
			r.msg = fmt.Sprintf("data directory %s does not exist, and serve cannot create it: %s is not writable by this user (uid %d): %v", c.DataDir, dir, os.Getuid(), err)
			r.fix = fmt.Sprintf("create it for the server's user: install -d -o sq -g sq -m 0750 %s", c.DataDir)
		}
	}
	return r
}

// unsafeWhy says what the file system does to durability.
func unsafeWhy(name string) string {
	switch name {
	case "tmpfs", "ramfs":
		return "it lives in memory and is empty after a reboot"
	case "overlayfs":
		return "a container's writable layer, discarded with the container"
	}
	return "a network file system: the server's write-back and locking, not this disk's, decide what an fsync keeps"
}

// existingDir is dir, or its nearest parent that exists.
func existingDir(dir string) string {
	d := filepath.Clean(dir)
	for {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			return d
		}
		d = filepath.Dir(d)
	}
}

func (c *config) checkIOUring(p hostProbe) checkResult {
	r := checkResult{name: "io_uring"}
	if c.IOBackend == ring.ModePortable || c.IOBackend == ring.ModeAuto && !ring.AutoPrefersUring {
		r.msg = "not used (--io-backend " + c.IOBackend + " selects the portable backend)"
		return r
	}
	v, err := p.sysctl("kernel.io_uring_disabled")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.msg = "kernel.io_uring_disabled not present (kernel before 6.6): io_uring allowed"
	case err != nil:
		r.level, r.msg = checkWarn, "kernel.io_uring_disabled unreadable: "+err.Error()
	case v == "0":
		r.msg = "kernel.io_uring_disabled = 0"
	default:
		r.level = checkWarn
		if c.IOBackend == ring.ModeUring {
			r.level = checkFail // serve fails to start with --io-backend uring
		}
		r.msg = fmt.Sprintf("kernel.io_uring_disabled = %s: io_uring is refused (1: except to root and kernel.io_uring_group; 2: to all), so the portable backend writes", v)
		r.fix = "sysctl -w kernel.io_uring_disabled=0 (or 1 with kernel.io_uring_group set to the server's group), kept in /etc/sysctl.d/60-sq.conf; or --io-backend portable"
	}
	return r
}

// logHostChecks logs each check that is not OK once, as a WARN with its
// fix, and returns an error when serve must not start: an unsafe file
// system under --require-durable-fs.
func (c *config) logHostChecks(results []checkResult, log *slog.Logger) error {
	for _, r := range results {
		if r.level == checkOK {
			continue
		}
		log.Warn("host check: "+r.msg, "check", r.name, "fix", r.fix)
		if r.name == "file system" && r.level == checkFail {
			return fmt.Errorf("--require-durable-fs: %s", r.msg)
		}
	}
	return nil
}
