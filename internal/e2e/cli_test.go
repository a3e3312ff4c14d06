package e2e

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// dpkgStatus is real-world input: thousands of lines, empty lines between
// paragraphs, and on most Debian systems a few lines over 10,000 bytes.
const dpkgStatus = "/var/lib/dpkg/status"

// consumedRecord is one line of `sq consume --format json`.
type consumedRecord struct {
	Topic         string  `json:"topic"`
	Partition     uint32  `json:"partition"`
	Offset        uint64  `json:"offset"`
	Timestamp     int64   `json:"timestamp"`
	Key           *string `json:"key"`
	KeyEncoding   string  `json:"key_encoding"`
	Value         *string `json:"value"`
	ValueEncoding string  `json:"value_encoding"`
}

// value decodes the record's value.
func (r consumedRecord) value(t *testing.T) string {
	t.Helper()
	if r.Value == nil {
		t.Fatalf("record %s/%d@%d has no value field", r.Topic, r.Partition, r.Offset)
	}
	switch r.ValueEncoding {
	case "":
		return *r.Value
	case "base64":
		b, err := base64.StdEncoding.DecodeString(*r.Value)
		if err != nil {
			t.Fatalf("record %s/%d@%d: bad base64 value: %v", r.Topic, r.Partition, r.Offset, err)
		}
		return string(b)
	}
	t.Fatalf("record %s/%d@%d: unknown value_encoding %q", r.Topic, r.Partition, r.Offset, r.ValueEncoding)
	return ""
}

