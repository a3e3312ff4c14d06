// Command sq is the command-line client of SQ (SeedQueue): it creates,
// lists and describes topics, produces records from lines of text and
// consumes them as raw lines or JSON. It speaks the Cap'n Proto data plane
// of sq-server through the Go SDK (package sdk).
//
// The server's data-plane address is taken from --server, else from the
// SQ_SERVER environment variable, else 127.0.0.1:6064 (the default of
// sq-server --capnp-host).
//
// Examples:
//
//	sq topic create orders --partitions 3
//	sq topic create audit --partitions 1 --sync-policy every-batch --retention-ms 86400000
//	sq topic list
//	sq topic describe orders
//	sq topic list -f json    # one JSON document; so do group list/describe and cluster info/members
//
//	# one record per line of the file (stdin by default)
//	sq produce --topic orders --file orders.txt
//	printf 'k1:v1\nk2:v2\n' | sq produce --topic orders --key-separator :
//
//	# everything stored now, then exit
//	sq consume --topic orders --from earliest
//	# as JSON, resuming from and committing the offsets of a group
//	sq consume --topic orders --group billing --format json
//	# keep reading new records until Ctrl-C
//	SQ_SERVER=10.0.0.1:6064 sq consume --topic orders --from latest --follow
//
//	# consumer groups: members, assignment, committed offsets and lag
//	sq group list
//	sq group describe billing
//	sq group reset-offsets billing --topic orders --to earliest
//	sq group delete billing
//
// What only the gRPC control plane offers (sq topic alter, sq cluster info,
// members and remove-node)
// goes to --control, else SQ_CONTROL, else 127.0.0.1:6060 (the default of
// sq-server --grpc-host):
//
//	sq topic alter orders --retention-ms 86400000
//	sq --control 10.0.0.1:6060 cluster info
//	sq --control 10.0.0.1:6060 cluster members
//	sq --control 10.0.0.1:6060 cluster remove-node node-3
//
// --timeout (else SQ_TIMEOUT, else 5s) bounds connecting to either plane
// plus its handshake or first call; an address that answers in another
// protocol (the gRPC port given as --server, say) is named for what it
// speaks. `sq --version` prints "sq VERSION (commit C, goX.Y)".
//
// Errors are printed as "sq: NAME: message" with the catalog name of the
// server's error (for example `sq: UNKNOWN_TOPIC: topic "x" does not exist`)
// and make sq exit with status 1.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/internal/buildinfo"
	"github.com/seedqueue/sq/sdk"
)

// defaultServer is the data-plane address used when neither --server nor
// SQ_SERVER is set.
const defaultServer = sdk.DefaultAddr

// serverEnv is the environment variable read when --server is not given.
const serverEnv = "SQ_SERVER"

// defaultTimeout bounds connecting to a server plus its handshake (data
// plane) or first call (control plane) when neither --timeout nor
// SQ_TIMEOUT is set.
const defaultTimeout = 5 * time.Second

// timeoutEnv is the environment variable read when --timeout is not given.
const timeoutEnv = "SQ_TIMEOUT"

func main() {
	ctx, stop := interruptContext(os.Stderr, os.Exit)
	err := newRootCommand(os.Stdin, os.Stdout, os.Stderr, os.Getenv).ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(ctx, err, os.Stderr))
}

// errInterrupted is the cause of the command context's cancellation when
// sq received SIGINT or SIGTERM.
type errInterrupted struct{ sig os.Signal }

func (e errInterrupted) Error() string { return "interrupted by " + e.sig.String() }

// interruptContext returns a context that the first SIGINT or SIGTERM
// cancels, with cause errInterrupted: commands then stop their work and
// print what was done. A second signal calls exit(130) (143 for SIGTERM)
// at once, whatever is still running. stop releases the signals.
func interruptContext(stderr io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	return interruptContextHint(stderr, exit, stillStoppingAfter)
}

// stillStoppingAfter is how long after the first SIGINT or SIGTERM sq
// says that it is still stopping, and how to exit at once: a write to a
// stdout nobody reads (a stalled pipe) cannot be interrupted, and the
// first Ctrl-C would otherwise look ignored.
const stillStoppingAfter = 2 * time.Second

