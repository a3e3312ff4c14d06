package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestIntegerFlagErrors: a value an integer flag cannot parse says what
// the flag takes instead of Go's strconv text, on every command; rpk's
// -p on topic create points to --partitions; flags with their own parser
// and other flag errors keep their messages. Nothing is dialed.
func TestIntegerFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topic", "create", "x", "--partitions", "abc"}, `invalid argument "abc" for "--partitions" flag: want a whole number from 0 to 4294967295`},
		{[]string{"topic", "create", "x", "--partitions=-1"}, `invalid argument "-1" for "--partitions" flag: want a whole number from 0 to 4294967295`},
		{[]string{"topic", "create", "x", "--partitions", "99999999999"}, `invalid argument "99999999999" for "--partitions" flag: out of range, want a whole number from 0 to 4294967295`},
		{[]string{"topic", "create", "x", "--retention-ms", "1d"}, `invalid argument "1d" for "--retention-ms" flag: want a whole number`},
		{[]string{"topic", "create", "x", "--segment-bytes", "99999999999999999999"}, `invalid argument "99999999999999999999" for "--segment-bytes" flag: out of range, want a whole number`},
		{[]string{"topic", "alter", "x", "--max-record-bytes", "1MiB"}, `invalid argument "1MiB" for "--max-record-bytes" flag: want a whole number from -2147483648 to 2147483647 (topic alter changes --sync-policy,`},
		{[]string{"topic", "alter", "x", "--retention-bytes", "10GB"}, `invalid argument "10GB" for "--retention-bytes" flag: want a whole number (topic alter changes`},
		{[]string{"bench", "--count", "1e6"}, `invalid argument "1e6" for "--count" flag: want a whole number`},
		{[]string{"topic", "create", "orders", "-p", "3"}, `unknown shorthand flag: 'p' in -p: the partition count is --partitions N, as in sq topic create orders --partitions 3 (-p names one partition in sq produce and sq consume)`},
		{[]string{"topic", "create", "-p", "3", "orders"}, `unknown shorthand flag: 'p' in -p: the partition count is --partitions N, as in sq topic create NAME --partitions 3`},
		{[]string{"consume", "-t", "orders", "-c", "abc"}, `invalid argument "abc" for "-c, --count" flag: want 0 (no limit) or more, a whole number of records`},
		{[]string{"consume", "-t", "orders", "--timeout", "5"}, `invalid argument "5" for "--timeout" flag: want a duration with its unit`},
		{[]string{"consume", "--topci", "orders"}, `unknown flag: --topci`},
		{[]string{"topic", "create", "x", "--partitons", "3"}, `unknown flag: --partitons`},
	} {
		_, err := runSQ(t, map[string]string{"SQ_SERVER": "127.0.0.1:1", "SQ_CONTROL": "127.0.0.1:1"}, tc.args...)
		if err == nil || err.Error() != tc.want && !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("sq %q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestFlagErrorPassesOthers: errors that are not pflag's integer parse
// errors, or name a flag the command does not have, are returned as they
// are.
func TestFlagErrorPassesOthers(t *testing.T) {
	cmd := &cobra.Command{Use: "x"}
	cmd.Flags().Float64("ratio", 0, "")
	cmd.Flags().Int("n", 0, "")
	for _, msg := range []string{
		`unknown flag: --nope`,
		`invalid argument "abc" for "--ratio" flag: strconv.ParseFloat: parsing "abc": invalid syntax`,
		`invalid argument "abc" for "--missing" flag: strconv.ParseInt: parsing "abc": invalid syntax`,
		`flag needs an argument: --n`,
	} {
		in := errors.New(msg)
		if got := flagError(cmd, in); got != in {
			t.Errorf("flagError(%q) = %v, want it unchanged", msg, got)
		}
	}
	in := errors.New(`invalid argument "x" for "--n" flag: strconv.ParseInt: parsing "x": invalid syntax`)
	if got := flagError(cmd, in); got.Error() != `invalid argument "x" for "--n" flag: want a whole number` {
		t.Errorf("flagError(%v) = %v", in, got)
	}
}
