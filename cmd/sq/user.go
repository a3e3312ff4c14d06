package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/sdk"
)

// The authentication flags' variables.
const (
	userEnv     = "SQ_USER"
	passwordEnv = "SQ_PASSWORD"
)

// authFlags are the persistent authentication flags of the root command.
type authFlags struct {
	user          string // --user: authenticate as this SCRAM user
	passwordStdin bool   // --password-stdin: the password is stdin's first line
}

// ownsPasswordStdin marks the commands for which --password-stdin is the
// password they set (sq user create), not the password of --user.
const ownsPasswordStdin = "sq/owns-password-stdin"

func bindAuthFlags(cmd *cobra.Command, f *authFlags) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.user, "user", "", "authenticate as this user with SCRAM-SHA-256 on both planes; the password comes from "+passwordEnv+" or --password-stdin (env "+userEnv+"; the flag wins)")
	pf.BoolVar(&f.passwordStdin, "password-stdin", false, "read the password from the first line of standard input (for --user; for sq user create, the new user's password)")
}

// saslConfig returns the SCRAM credentials of --user (else SQ_USER) with
// the password of SQ_PASSWORD or --password-stdin; nil without a user.
func (g *globals) saslConfig(cmd *cobra.Command) (sdk.SASLMechanism, error) {
	user := g.auth.user
	if f := cmd.Flags().Lookup("user"); (f == nil || !f.Changed) && g.getenv(userEnv) != "" {
		user = g.getenv(userEnv)
	}
	if user == "" {
		if g.auth.passwordStdin && cmd.Annotations[ownsPasswordStdin] == "" {
			return nil, errors.New("--password-stdin needs --user (or " + userEnv + "): the password is that user's")
		}
		return nil, nil
	}
	password := g.getenv(passwordEnv)
	if g.auth.passwordStdin && cmd.Annotations[ownsPasswordStdin] == "" {
		var err error
		if password, err = readPasswordLine(g.stdin); err != nil {
			return nil, err
		}
	}
	if password == "" {
		return nil, fmt.Errorf("--user %s needs a password: set %s or give --password-stdin", user, passwordEnv)
	}
	return sdk.SCRAM{User: user, Password: password}, nil
}

// readPasswordLine reads the first line of r, without its line end. It
// reads byte by byte, so that the rest of the input is left for the
// command (sq produce reads its records there).
func readPasswordLine(r io.Reader) (string, error) {
	var line []byte
	b := make([]byte, 1)
	for {
		n, err := r.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("--password-stdin: %w", err)
		}
	}
	pw := strings.TrimRight(string(line), "\r")
	if pw == "" {
		return "", errors.New("--password-stdin: standard input holds no password")
	}
	return pw, nil
}

// newUserCommand is `sq user`: the SCRAM users of the cluster.
func newUserCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Create, delete and list the users of SCRAM authentication",
		Long: "The users are stored in the cluster's replicated metadata as salted SCRAM-SHA-256\n" +
			"credentials (never the password). See docs/security.md, \"Authentication\".",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newUserCreateCommand(g), newUserDeleteCommand(g), newUserListCommand(g))
	return cmd
}

// oneUserName takes exactly one user name.
func oneUserName(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%s takes one user name, got %d arguments", cmd.CommandPath(), len(args))
	}
	return nil
}

func newUserCreateCommand(g *globals) *cobra.Command {
	var password string
	var iterations int
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a user, or set a new password for it",
		Long: "Create the user NAME with a password (--password, or --password-stdin to read it\n" +
			"from standard input). An existing user gets the new password. The credential is\n" +
			"salted and hashed here (SCRAM-SHA-256, --iterations rounds): the password never\n" +
			"reaches the server. With --user, the password of the user running the command\n" +
			"comes from " + passwordEnv + " (standard input holds the new password).",
		Example:     "  sq user create alice --password 's3cret'\n  printf '%s\\n' \"$PW\" | sq user create alice --password-stdin",
		Args:        oneUserName,
		Annotations: map[string]string{ownsPasswordStdin: "yes"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("password") == g.auth.passwordStdin {
				return errors.New("give the new password with exactly one of --password and --password-stdin")
			}
			if g.auth.passwordStdin {
				var err error
				if password, err = readPasswordLine(g.stdin); err != nil {
					return err
				}
			}
			a, err := g.admin(cmd)
			if err != nil {
				return err
			}
			defer a.Close()
			if err := a.CreateUser(cmd.Context(), args[0], password, iterations); err != nil {
				return controlError(g.controlAddr(cmd), err)
			}
			fmt.Fprintf(g.stdout, "created user %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&password, "password", "", "the user's password")
	cmd.Flags().IntVar(&iterations, "iterations", 4096, "PBKDF2 iterations of the credential, 4096 to 16384")
	return cmd
}

func newUserDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a user",
		Long:    "Delete the user NAME. Its open data-plane connections stay authenticated until\nthey close; its gRPC session tokens are refused at once.",
		Example: "  sq user delete alice",
		Args:    oneUserName,
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := g.admin(cmd)
			if err != nil {
				return err
			}
			defer a.Close()
			if err := a.DeleteUser(cmd.Context(), args[0]); err != nil {
				return controlError(g.controlAddr(cmd), err)
			}
			fmt.Fprintf(g.stdout, "deleted user %s\n", args[0])
			return nil
		},
	}
}

func newUserListCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the users with their mechanism and iterations",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := g.admin(cmd)
			if err != nil {
				return err
			}
			defer a.Close()
			users, err := a.ListUsers(cmd.Context())
			if err != nil {
				return controlError(g.controlAddr(cmd), err)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "USER\tMECHANISM\tITERATIONS")
			for _, u := range users {
				fmt.Fprintf(w, "%s\t%s\t%d\n", u.Name, u.Mechanism, u.Iterations)
			}
			return w.Flush()
		},
	}
}
