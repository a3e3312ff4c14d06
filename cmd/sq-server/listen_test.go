package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestListenAddressInUse: a listener whose address another program holds
// fails the start with the address and the flag and variable that move
// it, for each of the three listeners; the other listeners pick free
// ports.
func TestListenAddressInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	taken := busy.Addr().String()
	for _, tc := range []struct{ flag, env, what string }{
		{"--capnp-host", "SQ_CAPNP_HOST", "data plane"},
		{"--grpc-host", "SQ_GRPC_HOST", "control plane"},
		{"--http-host", "SQ_HTTP_HOST", "http"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			args := map[string]string{"--capnp-host": "127.0.0.1:0", "--grpc-host": "127.0.0.1:0", "--http-host": "127.0.0.1:0"}
			args[tc.flag] = taken
			var c config
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			bindFlags(fs, &c)
			argv := []string{"--data-dir", t.TempDir(), "--io-backend", "portable"}
			for f, v := range args {
				argv = append(argv, f, v)
			}
			if err := fs.Parse(argv); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // guards against a hang only
			defer cancel()
			err := run(ctx, &c, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if ctx.Err() != nil {
				t.Fatal("run did not return before the guard deadline")
			}
			want := tc.what + ": listen on " + taken + ": address already in use (by another program, another sq-server say); give it another address with " + tc.flag + " or " + tc.env
			if err == nil || err.Error() != want || !errors.Is(err, syscall.EADDRINUSE) {
				t.Fatalf("run: %v\nwant %s", err, want)
			}
		})
	}
}

// TestListenErrorOtherCauses: a failure other than an address in use
// keeps its cause and names no flag.
func TestListenErrorOtherCauses(t *testing.T) {
	for _, cause := range []error{syscall.EACCES, syscall.EADDRNOTAVAIL, errors.New("lookup nosuchhost: no such host")} {
		err := listenError("data plane", "--capnp-host", "SQ_CAPNP_HOST", "nosuchhost:6064", cause)
		if !errors.Is(err, cause) || strings.Contains(err.Error(), "--capnp-host") ||
			err.Error() != "data plane: listen on nosuchhost:6064: "+cause.Error() {
			t.Errorf("listenError(%v) = %v", cause, err)
		}
	}
}
