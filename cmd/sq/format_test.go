package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/seedqueue/sq/sdk"
)

func TestFormatTemplate(t *testing.T) {
	full := sdk.Message{Topic: "orders", Partition: 3, Offset: 42, Timestamp: 1767366245000,
		Key: []byte("k1"), Value: []byte("hello"),
		Headers: []sdk.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("")}}}
	binary := sdk.Message{Topic: "t", Value: []byte{0, 0xff, '\n', 0x80}, Key: []byte{}}
	noKey := sdk.Message{Topic: "t", Partition: 0, Offset: 0, Value: nil}
	tests := []struct {
		format string
		m      sdk.Message
		want   string
	}{
		{"%k\\t%v\\n", full, "k1\thello\n"},
		{"%k\\t%s\\n", full, "k1\thello\n"}, // kcat spells the value %s
		{"%t/%p@%o %T\\n", full, "orders/3@42 1767366245000\n"},
		{"%h", full, "a=1,b="},
		{"%K %S", full, "2 5"},
		{"100%% %v", full, "100% hello"},
		{"%v\\0", full, "hello\x00"},
		{"\\\\%v\\r\\n", full, "\\hello\r\n"},
		{"plain %v", full, "plain hello"},
		{"[%v]", binary, "[\x00\xff\n\x80]"},
		{"%K:%k|%S", binary, "0:|4"},
		{"%K:%k|%S:%v|%h|", noKey, "-1:|0:||"},
		{"%%", full, "%"},
		{"%v%v", full, "hellohello"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		rw, err := newRecordWriter(&out, tt.format)
		if err != nil {
			t.Errorf("newRecordWriter(%q): %v", tt.format, err)
			continue
		}
		for range 2 { // the buffer is reused between records
			if err := rw.write(tt.m); err != nil {
				t.Fatal(err)
			}
		}
		if err := rw.flush(); err != nil {
			t.Fatal(err)
		}
		if got := out.String(); got != tt.want+tt.want {
			t.Errorf("format %q: got %q, want %q twice", tt.format, got, tt.want)
		}
	}
}

func TestFormatRefused(t *testing.T) {
	tests := []struct{ format, want string }{
		{"%x", "unknown token %x"},
		{"%k %Q", "unknown token %Q"},
		{"%v %", "lone % at the end"},
		{"%v\\", "lone \\ at the end"},
		{"%v\\q", "unknown escape \\q"},
		{"text", "want raw, json, or a template"},
		{"", "want raw, json"},
		{"jsonl", "want raw, json"},
	}
	for _, tt := range tests {
		_, err := newRecordWriter(&bytes.Buffer{}, tt.format)
		if err == nil {
			t.Errorf("format %q accepted", tt.format)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("format %q: error %q does not contain %q", tt.format, err, tt.want)
		}
		if strings.Contains(tt.format, "%") && !strings.Contains(err.Error(), "%t topic") && !strings.Contains(err.Error(), "escapes") {
			t.Errorf("format %q: error %q does not list the tokens", tt.format, err)
		}
	}
}

func TestFormatCaseInsensitive(t *testing.T) {
	m := sdk.Message{Topic: "t", Value: []byte("v")}
	for _, tt := range []struct{ format, want string }{
		{"raw", "v\n"}, {"RAW", "v\n"}, {"Raw", "v\n"},
		{"json", `{"topic":"t","partition":0,"offset":0,"timestamp":0,"key":null,"value":"v"}` + "\n"},
		{"Json", `{"topic":"t","partition":0,"offset":0,"timestamp":0,"key":null,"value":"v"}` + "\n"},
		{"JSON", `{"topic":"t","partition":0,"offset":0,"timestamp":0,"key":null,"value":"v"}` + "\n"},
	} {
		var out bytes.Buffer
		rw, err := newRecordWriter(&out, tt.format)
		if err != nil {
			t.Fatalf("format %q: %v", tt.format, err)
		}
		if err := rw.write(m); err != nil {
			t.Fatal(err)
		}
		_ = rw.flush()
		if out.String() != tt.want {
			t.Errorf("format %q: got %q, want %q", tt.format, out.String(), tt.want)
		}
	}
}
