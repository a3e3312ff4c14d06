package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/seedqueue/sq/internal/ratelog"
)

// TestIgnoredFlagsAreLogged: each flag accepted and ignored by this build
// (every flag whose help says "not in this build") is logged once with its
// value when set, by flag or by environment variable, and nothing is
// logged for the ones left unset.
func TestIgnoredFlagsAreLogged(t *testing.T) {
	listed := map[string]bool{}
	for _, f := range ignoredFlags {
		listed[f.flag] = true
	}
	for _, s := range flagSpecs {
		if strings.Contains(s.usage, "not in this build") && !listed["--"+s.name] {
			t.Errorf("--%s is not served in this build but is missing from ignoredFlags", s.name)
		}
	}
	for _, f := range ignoredFlags {
		for _, viaEnv := range []bool{false, true} {
			var args []string
			env := map[string]string{}
			value := "v-" + strings.TrimPrefix(f.flag, "--")
			if viaEnv {
				env[f.env] = value
			} else {
				args = append(args, f.flag, value)
			}
			c, err := parseConfig(t, env, args...)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			logIgnored(&c, slog.New(slog.NewTextHandler(&buf, nil)))
			out := buf.String()
			if n := strings.Count(out, "\n"); n != 1 {
				t.Fatalf("%s set (env %v): %d lines logged, want 1:\n%s", f.flag, viaEnv, n, out)
			}
			for _, want := range []string{"flag=" + f.flag, "env=" + f.env, "value=" + value, "accepted and ignored"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s set (env %v): log %q lacks %q", f.flag, viaEnv, out, want)
				}
			}
		}
	}
	c, err := parseConfig(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logIgnored(&c, slog.New(slog.NewTextHandler(&buf, nil)))
	if buf.Len() != 0 {
		t.Errorf("nothing set, yet logged:\n%s", buf.String())
	}
}

// TestServerLoggerLimitsRepeats: the server's logger lets one of a burst
// of identical WARN lines through, passes INFO lines, and Flush (at the
// end of run) logs the count of the dropped ones.
func TestServerLoggerLimitsRepeats(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		c, err := parseConfig(t, nil, "--log-format", format)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.logger().Handler().(*ratelog.Handler); !ok {
			t.Fatalf("%s: server logger handler is %T, want *ratelog.Handler", format, c.logger().Handler())
		}
		var buf bytes.Buffer
		h := ratelog.New(c.logHandler(&buf), ratelog.Options{})
		log := slog.New(h)
		for range 657 {
			log.Warn("free disk space below the floor", "data_dir", "/d")
		}
		log.Info("started")
		log.Info("started")
		h.Flush()
		out := buf.String()
		if n := strings.Count(out, "free disk space below the floor"); n != 2 {
			t.Errorf("%s: %d disk lines, want the first and one with the count:\n%s", format, n, out)
		}
		if n := strings.Count(out, "started"); n != 2 {
			t.Errorf("%s: %d INFO lines, want 2", format, n)
		}
		if !strings.Contains(out, "suppressed=656") && !strings.Contains(out, `"suppressed":656`) {
			t.Errorf("%s: no suppressed=656 in\n%s", format, out)
		}
	}
}
