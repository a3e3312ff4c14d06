package main

import (
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
)

// pflagNumberError matches pflag's error for a value an integer flag
// could not parse, which ends in Go's strconv text: `invalid argument
// "abc" for "--partitions" flag: strconv.ParseUint: parsing "abc": invalid
// syntax` (or `value out of range`). Group 1 is the part before the
// strconv text, group 2 the flag as pflag names it ("--partitions" or
// "-c, --count"), group 3 what was wrong.
var pflagNumberError = regexp.MustCompile(`^(invalid argument ".*" for "([^"]+)" flag): strconv\.Parse(?:Int|Uint): parsing ".*": (invalid syntax|value out of range)$`)

// integerWants says what pflag's integer flag types accept, by the name
// their Value's Type returns; the 64-bit bounds are left out, since no
// one types them.
var integerWants = map[string]string{
	"int":    "a whole number",
	"int64":  "a whole number",
	"int8":   fmt.Sprintf("a whole number from %d to %d", math.MinInt8, math.MaxInt8),
	"int16":  fmt.Sprintf("a whole number from %d to %d", math.MinInt16, math.MaxInt16),
	"int32":  fmt.Sprintf("a whole number from %d to %d", math.MinInt32, math.MaxInt32),
	"uint":   "a whole number, 0 or more",
	"uint64": "a whole number, 0 or more",
	"uint8":  fmt.Sprintf("a whole number from 0 to %d", math.MaxUint8),
	"uint16": fmt.Sprintf("a whole number from 0 to %d", math.MaxUint16),
	"uint32": fmt.Sprintf("a whole number from 0 to %d", uint32(math.MaxUint32)),
}

// flagError is the FlagErrorFunc of every sq command: a bad value for an
// integer flag says what the flag accepts ("want a whole number from 0 to
// 4294967295", "want a whole number") instead of Go's strconv text; other errors are returned
// as they are.
func flagError(cmd *cobra.Command, err error) error {
	m := pflagNumberError.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	name := m[2]
	if i := strings.LastIndex(name, "--"); i >= 0 {
		name = name[i+2:]
	}
	f := cmd.Flags().Lookup(name)
	if f == nil {
		return err
	}
	want, ok := integerWants[f.Value.Type()]
	if !ok {
		return err
	}
	if m[3] == "value out of range" {
		return fmt.Errorf("%s: out of range, want %s", m[1], want)
	}
	return fmt.Errorf("%s: want %s", m[1], want)
}
