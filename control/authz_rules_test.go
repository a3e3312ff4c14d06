package control

import (
	"fmt"
	"testing"

	"github.com/seedqueue/sq/api/sqv1"
)

// sqMethods returns the full name of every method of every sq.v1
// service, read from the generated descriptors, so an RPC added to
// api/sq.proto is listed here.
func sqMethods(t *testing.T) []string {
	t.Helper()
	var out []string
	svcs := sqv1.File_sq_proto.Services()
	for i := range svcs.Len() {
		svc := svcs.Get(i)
		ms := svc.Methods()
		for j := range ms.Len() {
			out = append(out, fmt.Sprintf("/%s/%s", svc.FullName(), ms.Get(j).Name()))
		}
	}
	if len(out) < 30 {
		t.Fatalf("found %d methods: the enumeration is broken", len(out))
	}
	return out
}

// TestEveryMethodHasARule: every sq.v1 method has an authorization rule.
// An RPC added without one fails here (and is refused when authorization
// is on).
func TestEveryMethodHasARule(t *testing.T) {
	methods := map[string]bool{}
	for _, m := range sqMethods(t) {
		methods[m] = true
		if _, ok := grpcRules[m]; !ok {
			t.Errorf("%s has no authorization rule in grpcRules (control/authz.go)", m)
		}
	}
	for m := range grpcRules {
		if !methods[m] {
			t.Errorf("grpcRules holds %s, which is not an sq.v1 method", m)
		}
	}
}
