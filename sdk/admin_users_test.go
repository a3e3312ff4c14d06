package sdk

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestCreateUserRefusedLocally: a name or password SCRAM cannot prepare
// (RFC 4013 SASLprep) is refused before any call, with
// INVALID_REQUEST naming the user and saying the reason once.
func TestCreateUserRefusedLocally(t *testing.T) {
	a, err := NewAdmin(AdminConfig{GrpcConfig: GrpcConfig{Addr: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tests := []struct{ name, user, password, want string }{
		{"tab in the name", "a\tb", "pw", "prohibited character"},
		{"control character in the password", "alice", "p\x01w", "prohibited character"},
		{"empty password", "alice", "", "empty password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := a.CreateUser(context.Background(), tt.user, tt.password, 0)
			if !errors.Is(err, api.ErrInvalidRequest) || strings.Count(err.Error(), tt.want) != 1 || !strings.Contains(err.Error(), "user ") {
				t.Fatalf("CreateUser(%q) = %v, want INVALID_REQUEST saying %q once", tt.user, err, tt.want)
			}
		})
	}
}
