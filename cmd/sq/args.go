package main

import (
	"fmt"
	"strconv"
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

// topicArgs is noArgs for sq consume and sq produce, which say where the
// topic goes when it was given as an argument (kcat and rpk users may
// write it so: `sq produce orders < file`); with the topic set, sq
// produce points a stray argument, most likely a file name, to --file and
// --value-file.
//
// Without any topic it says what is missing in place of cobra's
// `required flag(s) "topic" not set`.
func topicArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 && !cmd.Flags().Changed("topic") {
		return fmt.Errorf("%s needs a topic: give it with -t/--topic, e.g. %s -t orders (sq topic list names the topics)", cmd.CommandPath(), cmd.CommandPath())
	}
	if len(args) == 1 && !cmd.Flags().Changed("topic") {
		return fmt.Errorf("%s takes no arguments, got %q: name the topic with -t/--topic: %s -t %s", cmd.CommandPath(), args[0], cmd.CommandPath(), args[0])
	}
	if len(args) == 1 && cmd.Name() == "produce" {
		return fmt.Errorf("%s takes no arguments, got %q: to send a file give --file %s (one record per line) or --value-file %s (the whole file as one record)", cmd.CommandPath(), args[0], args[0], args[0])
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

// countFlag is --count/-c: a record count, 0 for no limit. Its error for
// a bad value says what is accepted (pflag's quotes strconv).
type countFlag int64

// Set parses a count of 0 or more.
func (c *countFlag) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("want 0 (no limit) or more, a whole number of records")
	}
	*c = countFlag(n)
	return nil
}

// String returns the count in decimal.
func (c *countFlag) String() string { return strconv.FormatInt(int64(*c), 10) }

// Type names the flag's values in --help.
func (c *countFlag) Type() string { return "int" }
