package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// The sources of a setting's value, in increasing precedence: a flag on
// the command line wins over its SQ_* variable, which wins over the
// config file, which wins over the default.
const (
	sourceDefault = "default"
	sourceFile    = "file"
	sourceEnv     = "env"
	sourceFlag    = "flag"
)

// configFlag is the flag naming the config file; it is not a setting the
// file itself may hold.
const configFlag = "config"

// fileValue is one setting of a config file: its value in the syntax of
// the flag (a list joined with commas) and the line it is on (from 1).
type fileValue struct {
	value string
	line  int
}

// envName is the variable of the flag name: SQ_ and the name's words in
// capitals (--max-connections: SQ_MAX_CONNECTIONS).
func envName(flag string) string {
	return "SQ_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// resolveSettings sets every flag of fs that the command line did not set
// (Changed) from its SQ_* variable (getenv; empty is unset), else from
// the config file (file; "" none), else leaves its default, and returns
// each flag's source. Every flag of fs is a setting except --config: a
// flag added to the set is covered with no list to keep. Errors, all at
// once: the file's (unreadable, bad syntax, an unknown key with its
// line), and each value its flag refuses, naming the variable or the
// file, key and line it came from.
func resolveSettings(fs *pflag.FlagSet, file string, getenv func(string) string) (map[string]string, error) {
	var vals map[string]fileValue
	var errs []error
	if file != "" {
		var err error
		if vals, err = readConfigFile(file); err != nil {
			return nil, err
		}
		for _, k := range slices.Sorted(maps.Keys(vals)) {
			if f := fs.Lookup(k); f == nil || k == configFlag {
				errs = append(errs, fmt.Errorf("%s:%d: unknown setting %q: %s", file, vals[k].line, k, unknownHint(fs, k)))
			}
		}
	}
	sources := map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == configFlag {
			sources[f.Name] = sourceOf(f, getenv)
			return
		}
		switch v, fv := getenv(envName(f.Name)), vals[f.Name]; {
		case f.Changed:
			sources[f.Name] = sourceFlag
		case v != "":
			sources[f.Name] = sourceEnv
			if err := setValue(f, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
		case fv.line > 0:
			sources[f.Name] = sourceFile
			if err := setFlag(f, fv.value); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %s = %q: %w", file, fv.line, f.Name, fv.value, err))
			}
		default:
			sources[f.Name] = sourceDefault
		}
	})
	return sources, errors.Join(errs...)
}

// sourceOf is the source of a flag that only the command line and its
// variable set (--config itself).
func sourceOf(f *pflag.Flag, getenv func(string) string) string {
	switch {
	case f.Changed:
		return sourceFlag
	case getenv(envName(f.Name)) != "":
		return sourceEnv
	}
	return sourceDefault
}

// setFlag sets f from a config file's value; a list replaces a slice
// flag's value whole (pflag's Set would append to it).
func setFlag(f *pflag.Flag, v string) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		if v == "" {
			return sv.Replace(nil)
		}
		return sv.Replace(strings.Split(v, ","))
	}
	return setValue(f, v)
}

// setValue sets f from v, with an error that says what a switch takes
// instead of strconv's ("parsing "yes": invalid syntax").
func setValue(f *pflag.Flag, v string) error {
	err := f.Value.Set(v)
	if ne := (*strconv.NumError)(nil); err != nil && f.Value.Type() == "bool" && errors.As(err, &ne) {
		return errors.New("want true or false (or 1, 0, t, f)")
	}
	return err
}

// unknownHint suggests the setting nearest to the unknown key k (edit
// distance at most 3, case ignored: keys are lower case), or says where
// the settings are listed.
func unknownHint(fs *pflag.FlagSet, k string) string {
	best, dist := "", 4
	fs.VisitAll(func(f *pflag.Flag) {
		if d := editDistance(strings.ToLower(k), f.Name); d < dist && f.Name != configFlag {
			best, dist = f.Name, d
		}
	})
	if best != "" {
		return fmt.Sprintf("did you mean %q? (keys are flag names: sq-server --help)", best)
	}
	return "keys are flag names without the dashes in front (sq-server --help)"
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// readConfigFile reads a config file by its extension: .toml (TOML 1.0,
// https://toml.io/en/v1.0.0) or .yaml / .yml (YAML 1.2): one flat table
// or mapping of flag names to scalars or lists of scalars.
func readConfigFile(path string) (map[string]fileValue, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".toml":
		return parseTOML(path, b)
	case ".yaml", ".yml":
		return parseYAML(path, b)
	default:
		return nil, fmt.Errorf("--config %s: unknown extension %q: want .toml, .yaml or .yml", path, ext)
	}
}