// interruptContextHint is interruptContext with the delay of the "still
// stopping" line.
func interruptContextHint(stderr io.Writer, exit func(int), hintAfter time.Duration) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancel(errInterrupted{s})
		case <-done:
			return
		}
		hint := time.NewTimer(hintAfter)
		defer hint.Stop()
		for {
			select {
			case s := <-sigs:
				fmt.Fprintln(stderr, "sq: interrupted again, exiting now")
				exit(signalExitCode(s))
				return
			case <-hint.C:
				fmt.Fprintf(stderr, "sq: still stopping after %v (waiting for stdout to be read, or for the server); Ctrl-C again exits now\n", hintAfter)
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// interrupted reports whether ctx was cancelled by SIGINT or SIGTERM (see
// interruptContext), and by which signal.
func interrupted(ctx context.Context) (os.Signal, bool) {
	var e errInterrupted
	if errors.As(context.Cause(ctx), &e) {
		return e.sig, true
	}
	return nil, false
}

// signalExitCode is the shell's exit status for a process stopped by sig:
// 128 + the signal number (130 for SIGINT, 143 for SIGTERM).
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 130
}

// exitCode prints err, if it is worth printing, and returns the process exit
// status: 0 on success, 128+signal after SIGINT or SIGTERM (the command has
// already printed what it did), 1 for any other error.
func exitCode(ctx context.Context, err error, stderr io.Writer) int {
	if sig, ok := interrupted(ctx); ok {
		// The cancellation itself is not an error to report; anything
		// else that went wrong on the way out is.
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "sq:", err)
		}
		return signalExitCode(sig)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sq:", err)
		return 1
	}
	return 0
}

// globals holds the flags shared by every command.
type globals struct {
	server  string
	control string        // gRPC control-plane address (control.go)
	timeout time.Duration // --timeout; read it with connectTimeout
	tls     tlsFlags      // --tls, --tls-ca, ... (tls.go)
	// tlsConfig is the TLS configuration of every connection, set before
	// each command runs from the TLS flags; nil: plaintext.
	tlsConf *tls.Config
	auth    authFlags // --user, --password-stdin (user.go)
	// sasl authenticates every connection, set before each command runs
	// from --user and its password; nil: anonymous.
	sasl   sdk.SASLMechanism
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// addr returns the server address: --server when given, else SQ_SERVER,
// else the default.
func (g *globals) addr(cmd *cobra.Command) string {
	if f := cmd.Flags().Lookup("server"); f != nil && f.Changed {
		return g.server
	}
	if v := g.getenv(serverEnv); v != "" {
		return v
	}
	return g.server
}

// connectTimeout returns the bound on dial plus handshake: --timeout when
// given, else SQ_TIMEOUT (a Go duration such as 2s or 500ms), else 5s.
func (g *globals) connectTimeout(cmd *cobra.Command) (time.Duration, error) {
	if f := cmd.Flags().Lookup("timeout"); f != nil && f.Changed {
		return checkTimeout("--timeout", g.timeout)
	}
	if v := g.getenv(timeoutEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("%s=%q: want %s", timeoutEnv, v, durationForms)
		}
		return checkTimeout(timeoutEnv, d)
	}
	return checkTimeout("--timeout", g.timeout)
}

// durationForms is what --timeout and SQ_TIMEOUT accept, for messages.
const durationForms = "a duration with its unit, such as 5s, 500ms or 1m30s"

// durationFlag is a time.Duration flag whose error for a bad value says
// what is accepted (pflag's repeats the parser's "missing unit in
// duration").
type durationFlag time.Duration

// Set parses a Go duration.
func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want %s", durationForms)
	}
	*d = durationFlag(v)
	return nil
}

// String returns the duration as Go writes it (5s).
func (d *durationFlag) String() string { return time.Duration(*d).String() }

// Type names the flag's values in --help.
func (d *durationFlag) Type() string { return "duration" }

func checkTimeout(what string, d time.Duration) (time.Duration, error) {
	if d <= 0 {
		return 0, fmt.Errorf("%s %v: want a positive duration such as 5s or 500ms", what, d)
	}
	return d, nil
}

