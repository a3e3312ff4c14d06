package templates

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"
)

// composeFile is the part of a compose file (the Compose Specification,
// https://github.com/compose-spec/compose-spec/blob/main/spec.md) that
// the tests read. Anchors and merge keys (<<) are resolved by the YAML
// decoder.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

// composeService is one service of a compose file.
type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// composeBuild is a service's build section.
type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

// dockerfileName is the image of the SQ services.
const dockerfileName = "sq-server.Dockerfile"

// readCompose parses docker-compose.yaml.
func readCompose(t *testing.T) *composeFile {
	t.Helper()
	b, err := os.ReadFile("docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	if len(f.Services) == 0 {
		t.Fatal("docker-compose.yaml: no services")
	}
	return &f
}

// sqServices returns the names of the services built from
// sq-server.Dockerfile, sorted (sq-1, sq-2, sq-3).
func (f *composeFile) sqServices() []string {
	var out []string
	for name, s := range f.Services {
		if s.Build != nil && filepath.Base(s.Build.Dockerfile) == dockerfileName {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// dockerfile is what the tests read of sq-server.Dockerfile: its ENV
// settings, EXPOSEd ports and HEALTHCHECK command.
type dockerfile struct {
	Env         map[string]string
	Expose      []int
	Healthcheck []string
}

var (
	envLine    = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)=(\S+)`)
	exposeItem = regexp.MustCompile(`^(\d+)(/(tcp|udp))?$`)
	jsonArgs   = regexp.MustCompile(`"([^"]*)"`)
)

// readDockerfile parses the ENV, EXPOSE and HEALTHCHECK instructions of
// the final stage of sq-server.Dockerfile (continuation lines joined).
func readDockerfile(t *testing.T) *dockerfile {
	t.Helper()
	b, err := os.ReadFile(dockerfileName)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || (l == "" && cur.Len() == 0) {
			continue
		}
		if rest, ok := strings.CutSuffix(l, "\\"); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	d := &dockerfile{Env: map[string]string{}}
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(instr) {
		case "FROM": // a new stage: only the last one's settings count
			d = &dockerfile{Env: map[string]string{}}
		case "ENV":
			for _, m := range envLine.FindAllStringSubmatch(rest, -1) {
				d.Env[m[1]] = m[2]
			}
		case "EXPOSE":
			for item := range strings.FieldsSeq(rest) {
				m := exposeItem.FindStringSubmatch(item)
				if m == nil {
					t.Fatalf("%s: EXPOSE %q: not PORT[/tcp|/udp]", dockerfileName, item)
				}
				p, _ := strconv.Atoi(m[1])
				d.Expose = append(d.Expose, p)
			}
		case "HEALTHCHECK":
			_, cmd, ok := strings.Cut(rest, "CMD ")
			if !ok {
				t.Fatalf("%s: HEALTHCHECK without CMD: %q", dockerfileName, rest)
			}
			for _, m := range jsonArgs.FindAllStringSubmatch(cmd, -1) {
				d.Healthcheck = append(d.Healthcheck, m[1])
			}
		}
	}
	return d
}

// serverHelp is what `sq-server serve --help` lists: flag names (without
// dashes) and the SQ_* variable of each.
type serverHelp struct {
	Flags map[string]bool
	Env   map[string]bool
}

