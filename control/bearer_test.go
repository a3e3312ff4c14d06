package control

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"
)

// TestBearerToken: the token of an authorization header, whatever the
// case of its scheme; other schemes and malformed values give none.
func TestBearerToken(t *testing.T) {
	tests := []struct{ header, want string }{
		{"Bearer abc", "abc"},
		{"bearer abc", "abc"},
		{"BEARER  abc ", "abc"},
		{"Basic YTpi", ""},
		{"Bearer", ""},
		{"abc", ""},
	}
	for _, tt := range tests {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", tt.header))
		if got := bearerToken(ctx); got != tt.want {
			t.Errorf("bearerToken(%q) = %q, want %q", tt.header, got, tt.want)
		}
	}
}
