package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// loadAvg is the system load average of /proc/loadavg: the number of
// runnable (and uninterruptible) tasks averaged over 1, 5 and 15 minutes.
type loadAvg struct {
	one, five, fifteen float64
	ok                 bool // false when /proc/loadavg could not be read
}

// loadWindow is the load average just before and just after a measurement.
type loadWindow struct {
	before, after loadAvg
}

// readLoadAvg reads /proc/loadavg; the result has ok false where there is
// none (not Linux) or it cannot be parsed.
func readLoadAvg() loadAvg {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return loadAvg{}
	}
	l, err := parseLoadAvg(string(b))
	if err != nil {
		return loadAvg{}
	}
	return l
}

// parseLoadAvg parses the contents of /proc/loadavg, e.g.
// "1.07 0.98 1.41 1/138 20910\n".
func parseLoadAvg(s string) (loadAvg, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return loadAvg{}, fmt.Errorf("loadavg %q: want at least 3 fields", s)
	}
	var v [3]float64
	for i := range v {
		x, err := strconv.ParseFloat(f[i], 64)
		if err != nil || x < 0 {
			return loadAvg{}, fmt.Errorf("loadavg %q: field %d is not a load average", s, i+1)
		}
		v[i] = x
	}
	return loadAvg{one: v[0], five: v[1], fifteen: v[2], ok: true}, nil
}

// oneMinute formats the 1-minute average, or "?".
func (l loadAvg) oneMinute() string {
	if !l.ok {
		return "?"
	}
	return fmt.Sprintf("%.2f", l.one)
}
