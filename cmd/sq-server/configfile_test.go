package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/seedqueue/sq/internal/acl"
)

// writeConfig writes a config file named name with body in a temporary
// directory and returns its path.
func writeConfig(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// configPrint runs `sq-server config print` with args and the variables
// env and returns its output and error.
func configPrint(t *testing.T, env map[string]string, args ...string) (map[string][2]string, string, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(append([]string{"config", "print"}, args...))
	err := root.Execute()
	got := map[string][2]string{} // name -> value, source
	for _, l := range strings.Split(out.String(), "\n") {
		kv, src, ok := strings.Cut(l, "#")
		k, v, ok2 := strings.Cut(kv, " = ")
		if !ok || !ok2 || strings.HasPrefix(l, "#") {
			continue
		}
		got[strings.TrimSpace(k)] = [2]string{strings.TrimSpace(v), strings.TrimSpace(src)}
	}
	return got, out.String(), err
}

// TestConfigFileLayers: settings come from a TOML or YAML file, the SQ_*
// variables and the flags together; a flag wins over its variable, which
// wins over the file, which wins over the default, and config print
// names each value's source. SQ_CONFIG names the file as --config does.
func TestConfigFileLayers(t *testing.T) {
	files := map[string]string{
		"sq-server.toml": `# every layer below
max-connections = 2000       # file only
node-id = "from-file"        # env and flag win
log-level = "debug"          # env wins
seeds = ["10.0.0.1:6060", "10.0.0.2:6060"]
frame-read-timeout = "45s"
retention-ms = 86400000
min-free-bytes = "auto"
`,
		"sq-server.yaml": `# every layer below
max-connections: 2000
node-id: from-file
log-level: debug
seeds: [10.0.0.1:6060, 10.0.0.2:6060]
frame-read-timeout: 45s
retention-ms: 86400000
min-free-bytes: auto
`,
	}
	for name, body := range files {
		for _, viaEnv := range []bool{false, true} {
			t.Run(name+map[bool]string{false: " --config", true: " SQ_CONFIG"}[viaEnv], func(t *testing.T) {
				path := writeConfig(t, name, body)
				env := map[string]string{"SQ_NODE_ID": "from-env", "SQ_LOG_LEVEL": "warn", "SQ_MAX_RECORD_BYTES": "4096"}
				args := []string{"--node-id", "from-flag", "--max-batch-bytes", "65536"}
				if viaEnv {
					env["SQ_CONFIG"] = path
				} else {
					args = append(args, "--config", path)
				}
				got, out, err := configPrint(t, env, args...)
				if err != nil {
					t.Fatalf("config print: %v\n%s", err, out)
				}
				for k, want := range map[string][2]string{
					"max-connections":    {"2000", "file"},
					"node-id":            {`"from-flag"`, "flag"},
					"log-level":          {`"warn"`, "env"},
					"max-record-bytes":   {"4096", "env"},
					"max-batch-bytes":    {"65536", "flag"},
					"seeds":              {`"10.0.0.1:6060,10.0.0.2:6060"`, "file"},
					"frame-read-timeout": {`"45s"`, "file"},
					"retention-ms":       {"86400000", "file"},
					"min-free-bytes":     {`"auto"`, "file"},
					"cluster-id":         {`"default"`, "default"},
					"retention-bytes":    {"-1", "default"},
				} {
					if got[k] != want {
						t.Errorf("%s = %v, want %v", k, got[k], want)
					}
				}
				if _, ok := got["config"]; ok {
					t.Errorf("config print lists --config as a setting:\n%s", out)
				}
				if !strings.Contains(out, "config file: "+path) {
					t.Errorf("output does not name the file %s:\n%s", path, out)
				}
			})
		}
	}
}

// TestConfigFileErrors: a misspelled key is an error naming the file, the
// key, its line and the nearest setting; so are a value its flag refuses,
// a nested table or mapping, bad syntax and an unknown extension.
func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"sq.toml", "node-id = \"n1\"\n\nmax-conections = 10\n", []string{"sq.toml:3: unknown setting \"max-conections\"", `did you mean "max-connections"`}},
		{"sq.yaml", "node-id: n1\nlog-level: info\n  # comment\nmax-conections: 10\n", []string{"sq.yaml:4: unknown setting \"max-conections\"", `did you mean "max-connections"`}},
		{"sq.yml", "zzzzzz: 1\n", []string{"sq.yml:1: unknown setting \"zzzzzz\"", "keys are flag names"}},
		{"sq.toml", "'max-conections' = 10\n", []string{"sq.toml:1: unknown setting \"max-conections\""}},
		{"sq.toml", "config = \"/etc/other.toml\"\n", []string{"sq.toml:1: unknown setting \"config\""}},
		{"sq.toml", "\nmax-connections = \"many\"\n", []string{"sq.toml:2: max-connections = \"many\"", "invalid syntax"}},
		{"sq.yaml", "\n\nframe-read-timeout: soon\n", []string{"sq.yaml:3: frame-read-timeout = \"soon\""}},
		{"sq.toml", "[tls]\ncert = \"a.pem\"\n", []string{"sq.toml:1: tls: want a value, not a table"}},
		{"sq.yaml", "tls:\n  cert: a.pem\n", []string{"sq.yaml:2: tls: want a value, not a mapping"}},
		{"sq.toml", "node-id = \"n1\"\nnode-id = \"n2\"\n", []string{"sq.toml:2:"}},
		{"sq.yaml", "node-id: n1\nnode-id: n2\n", []string{"sq.yaml", "node-id"}},
		{"sq.toml", "node-id = n1\n", []string{"sq.toml:1:"}},
		{"sq.yaml", "- a\n- b\n", []string{"sq.yaml:1: want a mapping"}},
		{"sq.toml", "[[tls]]\ncert = \"a.pem\"\n", []string{"sq.toml:1: tls: want a value, not an array of tables"}},
		{"sq.toml", "auth-required = \"yes\"\n", []string{"sq.toml:1: auth-required = \"yes\": want true or false"}},
		{"sq.yaml", "metrics-auth: maybe\n", []string{"sq.yaml:1: metrics-auth = \"maybe\": want true or false"}},
		{"sq.yaml", "NODE-ID: n1\n", []string{"sq.yaml:1: unknown setting \"NODE-ID\"", `did you mean "node-id"`}},
		{"sq.toml", "Max-Connections = 10\n", []string{"sq.toml:1: unknown setting \"Max-Connections\"", `did you mean "max-connections"`}},
		{"sq.yaml", "node-id: n1\n---\nlog-level: debug\n", []string{"sq.yaml:3: a second YAML document"}},
		{"sq.json", "{}", []string{`unknown extension ".json": want .toml, .yaml or .yml`}},
	} {
		t.Run(tc.name+" "+strings.SplitN(tc.body, "\n", 2)[0], func(t *testing.T) {
			_, out, err := configPrint(t, nil, "--config", writeConfig(t, tc.name, tc.body))
			if err == nil {
				t.Fatalf("no error; output:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestConfigFileMissing: a --config that does not exist is an error
// naming the flag.
func TestConfigFileMissing(t *testing.T) {
	_, _, err := configPrint(t, nil, "--config", filepath.Join(t.TempDir(), "none.toml"))
	if err == nil || !strings.Contains(err.Error(), "--config") || !strings.Contains(err.Error(), "none.toml") {
		t.Fatalf("err = %v, want one naming --config and the file", err)
	}
}

// TestConfigPrintInvalid: config print prints, then fails on a
// configuration serve would refuse.
func TestConfigPrintInvalid(t *testing.T) {
	got, _, err := configPrint(t, nil, "--config", writeConfig(t, "sq.toml", "retention-ms = 0\n"))
	if err == nil || !strings.Contains(err.Error(), "--retention-ms 0") {
		t.Fatalf("err = %v, want the --retention-ms error", err)
	}
	if got["retention-ms"] != [2]string{"0", "file"} {
		t.Fatalf("retention-ms = %v, want 0 from the file", got["retention-ms"])
	}
}

// TestEnvNames: every flag's variable in the help is the one the layers
// read (SQ_ and the flag's words in capitals).
func TestEnvNames(t *testing.T) {
	for _, s := range flagSpecs {
		if got := envName(s.name); got != s.env {
			t.Errorf("--%s: help says %s, settings read %s", s.name, s.env, got)
		}
	}
}

// TestConfigFileListWithCommas: a list item may hold commas of its own,
// as a certificate subject in super-users does: the list is joined as
// the flag reads it, and the flag's parser gets every principal whole.
func TestConfigFileListWithCommas(t *testing.T) {
	for name, body := range map[string]string{
		"sq.toml": "super-users = [\"User:CN=ops,O=shop\", \"User:admin\"]\n",
		"sq.yaml": "super-users: [\"User:CN=ops,O=shop\", \"User:admin\"]\n",
	} {
		t.Run(name, func(t *testing.T) {
			got, out, err := configPrint(t, nil, "--config", writeConfig(t, name, body))
			if err != nil {
				t.Fatalf("config print: %v\n%s", err, out)
			}
			if want := [2]string{`"User:CN=ops,O=shop,User:admin"`, "file"}; got["super-users"] != want {
				t.Fatalf("super-users = %v, want %v", got["super-users"], want)
			}
			supers, err := acl.ParseSuperUsers("User:CN=ops,O=shop,User:admin")
			if err != nil || len(supers) != 2 {
				t.Fatalf("ParseSuperUsers = %v, %v; want 2 principals", supers, err)
			}
		})
	}
}

// TestEnvSwitchError: a switch's SQ_* variable that is not a boolean is
// refused naming the variable and what it takes, not strconv's text.
func TestEnvSwitchError(t *testing.T) {
	for _, v := range []string{"yes", "on", "enabled"} {
		c := &config{level: new(slog.LevelVar)}
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		bindFlags(fs, c)
		_, err := c.resolve(fs, func(k string) string {
			if k == "SQ_AUTH_REQUIRED" {
				return v
			}
			return ""
		})
		want := `SQ_AUTH_REQUIRED="` + v + `": want true or false`
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "strconv") {
			t.Errorf("SQ_AUTH_REQUIRED=%s: %v, want %q", v, err, want)
		}
	}
}
