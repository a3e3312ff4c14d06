package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/ratelog"
	"github.com/seedqueue/sq/internal/testutil"
)

// fakeDefaulter records the topic defaults a reload sets, or refuses
// them with err.
type fakeDefaulter struct {
	got []engine.TopicDefaults
	err error
}

func (f *fakeDefaulter) SetTopicDefaults(d engine.TopicDefaults) error {
	if f.err != nil {
		return f.err
	}
	f.got = append(f.got, d)
	return nil
}

// resolvedConfig is a config resolved as serve resolves it, from args,
// env and the config file args name.
func resolvedConfig(t *testing.T, env map[string]string, args ...string) *config {
	t.Helper()
	c := &config{level: new(slog.LevelVar)}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bindFlags(fs, c)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if _, err := c.resolve(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	c.logger() // sets the level
	return c
}

func names(chs []settingChange) []string {
	var out []string
	for _, ch := range chs {
		out = append(out, ch.name)
	}
	return out
}

// TestReload: a reload applies the live settings the file changed (log
// level, retention defaults), reports the others as waiting for a
// restart, keeps what the command line and the variables set, and on an
// invalid file or a refusal by the engine changes nothing.
func TestReload(t *testing.T) {
	const start = "log-level = \"info\"\nretention-ms = 3600000\nmax-connections = 100\nnode-id = \"n1\"\n"
	for _, tc := range []struct {
		name      string
		args      []string
		env       map[string]string
		next      string // the file at the reload
		engErr    error
		applied   []string
		restart   []string
		err       string
		level     slog.Level
		retention int64 // c.RetentionMs after
	}{
		{name: "unchanged", next: start, level: slog.LevelInfo, retention: 3600000},
		{name: "live and restart", next: "log-level = \"debug\"\nretention-ms = 7200000\nmax-connections = 200\nnode-id = \"n1\"\n",
			applied: []string{"log-level", "retention-ms"}, restart: []string{"max-connections"}, level: slog.LevelDebug, retention: 7200000},
		{name: "removed from the file: back to the default", next: "node-id = \"n1\"\nmax-connections = 100\nlog-level = \"info\"\n",
			applied: []string{"retention-ms"}, level: slog.LevelInfo, retention: engine.DefaultRetentionMs},
		{name: "flag wins over the file", args: []string{"--log-level", "warn"}, next: "log-level = \"debug\"\nretention-ms = 3600000\nmax-connections = 100\nnode-id = \"n1\"\n",
			level: slog.LevelWarn, retention: 3600000},
		{name: "env wins over the file", env: map[string]string{"SQ_RETENTION_MS": "60000"}, next: "log-level = \"error\"\nretention-ms = 1\nmax-connections = 100\nnode-id = \"n1\"\n",
			applied: []string{"log-level"}, level: slog.LevelError, retention: 60000},
		{name: "unknown key", next: start + "log-levl = \"debug\"\n", err: "unknown setting \"log-levl\"", level: slog.LevelInfo, retention: 3600000},
		{name: "invalid value", next: "log-level = \"loud\"\n", err: "--log-level \"loud\"", level: slog.LevelInfo, retention: 3600000},
		{name: "engine refuses", next: "log-level = \"debug\"\nretention-ms = 7200000\n", engErr: errors.New("refused"), err: "refused",
			level: slog.LevelInfo, retention: 3600000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, "sq.toml", start)
			c := resolvedConfig(t, tc.env, append([]string{"--config", path}, tc.args...)...)
			if err := os.WriteFile(path, []byte(tc.next), 0o600); err != nil {
				t.Fatal(err)
			}
			eng := &fakeDefaulter{err: tc.engErr}
			logs := testutil.NewLogBuffer()
			res, err := c.reload(eng, func(k string) string { return tc.env[k] }, slog.New(slog.NewTextHandler(logs, nil)))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("reload() = %v, want an error containing %q", err, tc.err)
				}
			} else if err != nil {
				t.Fatalf("reload() = %v", err)
			}
			if !slices.Equal(names(res.applied), tc.applied) || !slices.Equal(names(res.restart), tc.restart) {
				t.Errorf("applied %v, restart %v; want %v, %v", names(res.applied), names(res.restart), tc.applied, tc.restart)
			}
			if c.level.Level() != tc.level || c.RetentionMs != tc.retention {
				t.Errorf("level %v, retention-ms %d; want %v, %d", c.level.Level(), c.RetentionMs, tc.level, tc.retention)
			}
			if len(tc.applied) > 0 && (len(eng.got) != 1 || eng.got[0].RetentionMs != tc.retention) {
				t.Errorf("engine defaults set %+v, want one set with retention.ms %d", eng.got, tc.retention)
			}
			for _, ch := range tc.restart {
				if !strings.Contains(logs.String(), "takes effect at the next restart\" setting="+ch) {
					t.Errorf("no restart line for %s in:\n%s", ch, logs.String())
				}
			}
		})
	}
}

