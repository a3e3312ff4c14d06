package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/internal/testutil"
)

const (
	ext4Magic = 0xef53
	gib       = int64(1) << 30
)

// fakeHost is a host for the checks: its readers return these fields.
type fakeHost struct {
	fsType      int64
	total       int64
	avail       int64
	statfsErr   error
	soft, hard  uint64
	sysctls     map[string]string // absent: fs.ErrNotExist
	sysctlError error
	writableErr error // of every directory
}

func (h fakeHost) probe() hostProbe {
	return hostProbe{
		statfs: func(string) (int64, int64, int64, error) { return h.fsType, h.total, h.avail, h.statfsErr },
		nofile: func() (uint64, uint64, error) { return h.soft, h.hard, nil },
		sysctl: func(name string) (string, error) {
			if h.sysctlError != nil {
				return "", h.sysctlError
			}
			v, ok := h.sysctls[name]
			if !ok {
				return "", fs.ErrNotExist
			}
			return v, nil
		},
		writable: func(string) error { return h.writableErr },
	}
}

// goodHost passes every check with the default settings.
func goodHost() fakeHost {
	return fakeHost{fsType: ext4Magic, total: 100 * gib, avail: 50 * gib, soft: 1 << 20, hard: 1 << 20,
		sysctls: map[string]string{"vm.max_map_count": "262144", "kernel.io_uring_disabled": "0"}}
}

