package control

import (
	"errors"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestPrincipalArg: the principal of a quota request, completed to
// User:<name>, and the names that could never match a client refused.
func TestPrincipalArg(t *testing.T) {
	tests := []struct {
		principal string
		def       bool
		want      string
		wantErr   string // "" when accepted
	}{
		{"alice", false, "User:alice", ""},
		{"User:alice", false, "User:alice", ""},
		{"User:CN=orders-app,O=shop", false, "User:CN=orders-app,O=shop", ""},
		{"", true, "", ""},
		{"", false, "", "principal is empty"},
		{"alice", true, "", "both set"},
		{"User:", false, "", `principal "User:" has an empty name`},
		{"User:*", false, "", "--default"},
		{"*", false, "", "--default"},
		{"\xff", false, "", "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.principal, func(t *testing.T) {
			got, err := principalArg(tt.principal, tt.def)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("principalArg(%q, %v) = %q, %v; want %q", tt.principal, tt.def, got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, api.ErrInvalidRequest) ||
				strings.Contains(err.Error(), "ACL") {
				t.Fatalf("principalArg(%q, %v) = %q, %v; want INVALID_REQUEST saying %q, not about ACLs", tt.principal, tt.def, got, err, tt.wantErr)
			}
		})
	}
}
