package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

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