// TestHostChecks: each check finds its problem, at its level, with a fix
// that names the remedy, and finds nothing on a good host.
func TestHostChecks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		host  func(*fakeHost)
		check string // the check not OK ("": all OK)
		level checkLevel
		msg   string // in its message
		fix   string // in its fix
	}{
		{name: "good host"},
		{name: "nofile below the need", args: []string{"--max-open-segment-files", "1000", "--max-connections", "500"},
			host: func(h *fakeHost) { h.soft, h.hard = 1024, 1024 }, check: "open files", level: checkWarn,
			msg: "RLIMIT_NOFILE 1024 (hard 1024) is below --max-open-segment-files 1000 + --max-connections 500 + 256 = 1756", fix: "LimitNOFILE=1756"},
		{name: "nofile at the need", args: []string{"--max-open-segment-files", "1000", "--max-connections", "500"},
			host: func(h *fakeHost) { h.soft, h.hard = 1756, 4096 }},
		{name: "map count too low", args: []string{"--max-open-segment-files", "100000"},
			host: func(h *fakeHost) { h.sysctls["vm.max_map_count"] = "65530" }, check: "memory maps", level: checkWarn,
			msg: "vm.max_map_count 65530 is below --max-open-segment-files 100000 + 1024 = 101024", fix: "sysctl -w vm.max_map_count=101024"},
		{name: "map count absent", host: func(h *fakeHost) { delete(h.sysctls, "vm.max_map_count") }},
		{name: "tmpfs", host: func(h *fakeHost) { h.fsType = 0x01021994 }, check: "file system", level: checkWarn, msg: "is on tmpfs", fix: "--require-durable-fs"},
		{name: "overlayfs", host: func(h *fakeHost) { h.fsType = 0x794c7630 }, check: "file system", level: checkWarn, msg: "is on overlayfs", fix: "volume"},
		{name: "nfs", host: func(h *fakeHost) { h.fsType = 0x6969 }, check: "file system", level: checkWarn, msg: "is on nfs", fix: "ext4, xfs"},
		{name: "nfs with --require-durable-fs", args: []string{"--require-durable-fs"}, host: func(h *fakeHost) { h.fsType = 0x6969 },
			check: "file system", level: checkFail, msg: "is on nfs"},
		{name: "ext4 with --require-durable-fs", args: []string{"--require-durable-fs"}},
		{name: "statfs fails", host: func(h *fakeHost) { h.statfsErr = errors.New("permission denied") }, check: "data directory", level: checkFail,
			msg: "permission denied", fix: "create the data directory"},
		{name: "data directory not writable", host: func(h *fakeHost) { h.writableErr = syscall.EACCES }, check: "data directory", level: checkFail,
			msg: "is not writable by this user", fix: "chown -R sq:sq"},
		{name: "data directory on a read-only mount", host: func(h *fakeHost) { h.writableErr = syscall.EROFS }, check: "data directory", level: checkFail,
			msg: "read-only file system", fix: "chown"},
		{name: "free below the auto floor", host: func(h *fakeHost) { h.total, h.avail = 1*gib, 10<<20 }, check: "free space", level: checkFail,
			msg: "10485760 bytes available", fix: "--min-free-bytes"},
		{name: "free below an absolute floor", args: []string{"--min-free-bytes", "1073741824"}, host: func(h *fakeHost) { h.avail = gib - 1 },
			check: "free space", level: checkFail, msg: "below the floor 1073741824"},
		{name: "no floor", args: []string{"--min-free-bytes", "0"}, host: func(h *fakeHost) { h.avail = 0 }},
		{name: "io_uring disabled, uring wanted", args: []string{"--io-backend", "uring"}, host: func(h *fakeHost) { h.sysctls["kernel.io_uring_disabled"] = "2" },
			check: "io_uring", level: checkFail, msg: "kernel.io_uring_disabled = 2", fix: "sysctl -w kernel.io_uring_disabled=0"},
		{name: "io_uring restricted, uring wanted", args: []string{"--io-backend", "uring"}, host: func(h *fakeHost) { h.sysctls["kernel.io_uring_disabled"] = "1" },
			check: "io_uring", level: checkFail, msg: "kernel.io_uring_disabled = 1", fix: "kernel.io_uring_group"},
		{name: "io_uring disabled, portable", args: []string{"--io-backend", "portable"}, host: func(h *fakeHost) { h.sysctls["kernel.io_uring_disabled"] = "2" }},
		{name: "io_uring sysctl absent", args: []string{"--io-backend", "uring"}, host: func(h *fakeHost) { delete(h.sysctls, "kernel.io_uring_disabled") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, nil, append([]string{"--data-dir", t.TempDir()}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			h := goodHost()
			if tc.host != nil {
				tc.host(&h)
			}
			for _, r := range c.hostChecks(h.probe()) {
				if r.name != tc.check {
					if r.level != checkOK {
						t.Errorf("%s: %v %s, want OK", r.name, r.level, r.msg)
					}
					continue
				}
				if r.level != tc.level || !strings.Contains(r.msg, tc.msg) || !strings.Contains(r.fix, tc.fix) {
					t.Errorf("%s: %v %q fix %q; want %v, %q, fix with %q", r.name, r.level, r.msg, r.fix, tc.level, tc.msg, tc.fix)
				}
			}
		})
	}
}

// TestServeHostChecks: serve logs each problem once as a WARN with its
// fix and starts; with --require-durable-fs it refuses a data directory
// on an unsafe file system before opening it.
func TestServeHostChecks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		require bool
	}{{"warn", false}, {"refuse", true}} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--data-dir", t.TempDir(), "--capnp-host", "127.0.0.1:0", "--http-host", "", "--grpc-host", "", "--io-backend", "portable"}
			if tc.require {
				args = append(args, "--require-durable-fs")
			}
			c, err := parseConfig(t, nil, args...)
			if err != nil {
				t.Fatal(err)
			}
			h := goodHost()
			h.fsType = 0x794c7630
			h.soft = 100
			listening := make(chan struct{}, 1)
			c.hooks = &hooks{hostProbe: new(h.probe()), listening: func(string, string) { listening <- struct{}{} }}
			logs := testutil.NewLogBuffer()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- run(ctx, &c, slog.New(slog.NewTextHandler(logs, nil))) }()
			if tc.require {
				if err := <-done; err == nil || !strings.Contains(err.Error(), "--require-durable-fs") || !strings.Contains(err.Error(), "overlayfs") {
					t.Fatalf("run = %v, want the --require-durable-fs refusal", err)
				}
				if strings.Contains(logs.String(), "storage recovered") {
					t.Fatalf("storage opened before the refusal:\n%s", logs.String())
				}
				return
			}
			select {
			case <-listening:
			case err := <-done:
				t.Fatalf("run = %v; log:\n%s", err, logs.String())
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{`level=WARN msg="host check: data directory`, `check="file system" fix=`, `level=WARN msg="host check: RLIMIT_NOFILE 100`} {
				if n := strings.Count(logs.String(), want); n != 1 {
					t.Errorf("%d lines with %q, want 1:\n%s", n, want, logs.String())
				}
			}
		})
	}
}

