package sdk

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ErrBadAddr is matched by the error of Dial, NewProducer, NewConsumer and
// NewAdmin (through *AddrError) when the configured address is not
// host:port: a missing port, a scheme such as "http://", an IPv6 literal
// without brackets, or a port outside 1-65535. Nothing is dialed; the
// error is permanent.
var ErrBadAddr = errors.New("sdk: bad address")

// AddrError reports an address that is not host:port. It matches
// ErrBadAddr.
type AddrError struct {
	Addr string // the address as configured
	// Problem says what is wrong, for example "no port".
	Problem string
	// Example is the address written as it is wanted, for example
	// "127.0.0.1:6064" (the plane's default port when none was given).
	Example string
}

// Message is the error text without the "sdk: " prefix, for example
// `address "127.0.0.1" has no port; want host:port such as 127.0.0.1:6064`.
func (e *AddrError) Message() string {
	return fmt.Sprintf("address %q %s; want host:port such as %s", e.Addr, e.Problem, e.Example)
}

func (e *AddrError) Error() string { return "sdk: " + e.Message() }

// Is matches ErrBadAddr.
func (e *AddrError) Is(target error) bool { return target == ErrBadAddr }

// checkAddr returns an *AddrError unless addr is host:port with a port
// from 1 to 65535 (a number or a service name such as "http", as
// net.Dial takes) and a host that is not empty. The host is not resolved
// here. defaultPort is the plane's default port, used in the example.
func checkAddr(addr, defaultPort string) error {
	bad := func(problem, example string) error {
		return &AddrError{Addr: addr, Problem: problem, Example: example}
	}
	if addr == "" {
		return bad("is empty", "127.0.0.1:"+defaultPort)
	}
	if scheme, rest, ok := strings.Cut(addr, "://"); ok {
		return bad(fmt.Sprintf("has a scheme (%s://)", scheme), withPort(strings.TrimSuffix(rest, "/"), defaultPort))
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if ip := net.ParseIP(strings.Trim(addr, "[]")); ip != nil && ip.To4() == nil {
			return bad("has no port (an IPv6 address takes brackets)", net.JoinHostPort(ip.String(), defaultPort))
		}
		if strings.Count(addr, ":") == 0 || strings.HasPrefix(addr, "[") {
			return bad("has no port", net.JoinHostPort(strings.Trim(addr, "[]"), defaultPort))
		}
		return bad("is not host:port ("+strings.TrimPrefix(err.Error(), "address "+addr+": ")+")", "127.0.0.1:"+defaultPort)
	}
	example := net.JoinHostPort(host, defaultPort)
	if host == "" {
		example = "127.0.0.1:" + port
	}
	switch n, err := strconv.ParseUint(port, 10, 16); {
	case port == "":
		return bad("has no port", example)
	case err == nil && n == 0:
		return bad("has port 0 (a port is 1-65535)", example)
	case err != nil && isDigits(port):
		return bad(fmt.Sprintf("has port %s (a port is 1-65535)", port), example)
	}
	return nil
}

// withPort appends port to a bare host, or keeps a host:port as it is.
func withPort(hostport, port string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	return net.JoinHostPort(strings.Trim(hostport, "[]"), port)
}

// isDigits reports whether s is one or more ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// checkControlAddr is checkAddr for the gRPC control plane, where a
// target may also name a gRPC resolver (dns:///host:port, unix:///path,
// passthrough:///host:port); http:// and https:// are no resolvers and are
// refused as schemes.
func checkControlAddr(addr string) error {
	if scheme, _, ok := strings.Cut(addr, "://"); ok && scheme != "http" && scheme != "https" {
		return nil
	}
	return checkAddr(addr, defaultControlPort)
}