// checkEmptyAddrs refuses --server "" and --control "": the SDK would
// take an empty address for its default and name no address in its errors.
// Other malformed addresses are refused by the SDK (sdk.ErrBadAddr).
func checkEmptyAddrs(cmd *cobra.Command) error {
	for _, f := range []struct{ name, example string }{{"server", defaultServer}, {"control", defaultControl}} {
		if fl := cmd.Flags().Lookup(f.name); fl != nil && fl.Changed && fl.Value.String() == "" {
			return fmt.Errorf("--%s is empty: want host:port such as %s", f.name, f.example)
		}
	}
	return nil
}

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	g := &globals{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "sq",
		Short: "Command-line client of the SQ (SeedQueue) broker",
		Long: "sq manages topics and produces and consumes records on an SQ broker.\n\n" +
			"The broker's data-plane address comes from --server, else from the " + serverEnv + "\n" +
			"environment variable, else " + defaultServer + ". --timeout (else " + timeoutEnv + ") bounds\n" +
			"connecting to either plane.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Version,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkEmptyAddrs(cmd); err != nil {
				return err
			}
			var err error
			if g.tlsConf, err = g.tlsConfig(cmd); err != nil {
				return err
			}
			g.sasl, err = g.saslConfig(cmd)
			return err
		},
	}
	root.SetFlagErrorFunc(flagError)
	root.SetVersionTemplate(buildinfo.String("sq") + "\n")
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.server, "server", defaultServer,
		"data-plane address of the SQ server, host:port (env "+serverEnv+"; the flag wins)")
	root.PersistentFlags().StringVar(&g.control, "control", defaultControl,
		"gRPC control-plane address of the SQ server, host:port, for topic alter and cluster info (env "+controlEnv+"; the flag wins)")
	g.timeout = defaultTimeout
	root.PersistentFlags().Var((*durationFlag)(&g.timeout), "timeout",
		"bound on connecting to the server plus its handshake (data plane) or first call (control plane), e.g. 2s (env "+timeoutEnv+"; the flag wins)")
	bindTLSFlags(root, &g.tls)
	bindAuthFlags(root, &g.auth)
	root.AddCommand(newTopicCommand(g), newProduceCommand(g), newConsumeCommand(g))
	root.AddCommand(newVersionCommand())
	root.AddCommand(newClusterCommand(g))
	root.AddCommand(newBenchCommand(g))
	root.AddCommand(newGroupCommand(g))
	root.AddCommand(newQuotaCommand(g))
	root.AddCommand(newACLCommand(g))
	root.AddCommand(newUserCommand(g))
	return root
}

// newVersionCommand is `sq version`, the same line as `sq --version`.
func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print sq's version, commit and Go version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), buildinfo.String("sq"))
			return err
		},
	}
}

// dial connects a Client to the server named by the flags, the dial plus
// handshake bounded by --timeout.
func (g *globals) dial(cmd *cobra.Command) (*sdk.Client, error) {
	addr := g.addr(cmd)
	timeout, err := g.connectTimeout(cmd)
	if err != nil {
		return nil, err
	}
	c, err := sdk.Dial(cmd.Context(), sdk.ClientConfig{Addr: addr, ClientID: "sq-cli", DialTimeout: timeout, TLSConfig: g.tlsConf, SASL: g.sasl})
	if err != nil {
		return nil, connectError(addr, err)
	}
	return c, nil
}

// explained is an error whose text is rewritten for the user (what went
// wrong and which flag fixes it) while errors.Is and errors.As still reach
// the error it explains.
type explained struct {
	msg   string
	cause error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.cause }

// explain returns an error with the formatted text that unwraps to cause.
func explain(cause error, format string, args ...any) error {
	return &explained{msg: fmt.Sprintf(format, args...), cause: cause}
}

// connectError explains a failure to reach the server at addr: the wrong
// kind of server there (*sdk.WrongProtocolError says what it speaks), no
// answer within --timeout, or no server at all; or, when err names a
// partition's leader other than addr that could not be reached
// (*sdk.LeaderConnectionError), that leader.
func connectError(addr string, err error) error {
	if why, ok := leaderUnreachable(addr, err); ok {
		return why
	}
	var wp *sdk.WrongProtocolError
	if errors.As(err, &wp) {
		return explain(err, "%s; set the address with --server or %s", wp.Message(), serverEnv)
	}
	var ae *sdk.AddrError
	if errors.As(err, &ae) {
		return explain(err, "%s (set it with --server or %s)", ae.Message(), serverEnv)
	}
	var te *sdk.ConnectTimeoutError
	if errors.As(err, &te) {
		return explain(err, "no answer from the SQ server at %s within %v (%s; set the bound with --timeout or %s, the address with --server or %s)", addr, te.Timeout, te.Stage, timeoutEnv, serverEnv)
	}
	if errors.Is(err, sdk.ErrConnection) {
		return fmt.Errorf("cannot reach the SQ server at %s (set the address with --server or %s): %w", addr, serverEnv, err)
	}
	return err
}