// TestCheckCommand: sq-server check prints every check and exits
// non-zero on a failure, zero on warnings alone.
func TestCheckCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		fail bool
	}{
		{"warnings only", nil, false},
		{"a failure", []string{"--require-durable-fs"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := goodHost()
			h.fsType = 0x01021994
			c := &config{hooks: &hooks{hostProbe: new(h.probe())}}
			root := newRootFor(c)
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetArgs(append([]string{"check", "--data-dir", t.TempDir()}, tc.args...))
			err := root.Execute()
			if (err != nil) != tc.fail {
				t.Fatalf("check = %v, want failure %v; output:\n%s", err, tc.fail, out.String())
			}
			for _, want := range []string{"open files", "memory maps", "file system", "free space", "io_uring", "is on tmpfs", "fix: "} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output without %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// TestDataDirAccessCheck: check fails, with the fix, on a data directory
// serve could not use: a file, a path under a file, or a missing one
// whose nearest existing parent is not writable; a missing one under a
// writable parent is OK (serve creates it).
func TestDataDirAccessCheck(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		dir         string
		writableErr error
		msg, fix    string // "" OK
	}{
		{name: "exists", dir: base},
		{name: "missing under a writable parent", dir: filepath.Join(base, "a", "b")},
		{name: "a file", dir: file, msg: "is not a directory", fix: "give --data-dir a directory"},
		{name: "under a file", dir: filepath.Join(file, "d"), msg: file + " is not a directory"},
		{name: "missing under a parent not writable", dir: filepath.Join(base, "a", "b"), writableErr: syscall.EACCES,
			msg: "does not exist, and serve cannot create it: " + base + " is not writable", fix: "install -d -o sq -g sq -m 0750 " + filepath.Join(base, "a", "b")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, nil, "--data-dir", tc.dir)
			if err != nil {
				t.Fatal(err)
			}
			h := goodHost()
			h.writableErr = tc.writableErr
			var got *checkResult
			for _, r := range c.hostChecks(h.probe()) {
				if r.name == "data directory" {
					got = &r
				} else if r.level != checkOK && tc.msg != "" {
					t.Errorf("%s: %v %s, want OK", r.name, r.level, r.msg)
				}
			}
			switch {
			case tc.msg == "" && got != nil:
				t.Fatalf("data directory: %v %q, want no finding", got.level, got.msg)
			case tc.msg == "":
			case got == nil:
				t.Fatalf("no data directory finding, want one with %q", tc.msg)
			case got.level != checkFail || !strings.Contains(got.msg, tc.msg) || !strings.Contains(got.fix, tc.fix):
				t.Fatalf("data directory: %v %q fix %q; want FAIL, %q, fix with %q", got.level, got.msg, got.fix, tc.msg, tc.fix)
			}
		})
	}
}

// TestFSName: the check's OK line names the common file systems, and
// gives the number of the others.
func TestFSName(t *testing.T) {
	for _, tc := range []struct {
		t    int64
		want string
	}{{ext4Magic, "ext2/ext3/ext4"}, {0x58465342, "xfs"}, {0x01021994, "tmpfs"}, {0x12345678, "type 0x12345678"}} {
		if got := fsName(tc.t); got != tc.want {
			t.Errorf("fsName(%#x) = %q, want %q", tc.t, got, tc.want)
		}
	}
}
