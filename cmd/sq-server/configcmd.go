package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// resolve completes c, whose flags fs holds (parsed from the command
// line), from the SQ_* variables (getenv) and the config file
// (--config, else SQ_CONFIG), and returns each setting's source
// (resolveSettings). It keeps fs for the SIGHUP reload.
func (c *config) resolve(fs *pflag.FlagSet, getenv func(string) string) (map[string]string, error) {
	if f := fs.Lookup(configFlag); f != nil && !f.Changed {
		if v := getenv(envName(configFlag)); v != "" {
			c.ConfigFile = v
		}
	}
	c.flags = fs
	return resolveSettings(fs, c.ConfigFile, getenv)
}

// newConfigCommand is `sq-server config print`: the effective value of
// every setting with its source, as a TOML config file would hold it.
func newConfigCommand(c *config, getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Show the server's configuration"}
	cmd.AddCommand(&cobra.Command{
		Use:   "print",
		Short: "Print the effective value of every setting and where it came from (flag, env, file, default), in the config file's TOML",
		Long: "Print the effective value of every setting, resolved as serve resolves it (a flag wins over its SQ_* variable, " +
			"which wins over the config file, which wins over the default), one TOML line each with its source in a comment. " +
			"Exits non-zero, after printing, when the configuration is invalid.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fs := cmd.Root().PersistentFlags()
			sources, err := c.resolve(fs, getenv)
			if err != nil {
				return err
			}
			printConfig(cmd.OutOrStdout(), fs, c.ConfigFile, sources)
			return c.validate()
		},
	})
	return cmd
}

// printConfig writes one line per setting of fs, sorted by name: name =
// value (TOML) # source. Values of settings whose names say they are
// secrets (password, secret, token) are replaced with "<redacted>".
func printConfig(w io.Writer, fs *pflag.FlagSet, file string, sources map[string]string) {
	if file == "" {
		file = "none"
	}
	fmt.Fprintf(w, "# sq-server %s: effective configuration; config file: %s\n", version, file)
	type line struct{ kv, src string }
	var lines []line
	width := 0
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == configFlag {
			return
		}
		kv := f.Name + " = " + tomlValue(f)
		width = max(width, len(kv))
		lines = append(lines, line{kv, sources[f.Name]})
	})
	for _, l := range lines {
		fmt.Fprintf(w, "%-*s  # %s\n", width, l.kv, l.src)
	}
}

// tomlValue is f's value as a TOML value: numbers and booleans bare,
// lists as arrays of strings, anything else a quoted string.
func tomlValue(f *pflag.Flag) string {
	for _, s := range []string{"password", "secret", "token"} {
		if strings.Contains(f.Name, s) && !strings.HasSuffix(f.Name, "-file") && f.Value.String() != "" {
			return strconv.Quote("<redacted>")
		}
	}
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		items := sv.GetSlice()
		for i, s := range items {
			items[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(items, ", ") + "]"
	}
	switch t := f.Value.Type(); {
	case t == "bool", strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), strings.HasPrefix(t, "float"):
		return f.Value.String()
	}
	return strconv.Quote(f.Value.String())
}
