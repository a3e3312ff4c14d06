package main

import (
	"strings"
	"testing"
)

// TestBadAddressRefused: an address that is not host:port is refused on
// both planes, by every kind of command, naming the flag that sets it and
// an address as it is wanted; none is dialed (gRPC would try port 443 for
// a missing port), so no server is needed.
func TestBadAddressRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--server", "127.0.0.1", "topic", "list"}, nil,
			`address "127.0.0.1" has no port; want host:port such as 127.0.0.1:6064 (set it with --server or SQ_SERVER)`},
		{[]string{"topic", "list"}, map[string]string{"SQ_SERVER": "::1"},
			`address "::1" has no port (an IPv6 address takes brackets); want host:port such as [::1]:6064 (set it with --server or SQ_SERVER)`},
		{[]string{"--server", "http://localhost:6064", "consume", "-t", "x"}, nil,
			`address "http://localhost:6064" has a scheme (http://); want host:port such as localhost:6064 (set it with --server or SQ_SERVER)`},
		{[]string{"--server", "localhost:70000", "consume", "-t", "x", "-g", "g"}, nil,
			`has port 70000 (a port is 1-65535)`},
		{[]string{"--server", "127.0.0.1", "group", "list"}, nil, `(set it with --server or SQ_SERVER)`},
		{[]string{"--control", "127.0.0.1", "cluster", "info"}, nil,
			`address "127.0.0.1" has no port; want host:port such as 127.0.0.1:6060 (set it with --control or SQ_CONTROL)`},
		{[]string{"topic", "alter", "x", "--retention-ms", "1"}, map[string]string{"SQ_CONTROL": "[::1]"},
			`has no port (an IPv6 address takes brackets); want host:port such as [::1]:6060 (set it with --control or SQ_CONTROL)`},
		{[]string{"--server", "", "topic", "list"}, nil, `--server is empty: want host:port such as 127.0.0.1:6064`},
		{[]string{"--control", "", "cluster", "info"}, nil, `--control is empty: want host:port such as 127.0.0.1:6060`},
	} {
		_, err := runSQ(t, tc.env, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sq %q (env %v): error %v, want it to contain %q", tc.args, tc.env, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "cannot reach") {
			t.Errorf("sq %q: %v: a malformed address is not an unreachable one", tc.args, err)
		}
	}
}