var (
	helpFlag = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)`)
	helpEnv  = regexp.MustCompile(`\(env (SQ_[A-Z0-9_]+)\)`)
)

// readHelp runs `sq-server serve --help` of the binary built from this
// tree and collects its flags and variables.
func readHelp(t *testing.T) *serverHelp {
	t.Helper()
	out, err := exec.Command(buildBins(t).server, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("sq-server serve --help: %v\n%s", err, out)
	}
	h := &serverHelp{Flags: map[string]bool{}, Env: map[string]bool{}}
	for l := range strings.SplitSeq(string(out), "\n") {
		if m := helpFlag.FindStringSubmatch(l); m != nil {
			h.Flags[m[1]] = true
		}
		if m := helpEnv.FindStringSubmatch(l); m != nil {
			h.Env[m[1]] = true
		}
	}
	if !h.Flags["seeds"] || !h.Env["SQ_SEEDS"] {
		t.Fatalf("sq-server serve --help lists no --seeds / SQ_SEEDS: the help's format changed?\n%s", out)
	}
	return h
}

// binaries are sq-server and sq built from this tree.
type binaries struct {
	once        sync.Once
	dir         string
	server, cli string
	err         error
}

var bins binaries

// buildBins builds sq-server and sq from this tree once per test binary
// (removed by TestMain).
func buildBins(t *testing.T) *binaries {
	t.Helper()
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "sq-templates-bin-")
		if bins.err != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", bins.dir+string(filepath.Separator),
			"github.com/seedqueue/sq/cmd/sq-server", "github.com/seedqueue/sq/cmd/sq").CombinedOutput()
		if err != nil {
			bins.err = fmt.Errorf("building sq-server and sq: %v\n%s", err, out)
		}
		bins.server = filepath.Join(bins.dir, "sq-server")
		bins.cli = filepath.Join(bins.dir, "sq")
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return &bins
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// nodeSettings is the configuration one SQ service of the compose file
// gives its sq-server: the image's ENV, overlaid by the service's
// environment, and the flags of its command (a flag wins over its
// variable, as in sq-server).
type nodeSettings struct {
	Args []string          // the command, as compose passes it to the entrypoint
	Env  map[string]string // every variable the process gets from the image and the service
}

// settings returns the configuration of SQ service name.
func (f *composeFile) settings(d *dockerfile, name string) nodeSettings {
	s := f.Services[name]
	env := map[string]string{}
	for k, v := range d.Env {
		env[k] = v
	}
	for k, v := range s.Environment {
		env[k] = v
	}
	return nodeSettings{Args: slices.Clone(s.Command), Env: env}
}

// flags returns the --flag value pairs of the command (--flag=value and
// --flag value forms).
func (n nodeSettings) flags() (map[string]string, error) {
	out := map[string]string{}
	for i := 0; i < len(n.Args); i++ {
		a := n.Args[i]
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		if k, v, eq := strings.Cut(name, "="); eq {
			out[k] = v
			continue
		}
		if i+1 >= len(n.Args) || strings.HasPrefix(n.Args[i+1], "--") {
			return nil, fmt.Errorf("flag --%s has no value", name)
		}
		out[name] = n.Args[i+1]
		i++
	}
	return out, nil
}

// setting returns the value of server flag name: the command's flag, else
// its SQ_* variable, else def.
func (n nodeSettings) setting(name, def string) string {
	if fl, err := n.flags(); err == nil {
		if v, ok := fl[name]; ok {
			return v
		}
	}
	if v, ok := n.Env["SQ_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))]; ok {
		return v
	}
	return def
}

// listenPorts returns the ports the node listens on: gRPC, Cap'n Proto,
// HTTP (defaults 6060, 6064, 6062), gossip and Raft (--gossip-host and
// --raft-host, else the gRPC port + 6 and + 7).
func (n nodeSettings) listenPorts() (map[int]string, error) {
	ports := map[int]string{}
	port := func(flag, def string) (int, error) {
		v := n.setting(flag, def)
		i := strings.LastIndexByte(v, ':')
		p, err := strconv.Atoi(v[i+1:])
		if i < 0 || err != nil {
			return 0, fmt.Errorf("--%s %q: no port", flag, v)
		}
		return p, nil
	}
	grpc, err := port("grpc-host", "127.0.0.1:6060")
	if err != nil {
		return nil, err
	}
	for _, l := range []struct{ flag, def string }{
		{"grpc-host", "127.0.0.1:6060"}, {"capnp-host", "127.0.0.1:6064"}, {"http-host", "127.0.0.1:6062"},
		{"gossip-host", ":" + strconv.Itoa(grpc+6)}, {"raft-host", ":" + strconv.Itoa(grpc+7)},
	} {
		p, err := port(l.flag, l.def)
		if err != nil {
			return nil, err
		}
		ports[p] = l.flag
	}
	return ports, nil
}

// TestComposeFile checks docker-compose.yaml and sq-server.Dockerfile
// against the server built from this tree: every flag and SQ_* variable
// they set exists in `sq-server serve --help`, every port an SQ service
// publishes or the image exposes is one the node listens on, every
// service named in depends_on and every named volume used is defined,
// and the image's health check is `sq-server probe --ready`.
func TestComposeFile(t *testing.T) {
	f := readCompose(t)
	d := readDockerfile(t)
	help := readHelp(t)
	sq := f.sqServices()
	if len(sq) != 3 {
		t.Fatalf("SQ services (built from %s): %v, want 3", dockerfileName, sq)
	}
	for k := range d.Env {
		if strings.HasPrefix(k, "SQ_") && !help.Env[k] {
			t.Errorf("%s: ENV %s is not a variable of sq-server serve --help", dockerfileName, k)
		}
	}
	if want := []string{"/usr/local/bin/sq-server", "probe", "--ready"}; !slices.Equal(d.Healthcheck, want) {
		t.Errorf("%s: HEALTHCHECK %q, want %q", dockerfileName, d.Healthcheck, want)
	}
	for _, name := range sq {
		t.Run(name, func(t *testing.T) {
			n := f.settings(d, name)
			if len(n.Args) == 0 || n.Args[0] != "serve" {
				t.Errorf("command %q: want serve first", n.Args)
			}
			fl, err := n.flags()
			if err != nil {
				t.Fatal(err)
			}
			for k := range fl {
				if !help.Flags[k] {
					t.Errorf("command flag --%s is not a flag of sq-server serve --help", k)
				}
			}
			for k := range f.Services[name].Environment {
				if strings.HasPrefix(k, "SQ_") && !help.Env[k] {
					t.Errorf("environment %s is not a variable of sq-server serve --help", k)
				}
			}
			listen, err := n.listenPorts()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range f.Services[name].Ports {
				parts := strings.Split(strings.TrimSuffix(strings.TrimSuffix(p, "/tcp"), "/udp"), ":")
				cport, err := strconv.Atoi(parts[len(parts)-1])
				if err != nil || len(parts) < 2 {
					t.Errorf("port %q: want HOST:CONTAINER", p)
					continue
				}
				if _, ok := listen[cport]; !ok {
					t.Errorf("publishes %q, but the node listens on %v", p, listen)
				}
			}
			for _, p := range d.Expose {
				if _, ok := listen[p]; !ok {
					t.Errorf("%s EXPOSEs %d, but the node listens on %v", dockerfileName, p, listen)
				}
			}
		})
	}
	for name, s := range f.Services {
		for dep := range s.DependsOn {
			if _, ok := f.Services[dep]; !ok {
				t.Errorf("service %s depends on %s, which is not defined", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("service %s mounts %s: %v", name, src, err)
				}
				continue
			}
			if _, ok := f.Volumes[src]; !ok {
				t.Errorf("service %s uses volume %s, which is not defined", name, src)
			}
		}
	}
}
