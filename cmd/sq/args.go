package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// noArgs refuses positional arguments, naming them: cobra's own message,
// `unknown command "orders" for "sq consume"`, reads as if a subcommand
// were missing.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return fmt.Errorf("%s takes no arguments, got %s (see --help)", cmd.CommandPath(), quoteArgs(args))
}

// consumeArgs is noArgs for sq consume, which says where the topic goes
// when it was given as an argument (kcat and rpk users may write it so).
func consumeArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 1 && !cmd.Flags().Changed("topic") {
		return fmt.Errorf("%s takes no arguments, got %q: name the topic with -t/--topic: %s -t %s", cmd.CommandPath(), args[0], cmd.CommandPath(), args[0])
	}
	return noArgs(cmd, args)
}

// oneGroupName requires exactly one argument, the group NAME.
func oneGroupName(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%s takes exactly one group NAME, got %d arguments (see --help)", cmd.CommandPath(), len(args))
	}
	return nil
}

// quoteArgs renders args as "a" "b".
func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, " ")
}
