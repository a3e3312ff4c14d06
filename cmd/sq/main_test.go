package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/seedqueue/sq/sdk"
)

func TestServerAddress(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"default", nil, "", defaultServer},
		{"env", nil, "10.0.0.1:7000", "10.0.0.1:7000"},
		{"flag", []string{"--server", "10.0.0.2:7000"}, "", "10.0.0.2:7000"},
		{"flag wins over env", []string{"--server", "10.0.0.2:7000"}, "10.0.0.1:7000", "10.0.0.2:7000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == serverEnv {
					return tt.env
				}
				return ""
			}
			var got string
			root := newRootCommand(nil, &bytes.Buffer{}, &bytes.Buffer{}, getenv)
			probe := &cobra.Command{Use: "probe", RunE: func(cmd *cobra.Command, _ []string) error {
				got = cmd.Root().PersistentFlags().Lookup("server").Value.String()
				g := &globals{server: got, getenv: getenv}
				got = g.addr(cmd)
				return nil
			}}
			root.AddCommand(probe)
			root.SetArgs(append([]string{"probe"}, tt.args...))
			if err := root.ExecuteContext(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("address %q, want %q", got, tt.want)
			}
		})
	}
}

// TestHelpDocumentsEveryFlag checks that every flag of every command has a
// usage text.
func TestHelpDocumentsEveryFlag(t *testing.T) {
	root := newRootCommand(nil, &bytes.Buffer{}, &bytes.Buffer{}, func(string) string { return "" })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.TrimSpace(f.Usage) == "" {
				t.Errorf("%s --%s has no usage text", c.CommandPath(), f.Name)
			}
		})
		if c.Short == "" {
			t.Errorf("%s has no short description", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func TestJSONRecord(t *testing.T) {
	tests := []struct {
		name string
		m    sdk.Message
		want string
	}{
		{"no key", sdk.Message{Topic: "t", Partition: 1, Offset: 2, Timestamp: 3, Value: []byte("v")},
			`{"topic":"t","partition":1,"offset":2,"timestamp":3,"key":null,"value":"v"}`},
		{"empty value and key", sdk.Message{Topic: "t", Key: []byte{}, Value: []byte{}},
			`{"topic":"t","partition":0,"offset":0,"timestamp":0,"key":"","value":""}`},
		{"binary", sdk.Message{Topic: "t", Key: []byte{0xff}, Value: []byte{0xc3, 0x28}},
			`{"topic":"t","partition":0,"offset":0,"timestamp":0,"key":"/w==","key_encoding":"base64","value":"wyg=","value_encoding":"base64"}`},
		{"header keys that are not UTF-8", sdk.Message{Topic: "t", Value: []byte("v"), Headers: []sdk.Header{
			{Key: "\xff\xfe", Value: []byte("a")}, {Key: "ok", Value: []byte{0xc3}}, {Key: "caf\xc3", Value: nil}, {Key: "é"}}},
			`{"topic":"t","partition":0,"offset":0,"timestamp":0,"key":null,"value":"v","headers":[` +
				`{"key":"//4=","key_encoding":"base64","value":"a"},{"key":"ok","value":"ww==","value_encoding":"base64"},` +
				`{"key":"Y2Fmww==","key_encoding":"base64","value":""},{"key":"é","value":""}]}`},
		{"html and unicode kept", sdk.Message{Topic: "t", Value: []byte("<a&b> é")},
			`{"topic":"t","partition":0,"offset":0,"timestamp":0,"key":null,"value":"<a&b> é"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			rw, err := newRecordWriter(&buf, formatJSON)
			if err != nil {
				t.Fatal(err)
			}
			if err := rw.write(tt.m); err != nil {
				t.Fatal(err)
			}
			if err := rw.flush(); err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSuffix(buf.String(), "\n"); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if !json.Valid(buf.Bytes()) {
				t.Errorf("invalid JSON %s", buf.String())
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1 << 30: "1.0 GiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
