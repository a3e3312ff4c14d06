package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestRunPasses(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-seed", "3", "-steps", "2000", "-nodes", "5"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if !strings.Contains(out.String(), "sq-sim: seed 3 passed") {
		t.Fatalf("stdout %q", out.String())
	}
}

func TestRunFailurePrintsSeedAndStep(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"-seed", "1", "-steps", "20000", "-break", "leader-alone-hw"}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr %q", code, errOut.String())
	}
	if !regexp.MustCompile(`^sq-sim: seed 1 failed at step [0-9]+: .+\n$`).MatchString(errOut.String()) {
		t.Fatalf("stderr %q, want \"sq-sim: seed 1 failed at step N: <invariant>\"", errOut.String())
	}
}

func TestRunRandomSeedPrinted(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-steps", "10"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if !regexp.MustCompile(`^sq-sim: seed [0-9]+, 10 steps, 3 nodes\n`).MatchString(out.String()) {
		t.Fatalf("stdout %q does not start with the seed", out.String())
	}
}

func TestRunBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-break", "nope"}, {"-nodes", "0"}, {"extra"}, {"-steps", "x"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 || errOut.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, errOut.String())
		}
	}
}