// parseTOML reads a flat TOML document. The TOML decoder keeps no
// positions of keys, so a key's line is found in the text: the first line
// that assigns it (a plain or quoted key) or opens a table of its name.
func parseTOML(path string, b []byte) (map[string]fileValue, error) {
	var doc map[string]any
	if _, err := toml.NewDecoder(bytes.NewReader(b)).Decode(&doc); err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return nil, fmt.Errorf("%s:%d: %s", path, perr.Position.Line, perr.Message)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make(map[string]fileValue, len(doc))
	var errs []error
	for k, v := range doc {
		line := tomlKeyLine(b, k)
		s, err := tomlScalar(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s: %w", path, line, k, err))
			continue
		}
		out[k] = fileValue{value: s, line: line}
	}
	return out, errors.Join(errs...)
}

// tomlKeyLine is the line (from 1) where the top-level key k is assigned
// or opens a table; 1 when not found (a key the decoder read is there).
func tomlKeyLine(b []byte, k string) int {
	q := regexp.QuoteMeta(k)
	re := regexp.MustCompile(`^\s*(\[\[?\s*)?("` + q + `"|'` + q + `'|` + q + `)\s*(=|\.|\])`)
	for i, l := range strings.Split(string(b), "\n") {
		if re.MatchString(l) {
			return i + 1
		}
	}
	return 1
}

// tomlScalar is a TOML value in the syntax of a flag: strings as they
// are, numbers in decimal, booleans as true or false, arrays of those
// joined with commas, as the flag reads a list (an item may hold commas
// of its own: --super-users keeps a certificate subject's).
func tomlScalar(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return strconv.FormatInt(int64(v), 10), nil
		}
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case bool:
		return strconv.FormatBool(v), nil
	case time.Time:
		return "", errors.New("want a string, number or boolean, not a date (durations are strings: \"30s\")")
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			s, err := tomlScalar(e)
			if err != nil || isList(e) {
				return "", errors.New("want a list of strings or numbers")
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return "", errors.New("want a value, not a table: settings are flat, under their flag names")
	case []map[string]any:
		return "", errors.New("want a value, not an array of tables: settings are flat, under their flag names")
	}
	return "", fmt.Errorf("unsupported value of type %T", v)
}

func isList(v any) bool { _, ok := v.([]any); return ok }

// parseYAML reads a YAML mapping of flag names to scalars or sequences of
// scalars; the lines are the parser's. An empty document holds nothing.
// A second document (after a "---" line) is an error: the settings would
// be silently ignored.
func parseYAML(path string, b []byte) (map[string]fileValue, error) {
	var doc, next yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := dec.Decode(&next); err == nil {
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return nil, fmt.Errorf("%s:%d: a second YAML document (after ---): put every setting in one mapping", path, line)
	} else if !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return map[string]fileValue{}, nil
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of setting names to values", path, m.Line)
	}
	out := make(map[string]fileValue, len(m.Content)/2)
	var errs []error
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if _, dup := out[k.Value]; dup {
			errs = append(errs, fmt.Errorf("%s:%d: %s set twice", path, k.Line, k.Value))
			continue
		}
		s, err := yamlScalar(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s: %w", path, v.Line, k.Value, err))
			continue
		}
		out[k.Value] = fileValue{value: s, line: k.Line}
	}
	return out, errors.Join(errs...)
}

// yamlScalar is a YAML value in the syntax of a flag: a scalar as
// written (null: empty), a sequence of scalars joined with commas, as
// tomlScalar.
func yamlScalar(v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", nil
		}
		return v.Value, nil
	case yaml.SequenceNode:
		parts := make([]string, len(v.Content))
		for i, e := range v.Content {
			if e.Kind != yaml.ScalarNode {
				return "", errors.New("want a list of strings or numbers")
			}
			parts[i] = e.Value
		}
		return strings.Join(parts, ","), nil
	case yaml.AliasNode:
		return yamlScalar(v.Alias)
	}
	return "", errors.New("want a value, not a mapping: settings are flat, under their flag names")
}