// TestSIGHUPReloadsLogLevel: a running server whose config file's
// log-level changes from info to debug logs at debug after a SIGHUP, and
// says what changed.
func TestSIGHUPReloadsLogLevel(t *testing.T) {
	path := writeConfig(t, "sq.yaml", "log-level: info\n")
	c := resolvedConfig(t, nil, "--config", path, "--data-dir", t.TempDir(), "--capnp-host", "127.0.0.1:0",
		"--http-host", "127.0.0.1:0", "--grpc-host", "", "--io-backend", "portable")
	logs := testutil.NewLogBuffer()
	log := slog.New(c.logHandler(logs))
	listening := make(chan struct{}, 3)
	c.hooks = &hooks{listening: func(string, string) { listening <- struct{}{} }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	testutil.Eventually(t, 30*time.Second, "the data plane listening", func() bool {
		return strings.Contains(logs.String(), "data plane listening")
	})
	if log.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("debug enabled before the reload")
	}
	if err := os.WriteFile(path, []byte("log-level: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the reload logged", func() bool {
		return strings.Contains(logs.String(), "SIGHUP: configuration reloaded")
	})
	if !strings.Contains(logs.String(), `msg="SIGHUP: setting changed" setting=log-level from=info to=debug source=file`) {
		t.Errorf("no line for the log level's change in:\n%s", logs.String())
	}
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("debug still disabled after the reload")
	}
}

// TestReloadAfterCobraParse: a reload of settings parsed by the root
// command, as `sq-server --config FILE --max-connections N serve` parses
// them (cobra parses the persistent flags into the subcommand's flag
// set), still reads the config file and keeps the command line's flags
// and the variables: the file's retention-ms is neither lost nor
// replaced by the default.
func TestReloadAfterCobraParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(path string) []string
		env  map[string]string
	}{
		{name: "flags before the subcommand", args: func(p string) []string {
			return []string{"--config", p, "--max-connections", "300", "config", "print"}
		}},
		{name: "flags after the subcommand", args: func(p string) []string {
			return []string{"config", "print", "--config", p, "--max-connections", "300"}
		}},
		{name: "config file from SQ_CONFIG", args: func(string) []string {
			return []string{"--max-connections", "300", "config", "print"}
		}, env: map[string]string{"SQ_CONFIG": "<path>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, "sq.toml", "log-level = \"info\"\nretention-ms = 3600000\nmax-connections = 100\n")
			for k, v := range tc.env {
				t.Setenv(k, strings.ReplaceAll(v, "<path>", path))
			}
			c := &config{level: new(slog.LevelVar)}
			root := newRootFor(c)
			root.SetArgs(tc.args(path))
			root.SetOut(io.Discard)
			if err := root.Execute(); err != nil {
				t.Fatalf("config print: %v", err)
			}
			if c.RetentionMs != 3600000 || c.MaxConnections != 300 {
				t.Fatalf("at start: retention-ms %d, max-connections %d; want 3600000, 300", c.RetentionMs, c.MaxConnections)
			}
			if err := os.WriteFile(path, []byte("log-level = \"debug\"\nretention-ms = 7200000\nmax-connections = 100\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			res, err := c.reload(&fakeDefaulter{}, os.Getenv, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatalf("reload() = %v", err)
			}
			if !slices.Equal(names(res.applied), []string{"log-level", "retention-ms"}) || len(res.restart) != 0 {
				t.Errorf("applied %v, restart %v; want [log-level retention-ms], []", names(res.applied), names(res.restart))
			}
			if c.RetentionMs != 7200000 || c.MaxConnections != 300 || c.level.Level() != slog.LevelDebug {
				t.Errorf("after the reload: retention-ms %d, max-connections %d, level %v; want 7200000, 300, DEBUG",
					c.RetentionMs, c.MaxConnections, c.level.Level())
			}
		})
	}
}

// TestReloadLinesNotLimited: through the server's repeat limiter
// (internal/ratelog), a reload logs every changed setting that waits for
// a restart, and every failed reload logs its error, even seconds
// apart: each line answers an operator's SIGHUP.
func TestReloadLinesNotLimited(t *testing.T) {
	path := writeConfig(t, "sq.toml", "max-connections = 100\nmax-connections-per-ip = 10\n")
	c := resolvedConfig(t, nil, "--config", path)
	logs := testutil.NewLogBuffer()
	log := slog.New(ratelog.New(slog.NewTextHandler(logs, nil), ratelog.Options{}))
	steps := []struct {
		file string
		want []string
	}{
		{"max-connections = 200\nmax-connections-per-ip = 20\n", []string{
			`setting=max-connections from=100 to=200`, `setting=max-connections-per-ip from=10 to=20`}},
		{"max-connections = [\n", []string{`toml:1`}},
		{"max-connections = -1\n", []string{`--max-connections -1 must be at least 1`}},
		{"max-connections = \"many\"\n", []string{`max-connections = \"many\"`}},
	}
	for _, st := range steps {
		if err := os.WriteFile(path, []byte(st.file), 0o600); err != nil {
			t.Fatal(err)
		}
		c.reloadLogged(&fakeDefaulter{}, func(string) string { return "" }, log)
		for _, w := range st.want {
			if !strings.Contains(logs.String(), w) {
				t.Errorf("after a reload of %q: no line with %q in:\n%s", st.file, w, logs.String())
			}
		}
	}
}
