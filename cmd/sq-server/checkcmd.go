package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// newCheckCommand is `sq-server check`: the host checks serve runs at
// start, against the same settings, one line each with the fix of what is
// not OK; it exits non-zero when one fails (hostcheck.go), for
// provisioning scripts.
func newCheckCommand(c *config, getenv func(string) string) *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Check the host for serve (open files, memory maps, the data directory, its file system and free space, io_uring); non-zero exit on a failure",
		Long: "Run the checks serve runs at start, with the same settings (flags, SQ_* variables, --config): RLIMIT_NOFILE against " +
			"--max-open-segment-files + --max-connections + 256, vm.max_map_count, that this user can create the data directory's files (access(2)), its file system (tmpfs, ramfs, overlayfs " +
			"and NFS are unsafe; a failure with --require-durable-fs) and free space against --min-free-bytes, and kernel.io_uring_disabled. " +
			"Prints one line per check and the fix of each that is not OK; exits 1 when one fails (WARN alone exits 0).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := c.resolve(cmd.Root().PersistentFlags(), getenv); err != nil {
				return err
			}
			if err := c.validate(); err != nil {
				return err
			}
			if n := printChecks(cmd.OutOrStdout(), c.hostChecks(c.hooks.probe())); n > 0 {
				return fmt.Errorf("%d host check(s) failed", n)
			}
			return nil
		},
	}
}

// printChecks writes one line per result, the fix indented below those
// not OK, and returns the number that failed.
func printChecks(w io.Writer, results []checkResult) int {
	failed := 0
	for _, r := range results {
		fmt.Fprintf(w, "%-4s  %-14s  %s\n", r.level, r.name, r.msg)
		if r.fix != "" {
			fmt.Fprintf(w, "      %-14s  fix: %s\n", "", r.fix)
		}
		if r.level == checkFail {
			failed++
		}
	}
	return failed
}
