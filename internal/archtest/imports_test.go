package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/seedqueue/sq"

// forbidden maps a package (and everything under it) to the module
// packages it must not depend on, directly or not.
var forbidden = map[string][]string{
	"api":           {"sdk", "net", "control", "gossip", "tier", "engine", "segment", "ring", "cmd"},
	"sdk":           {"net", "control", "gossip", "tier", "engine", "segment", "ring", "cmd"},
	"engine":        {"net", "control", "gossip", "cmd", "sdk"},
	"segment":       {"engine", "net", "control", "gossip", "tier", "cmd", "sdk"},
	"ring":          {"segment", "engine", "net", "control", "gossip", "tier", "cmd", "sdk", "api"},
	"net/dataplane": {"cmd", "sdk", "control", "gossip"},
	"control":       {"cmd", "sdk", "net", "gossip"},
}

func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		rel, ok := strings.CutPrefix(pkg, module+"/")
		if !ok {
			continue
		}
		for owner, bans := range forbidden {
			if rel != owner && !strings.HasPrefix(rel, owner+"/") {
				continue
			}
			for _, d := range deps {
				drel, ok := strings.CutPrefix(d, module+"/")
				if !ok {
					continue
				}
				for _, ban := range bans {
					if drel == ban || strings.HasPrefix(drel, ban+"/") {
						t.Errorf("%s imports %s: docs/architecture.md §2 forbids %s -> %s", rel, drel, owner, ban)
					}
				}
			}
		}
	}
}