// parseConsumed parses JSON lines into records grouped by partition, in
// output order.
func parseConsumed(t *testing.T, out string) map[uint32][]consumedRecord {
	t.Helper()
	parts := map[uint32][]consumedRecord{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var r consumedRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("consume output line %q: %v", truncate(sc.Text(), 200), err)
		}
		parts[r.Partition] = append(parts[r.Partition], r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return parts
}

// splitRecords is the reference of `sq produce`'s line rule: every '\n'
// ends a record and bytes after the last one are one more record.
func splitRecords(data string) []string {
	lines := strings.Split(data, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

var producedLine = regexp.MustCompile(`^produced (\d+) records? to (\S+)`)

var rangeRE = regexp.MustCompile(`partition (\d+) offsets? (\d+)(?:-(\d+))?`)

// produceFile produces file to topic with the CLI, checks the count it
// reports, and returns the offset ranges it reports per partition.
func produceFile(t *testing.T, addr, topic, file string, want int) map[uint32][2]uint64 {
	t.Helper()
	out := sqOK(t, addr, nil, "produce", "--topic", topic, "--file", file)
	m := producedLine.FindStringSubmatch(out)
	if m == nil || m[1] != strconv.Itoa(want) || m[2] != topic+":" && m[2] != topic {
		t.Fatalf("produce output %q: want %d records to %s", out, want, topic)
	}
	ranges := map[uint32][2]uint64{}
	for _, r := range rangeRE.FindAllStringSubmatch(out, -1) {
		p, _ := strconv.ParseUint(r[1], 10, 32)
		first, _ := strconv.ParseUint(r[2], 10, 64)
		last := first
		if r[3] != "" {
			last, _ = strconv.ParseUint(r[3], 10, 64)
		}
		ranges[uint32(p)] = [2]uint64{first, last}
	}
	return ranges
}

// checkRoundTrip checks that the consumed records are exactly the input
// lines: offsets dense from 0 in each partition, each partition's values
// in input order (a subsequence of the input), and the union of all
// partitions the input as a multiset.
func checkRoundTrip(t *testing.T, topic string, want []string, got map[uint32][]consumedRecord) {
	t.Helper()
	total := 0
	counts := map[string]int{}
	for _, w := range want {
		counts[w]++
	}
	for p, recs := range got {
		total += len(recs)
		i := 0 // position in want of the next candidate
		for n, r := range recs {
			if r.Topic != topic || r.Offset != uint64(n) {
				t.Fatalf("partition %d record %d: topic %q offset %d, want %q offset %d", p, n, r.Topic, r.Offset, topic, n)
			}
			if r.Key != nil {
				t.Fatalf("partition %d offset %d: key %q, want null", p, n, *r.Key)
			}
			v := r.value(t)
			counts[v]--
			for i < len(want) && want[i] != v {
				i++
			}
			if i == len(want) {
				t.Fatalf("partition %d offset %d: value %q is out of input order (or not in the input)", p, n, truncate(v, 80))
			}
			i++
		}
	}
	if total != len(want) {
		t.Fatalf("consumed %d records, produced %d", total, len(want))
	}
	for v, c := range counts {
		if c != 0 {
			t.Fatalf("value %q: %d more in the input than consumed", truncate(v, 80), c)
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("...(%d bytes)", len(s))
}

// generatedInput is produced besides dpkgStatus, whatever that holds. It has
// what real files may lack: lines over 10,000 bytes and far over
// bufio.Scanner's 64 KiB default, invalid UTF-8, CRLF line ends, runs of empty lines, and no
// final newline.
func generatedInput() string {
	var b strings.Builder
	b.WriteString("first\n\n\n")
	b.WriteString(strings.Repeat("a", 12_000) + "\n")
	b.WriteString(strings.Repeat("0123456789", 70_000) + "\n") // 700,000 bytes, under the 1 MiB record limit
	b.WriteString("crlf line\r\n")
	b.WriteString("invalid utf-8: \xff\xfe\xc3\n")
	b.WriteString("tab\tand \"quotes\" and <html> & unicode é ü 日本\n")
	b.WriteString("\n")
	b.WriteString("last line without newline")
	return b.String()
}

// TestCLIRoundTrip produces real input with `sq produce --file`, reads it
// back with `sq consume --format json`, and again after a restart.
func TestCLIRoundTrip(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(dpkgStatus)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s is absent (not a Debian-based system): this test needs real-world input", dpkgStatus)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Produce a snapshot: the package manager may rewrite the file while
	// the test runs.
	dir := t.TempDir()
	snapshot := filepath.Join(dir, "status")
	if err := os.WriteFile(snapshot, data, 0o644); err != nil {
		t.Fatal(err)
	}
	inputs := []struct{ topic, file, data string }{{"dpkg-status", snapshot, string(data)}}
	gen := filepath.Join(dir, "generated.txt")
	if err := os.WriteFile(gen, []byte(generatedInput()), 0o644); err != nil {
		t.Fatal(err)
	}
	inputs = append(inputs, struct{ topic, file, data string }{"generated", gen, generatedInput()})

	srv := startServer(t, t.TempDir())
	outputs := map[string]string{}
	for _, in := range inputs {
		want := splitRecords(in.data)
		if in.topic == "dpkg-status" {
			longest := 0
			for _, l := range want {
				longest = max(longest, len(l))
			}
			t.Logf("%s: %d bytes, %d lines, longest %d bytes", dpkgStatus, len(in.data), len(want), longest)
		}
		sqOK(t, srv.addr, nil, "topic", "create", in.topic, "--partitions", "3")
		ranges := produceFile(t, srv.addr, in.topic, in.file, len(want))
		out := sqOK(t, srv.addr, nil, "consume", "--topic", in.topic, "--from", "earliest", "--format", "json")
		got := parseConsumed(t, out)
		checkRoundTrip(t, in.topic, want, got)
		for p, recs := range got {
			if r, ok := ranges[p]; !ok || r != [2]uint64{0, uint64(len(recs) - 1)} {
				t.Errorf("%s: produce reported partition %d offsets %v, consumed offsets 0-%d", in.topic, p, r, len(recs)-1)
			}
		}
		if len(ranges) != len(got) {
			t.Errorf("%s: produce reported %d partitions, consumed %d", in.topic, len(ranges), len(got))
		}
		if in.topic == "dpkg-status" && len(got) < 2 {
			t.Errorf("%s: all records in %d partition(s); keyless records should spread", in.topic, len(got))
		}
		outputs[in.topic] = out
	}

	idBefore := topicIDLine.FindString(sqOK(t, srv.addr, nil, "topic", "describe", "dpkg-status"))
	if idBefore == "" {
		t.Error("topic describe shows no topic id")
	}
	srv = srv.restart(t)
	for _, in := range inputs {
		out := sqOK(t, srv.addr, nil, "consume", "--topic", in.topic, "--from", "earliest", "--format", "json")
		if out != outputs[in.topic] {
			t.Errorf("%s: consume output after restart differs from before (%d vs %d bytes)", in.topic, len(out), len(outputs[in.topic]))
		}
	}
	desc := sqOK(t, srv.addr, nil, "topic", "describe", "dpkg-status")
	if !strings.Contains(desc, "HIGH WATERMARK") || !strings.Contains(desc, "dpkg-status") {
		t.Errorf("topic describe output lacks the partition table:\n%s", desc)
	}
	if got := topicIDLine.FindString(desc); got != idBefore {
		t.Errorf("topic id after restart %q, before %q", got, idBefore)
	}
	list := sqOK(t, srv.addr, nil, "topic", "list")
	for _, in := range inputs {
		if !strings.Contains(list, in.topic) {
			t.Errorf("topic list lacks %s:\n%s", in.topic, list)
		}
	}
}

// topicIDLine matches the topic id line of `sq topic describe`.
var topicIDLine = regexp.MustCompile(`Topic ID:\s+[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}`)
