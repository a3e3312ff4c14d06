package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
	"github.com/seedqueue/sq/segment"
)

// TestMaxOpenSegmentFilesFlag: --max-open-segment-files defaults to
// segment.DefaultMaxOpenSegmentFiles, SQ_MAX_OPEN_SEGMENT_FILES sets it,
// the flag wins over the variable, and a value below 1 is refused naming
// the flag.
func TestMaxOpenSegmentFilesFlag(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     string
		want    int
		invalid bool
	}{
		{name: "default", want: segment.DefaultMaxOpenSegmentFiles},
		{name: "env", env: "64", want: 64},
		{name: "flag wins", args: []string{"--max-open-segment-files", "32"}, env: "64", want: 32},
		{name: "zero", args: []string{"--max-open-segment-files", "0"}, want: 0, invalid: true},
		{name: "negative env", env: "-5", want: -5, invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c config
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			bindFlags(fs, &c)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			getenv := func(k string) string {
				if k == "SQ_MAX_OPEN_SEGMENT_FILES" {
					return tc.env
				}
				return ""
			}
			if err := applyEnv(fs, getenv); err != nil {
				t.Fatal(err)
			}
			if c.MaxSegFiles != tc.want {
				t.Fatalf("MaxSegFiles = %d, want %d", c.MaxSegFiles, tc.want)
			}
			err := c.validate()
			if got := err != nil && strings.Contains(err.Error(), "--max-open-segment-files"); got != tc.invalid {
				t.Fatalf("validate() = %v, want an error naming the flag: %v", err, tc.invalid)
			}
		})
	}
}

// TestRootCommandListsEveryVariable: the command's long help lists each
// flag with its environment variable, one per line, the variables in one
// column however long the flag names are.
func TestRootCommandListsEveryVariable(t *testing.T) {
	long := newRootCommand().Long
	col := -1
	for _, s := range flagSpecs {
		line := ""
		for _, l := range strings.Split(long, "\n") {
			if strings.HasPrefix(l, "  --"+s.name+" ") {
				line = l
			}
		}
		i := strings.Index(line, s.env)
		if i < 0 {
			t.Fatalf("no line for --%s with %s in:\n%s", s.name, s.env, long)
		}
		if col >= 0 && i != col {
			t.Fatalf("%s at column %d, others at %d:\n%s", s.env, i, col, long)
		}
		col = i
	}
}

// parseConfig binds the flags, parses args, applies env and validates, as
// the serve command does.
func parseConfig(t *testing.T, env map[string]string, args ...string) (config, error) {
	t.Helper()
	var c config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bindFlags(fs, &c)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := applyEnv(fs, func(k string) string { return env[k] }); err != nil {
		return c, err
	}
	return c, c.validate()
}

