package dataplane

import (
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

// frameRequests returns every member of the Frame union that a client
// sends: those whose name ends in "Request", read from the generated
// schema code, so a request added to api/sq.capnp is listed here.
func frameRequests(t *testing.T) []api.Frame_Which {
	t.Helper()
	var out []api.Frame_Which
	for w := api.Frame_Which(0); w < 1<<12; w++ {
		name := w.String()
		if strings.HasPrefix(name, "Frame_Which(") {
			continue
		}
		if strings.HasSuffix(name, "Request") {
			out = append(out, w)
		}
	}
	if len(out) < 25 {
		t.Fatalf("found %d request kinds: the enumeration is broken", len(out))
	}
	return out
}

// TestEveryRequestHasARule: every data-plane request kind has an
// authorization rule. A request added to the schema without one fails
// here (and is refused when authorization is on).
func TestEveryRequestHasARule(t *testing.T) {
	reqs := frameRequests(t)
	for _, w := range reqs {
		if _, ok := requestRules[w]; !ok {
			t.Errorf("request %v has no authorization rule in requestRules (net/dataplane/authz.go)", w)
		}
	}
	for w := range requestRules {
		if !strings.HasSuffix(w.String(), "Request") {
			t.Errorf("requestRules holds %v, which is not a request", w)
		}
	}
}
