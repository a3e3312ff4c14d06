package main

import "testing"

func TestParseLoadAvg(t *testing.T) {
	l, err := parseLoadAvg("1.07 0.98 1.41 1/138 20910\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := (loadAvg{one: 1.07, five: 0.98, fifteen: 1.41, ok: true}); l != want {
		t.Fatalf("got %+v, want %+v", l, want)
	}
	if got := l.oneMinute(); got != "1.07" {
		t.Fatalf("oneMinute = %q, want 1.07", got)
	}
	for _, bad := range []string{"", "1.0 2.0", "a 1 2 1/2 3", "1 -2 3 1/2 3", "1 2 NaNx 1/2 3"} {
		if l, err := parseLoadAvg(bad); err == nil {
			t.Errorf("parseLoadAvg(%q) = %+v, want an error", bad, l)
		}
	}
	if got := (loadAvg{}).oneMinute(); got != "?" {
		t.Fatalf("unread load average formats as %q, want ?", got)
	}
}

func TestReadLoadAvg(t *testing.T) {
	l := readLoadAvg()
	if !l.ok {
		t.Skip("no /proc/loadavg")
	}
	if l.one < 0 || l.five < 0 || l.fifteen < 0 {
		t.Fatalf("negative load average %+v", l)
	}
}
