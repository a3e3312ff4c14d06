package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seedqueue/sq/sdk"
)

// TestConnectErrorNamesTheLeader: a connection failure to a partition's
// leader other than the --server node names that leader in every message
// that otherwise says the server could not be reached (connectError,
// apiError, lostServer); one to the --server node still names it.
func TestConnectErrorNamesTheLeader(t *testing.T) {
	const server, leader = "127.0.0.1:6084", "127.0.0.1:6074"
	lce := func(addr string) error {
		return fmt.Errorf("producer 0: %w", &sdk.LeaderConnectionError{Topic: "orders", Partition: 2, Leader: addr,
			Err: fmt.Errorf("%w: %s: dial tcp: connection refused", sdk.ErrConnection, addr)})
	}
	for name, explain := range map[string]func(string, error) error{
		"connectError": connectError, "apiError": apiError, "lostServer": lostServer,
	} {
		err := explain(server, lce(leader))
		want := "the leader of orders partition 2, " + leader + ", could not be reached: "
		if !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), server) || !errors.Is(err, sdk.ErrConnection) {
			t.Errorf("%s: %q, want prefix %q, not naming %s, wrapping ErrConnection", name, err, want, server)
		}
		var got *sdk.LeaderConnectionError
		if !errors.As(err, &got) {
			t.Errorf("%s: %q no longer unwraps to the LeaderConnectionError", name, err)
		}
		if err := explain(server, lce(server)); !strings.Contains(err.Error(), server) || strings.Contains(err.Error(), "the leader of") {
			t.Errorf("%s with the server as leader: %q, want the server named as before", name, err)
		}
	}
}
