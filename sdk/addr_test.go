package sdk

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want string // "" when accepted, else a part of the message
	}{
		{"127.0.0.1:6064", ""},
		{"localhost:6064", ""},
		{"[::1]:6064", ""},
		{":6064", ""},
		{"localhost:http", ""}, // a service name, as net.Dial takes
		{"nosuchhost.invalid:6064", ""},
		{"", `address "" is empty; want host:port such as 127.0.0.1:6064`},
		{"127.0.0.1", `address "127.0.0.1" has no port; want host:port such as 127.0.0.1:6064`},
		{"localhost", `has no port; want host:port such as localhost:6064`},
		{"::1", `has no port (an IPv6 address takes brackets); want host:port such as [::1]:6064`},
		{"[::1]", `has no port (an IPv6 address takes brackets); want host:port such as [::1]:6064`},
		{"[fe80::1]", `such as [fe80::1]:6064`},
		{"127.0.0.1:", `has no port; want host:port such as 127.0.0.1:6064`},
		{"127.0.0.1:0", `has port 0 (a port is 1-65535)`},
		{"127.0.0.1:65536", `has port 65536 (a port is 1-65535)`},
		{"127.0.0.1:99999999999999999999", `(a port is 1-65535)`},
		{"http://127.0.0.1:6064", `has a scheme (http://); want host:port such as 127.0.0.1:6064`},
		{"tcp://broker/", `has a scheme (tcp://); want host:port such as broker:6064`},
		{"a:b:c", `is not host:port (too many colons in address)`},
	} {
		err := checkAddr(tc.addr, defaultDataPort)
		if tc.want == "" {
			if err != nil {
				t.Errorf("checkAddr(%q) = %v, want nil", tc.addr, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrBadAddr) {
			t.Errorf("checkAddr(%q) = %v, want an ErrBadAddr containing %q", tc.addr, err, tc.want)
		}
	}
}

// TestBadAddrRefusedBeforeDialing: Dial, NewConsumer and NewAdmin refuse
// an address that is not host:port at once, without retrying, and gRPC's
// resolver targets stay accepted by NewAdmin.
func TestBadAddrRefusedBeforeDialing(t *testing.T) {
	ctx := context.Background()
	for _, addr := range []string{"127.0.0.1", "::1", "http://127.0.0.1:6064", "127.0.0.1:0"} {
		if _, err := Dial(ctx, ClientConfig{Addr: addr}); !errors.Is(err, ErrBadAddr) || errors.Is(err, ErrConnection) {
			t.Errorf("Dial(%q) = %v, want ErrBadAddr and not ErrConnection", addr, err)
		}
		if _, err := NewConsumer(ctx, ConsumerConfig{Addr: addr, Topic: "t"}); !errors.Is(err, ErrBadAddr) {
			t.Errorf("NewConsumer(%q) = %v, want ErrBadAddr", addr, err)
		}
		_, err := NewAdmin(AdminConfig{GrpcConfig: GrpcConfig{Addr: strings.Replace(addr, "6064", "6060", 1)}})
		var ae *AddrError
		if !errors.As(err, &ae) || !strings.Contains(ae.Example, ":6060") {
			t.Errorf("NewAdmin(%q) = %v, want an *AddrError with a :6060 example", addr, err)
		}
	}
	for _, target := range []string{"dns:///localhost:6060", "unix:///tmp/sq.sock", "passthrough:///127.0.0.1:6060"} {
		a, err := NewAdmin(AdminConfig{GrpcConfig: GrpcConfig{Addr: target}})
		if err != nil {
			t.Errorf("NewAdmin(%q) = %v, want a gRPC target accepted", target, err)
			continue
		}
		a.Close()
	}
}