// TestMemoryBoundFlags checks the defaults, the SQ_* variables and the
// errors of --max-inflight-request-bytes, --frame-read-timeout and
// --max-connections.
func TestMemoryBoundFlags(t *testing.T) {
	c, err := parseConfig(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxInflightRequestBytes != 256<<20 || c.FrameReadTimeout != 30*time.Second || c.MaxConnections != 10000 {
		t.Errorf("defaults %d, %v, %d; want 256 MiB, 30s, 10000", c.MaxInflightRequestBytes, c.FrameReadTimeout, c.MaxConnections)
	}
	c, err = parseConfig(t, map[string]string{
		"SQ_MAX_INFLIGHT_REQUEST_BYTES": "67108864",
		"SQ_FRAME_READ_TIMEOUT":         "5s",
		"SQ_MAX_CONNECTIONS":            "12",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxInflightRequestBytes != 64<<20 || c.FrameReadTimeout != 5*time.Second || c.MaxConnections != 12 {
		t.Errorf("from env: %d, %v, %d; want 64 MiB, 5s, 12", c.MaxInflightRequestBytes, c.FrameReadTimeout, c.MaxConnections)
	}
	c, err = parseConfig(t, map[string]string{"SQ_MAX_CONNECTIONS": "12"}, "--max-connections", "7")
	if err != nil || c.MaxConnections != 7 {
		t.Errorf("flag over env: %d, %v; want 7", c.MaxConnections, err)
	}
	if c.MaxConnectionsPerIP != 0 {
		t.Errorf("--max-connections-per-ip default %d, want 0 (no bound)", c.MaxConnectionsPerIP)
	}
	c, err = parseConfig(t, map[string]string{"SQ_MAX_CONNECTIONS_PER_IP": "50"})
	if err != nil || c.MaxConnectionsPerIP != 50 {
		t.Errorf("SQ_MAX_CONNECTIONS_PER_IP: %d, %v; want 50", c.MaxConnectionsPerIP, err)
	}

	bad := []struct {
		name string
		env  map[string]string
		args []string
		want []string // every one in the error
	}{
		{"budget zero", nil, []string{"--max-inflight-request-bytes", "0"}, []string{"--max-inflight-request-bytes 0", "at least"}},
		{"budget negative", nil, []string{"--max-inflight-request-bytes", "-5"}, []string{"--max-inflight-request-bytes -5"}},
		{"budget below one batch", nil, []string{"--max-inflight-request-bytes", "1048576"}, []string{"--max-inflight-request-bytes 1048576", "--max-batch-bytes"}},
		{"budget below a raised batch", nil, []string{"--max-batch-bytes", "300000000"}, []string{"--max-inflight-request-bytes 268435456"}},
		{"budget not a number", map[string]string{"SQ_MAX_INFLIGHT_REQUEST_BYTES": "256MiB"}, nil, []string{"SQ_MAX_INFLIGHT_REQUEST_BYTES", "256MiB"}},
		{"timeout zero", nil, []string{"--frame-read-timeout", "0s"}, []string{"--frame-read-timeout 0s must be positive"}},
		{"timeout negative", nil, []string{"--frame-read-timeout", "-1s"}, []string{"--frame-read-timeout -1s"}},
		{"timeout without unit", map[string]string{"SQ_FRAME_READ_TIMEOUT": "30"}, nil, []string{"SQ_FRAME_READ_TIMEOUT", `"30"`}},
		{"connections zero", nil, []string{"--max-connections", "0"}, []string{"--max-connections 0 must be at least 1"}},
		{"connections negative", map[string]string{"SQ_MAX_CONNECTIONS": "-1"}, nil, []string{"--max-connections -1"}},
		{"connections per IP negative", nil, []string{"--max-connections-per-ip", "-1"}, []string{"--max-connections-per-ip -1"}},
		{"all at once", nil, []string{"--max-connections", "0", "--frame-read-timeout", "0s", "--max-inflight-request-bytes", "0"},
			[]string{"--max-connections", "--frame-read-timeout", "--max-inflight-request-bytes"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(t, tc.env, tc.args...)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestBudgetCheckAgreesWithDataPlane makes sure a budget the flags accept
// is one dataplane.New and control.New accept: the smallest valid budget
// passes all three, one byte less fails the flags and the plane that
// needs it.
func TestBudgetCheckAgreesWithDataPlane(t *testing.T) {
	for _, args := range [][]string{nil, {"--max-frame-bytes", "4194304"}} {
		c, err := parseConfig(t, nil, args...)
		if err != nil {
			t.Fatal(err)
		}
		dpLeast := int64(8*c.MaxFrame + c.MaxBatch + 16<<10)
		ctlLeast := 2 * int64(c.MaxBatch+1<<20)
		least := max(dpLeast, ctlLeast)
		for _, budget := range []int64{least, least - 1} {
			c.MaxInflightRequestBytes = budget
			flagErr := c.validate()
			_, dpErr := dataplane.New(fixedLimits{maxBatch: c.MaxBatch}, dataplane.Options{
				MaxFrameBytes: uint32(c.MaxFrame), MaxInFlightRequestBytes: budget})
			_, ctlErr := control.New(control.Options{MaxBatchBytes: c.MaxBatch, MaxInflightRequestBytes: budget})
			if (flagErr == nil) != (budget >= least) || (dpErr == nil) != (budget >= dpLeast) || (ctlErr == nil) != (budget >= ctlLeast) {
				t.Errorf("%v budget %d: flags %v, dataplane %v, control %v; want ok from each when at least %d, %d and %d",
					args, budget, flagErr, dpErr, ctlErr, least, dpLeast, ctlLeast)
			}
		}
	}
}

// fixedLimits is a Broker that only states its batch limit; New asks
// nothing else of it.
type fixedLimits struct {
	dataplane.Broker
	maxBatch int
}

func (f fixedLimits) Limits() engine.Limits { return engine.Limits{MaxBatchBytes: f.maxBatch} }

// TestReplicationFlags checks the defaults, the SQ_* variables and the
// errors of --replica-lag-time-max-ms and --scrub-interval.
func TestReplicationFlags(t *testing.T) {
	c, err := parseConfig(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.ReplicaLagTimeMaxMs != 30000 || c.ScrubInterval != 24*time.Hour {
		t.Errorf("defaults %d, %v; want 30000, 24h", c.ReplicaLagTimeMaxMs, c.ScrubInterval)
	}
	c, err = parseConfig(t, map[string]string{"SQ_REPLICA_LAG_TIME_MAX_MS": "500", "SQ_SCRUB_INTERVAL": "2s"})
	if err != nil || c.ReplicaLagTimeMaxMs != 500 || c.ScrubInterval != 2*time.Second {
		t.Errorf("from the variables: %d, %v, %v", c.ReplicaLagTimeMaxMs, c.ScrubInterval, err)
	}
	for _, tc := range []struct{ arg, flag string }{
		{"--replica-lag-time-max-ms=0", "--replica-lag-time-max-ms"},
		{"--scrub-interval=0s", "--scrub-interval"},
	} {
		if _, err := parseConfig(t, nil, tc.arg); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: %v, want an error naming %s", tc.arg, err, tc.flag)
		}
	}
}

// TestValidateNames: what serve refused only once it opened the engine or
// a listener (an engine error without the flag's name) or did not refuse
// at all (an empty --capnp-host listened on every interface) is refused
// by validate, naming the flag, so that config print fails as serve does.
func TestValidateNames(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" valid
	}{
		{args: nil},
		{args: []string{"--segment-bytes", "0"}},
		{args: []string{"--segment-bytes", "16777216"}},
		{args: []string{"--segment-bytes", "-5"}, want: "--segment-bytes -5 out of range [4096, 4294967295]"},
		{args: []string{"--segment-bytes", "4294967296"}, want: "--segment-bytes 4294967296 out of range"},
		{args: []string{"--segment-bytes", "8192"}, want: "--segment-bytes 8192 is smaller than --max-batch-bytes 16777216"},
		{args: []string{"--capnp-host", ""}, want: "--capnp-host must not be empty"},
		{args: []string{"--capnp-host", "nohost"}, want: `--capnp-host "nohost"`},
		{args: []string{"--http-host", ""}},
		{args: []string{"--http-host", "127.0.0.1:99999"}, want: `--http-host "127.0.0.1:99999"`},
		{args: []string{"--cluster-id", ""}, want: "--cluster-id must not be empty"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseConfig(t, nil, tc.args...)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
