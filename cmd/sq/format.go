package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/seedqueue/sq/sdk"
)

// Output formats of `sq consume`.
const (
	formatRaw  = "raw"
	formatJSON = "json"
)

// encodingBase64 marks a key, value or header value printed as standard
// base64 because it is not valid UTF-8.
const encodingBase64 = "base64"

// jsonRecord is one line of `sq consume --format json`. Key is null when the
// record has no key. Key, Value, header keys and header values are strings
// when they are valid UTF-8, otherwise standard base64 with the matching
// *_encoding field set to "base64" (the field is absent otherwise).
type jsonRecord struct {
	Topic         string       `json:"topic"`
	Partition     uint32       `json:"partition"`
	Offset        uint64       `json:"offset"`
	Timestamp     int64        `json:"timestamp"`
	Key           *string      `json:"key"`
	KeyEncoding   string       `json:"key_encoding,omitempty"`
	Value         string       `json:"value"`
	ValueEncoding string       `json:"value_encoding,omitempty"`
	Headers       []jsonHeader `json:"headers,omitempty"`
}

// jsonHeader is one record header in jsonRecord.
type jsonHeader struct {
	Key           string `json:"key"`
	KeyEncoding   string `json:"key_encoding,omitempty"`
	Value         string `json:"value"`
	ValueEncoding string `json:"value_encoding,omitempty"`
}

// encodeBytes returns b as a string, or as base64 with the marker when b
// is not valid UTF-8.
func encodeBytes(b []byte) (s, encoding string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), encodingBase64
}

func toJSONRecord(m sdk.Message) jsonRecord {
	r := jsonRecord{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp}
	if m.Key != nil {
		k, enc := encodeBytes(m.Key)
		r.Key, r.KeyEncoding = &k, enc
	}
	r.Value, r.ValueEncoding = encodeBytes(m.Value)
	for _, h := range m.Headers {
		k, kenc := encodeBytes([]byte(h.Key))
		v, enc := encodeBytes(h.Value)
		r.Headers = append(r.Headers, jsonHeader{Key: k, KeyEncoding: kenc, Value: v, ValueEncoding: enc})
	}
	return r
}

// formatTokens lists the tokens of a --format template, for help and
// error messages.
const formatTokens = "%t topic, %p partition, %o offset, %k key, %v or %s value, %T timestamp (Unix ms), " +
	"%h headers (k=v,k=v), %K key length, %S value length, %% a percent sign; " +
	"escapes \\n \\t \\r \\\\ \\0"

// tmplPart is one piece of a compiled --format template: literal bytes,
// or a token (the letter after '%').
type tmplPart struct {
	lit   []byte
	token byte
}

// templateEscapes maps the character after a backslash in a --format
// template to the byte it stands for.
var templateEscapes = map[byte]byte{'n': '\n', 't': '\t', 'r': '\r', '\\': '\\', '0': 0}

// parseTemplate compiles a --format string containing '%' (kcat's -f,
// https://github.com/edenhill/kcat#format-string): the tokens of
// formatTokens and the escapes \n \t \r \\ \0 (written as two characters,
// as a shell passes '%k\t%v\n'). An unknown token or escape, or a '%' or
// '\' at the end, is refused. Nothing is added after each record: end
// the template with \n for one record per line.
func parseTemplate(s string) ([]tmplPart, error) {
	var parts []tmplPart
	var lit []byte
	flush := func() {
		if len(lit) > 0 {
			parts = append(parts, tmplPart{lit: lit})
			lit = nil
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' && c != '\\' {
			lit = append(lit, c)
			continue
		}
		if i+1 == len(s) {
			return nil, fmt.Errorf("--format %q: a lone %c at the end; write %c%c for the character itself (tokens: %s)", s, c, c, c, formatTokens)
		}
		i++
		n := s[i]
		if c == '\\' {
			b, ok := templateEscapes[n]
			if !ok {
				return nil, fmt.Errorf("--format %q: unknown escape \\%c; escapes: \\n \\t \\r \\\\ \\0", s, n)
			}
			lit = append(lit, b)
			continue
		}
		switch n {
		case '%':
			lit = append(lit, '%')
		case 't', 'p', 'o', 'k', 'v', 'T', 'h', 'K', 'S':
			flush()
			parts = append(parts, tmplPart{token: n})
		case 's':
			// kcat writes the value as %s, rpk as %v.
			flush()
			parts = append(parts, tmplPart{token: 'v'})
		default:
			return nil, fmt.Errorf("--format %q: unknown token %%%c; tokens: %s", s, n, formatTokens)
		}
	}
	flush()
	return parts, nil
}

// appendTemplate appends m formatted by parts to buf. %k of a record
// without a key is empty and %K is -1 (as kcat); %h is each header as
// key=value, comma separated, in the record's order.
func appendTemplate(buf []byte, parts []tmplPart, m sdk.Message) []byte {
	for _, p := range parts {
		switch p.token {
		case 0:
			buf = append(buf, p.lit...)
		case 't':
			buf = append(buf, m.Topic...)
		case 'p':
			buf = strconv.AppendUint(buf, uint64(m.Partition), 10)
		case 'o':
			buf = strconv.AppendUint(buf, m.Offset, 10)
		case 'k':
			buf = append(buf, m.Key...)
		case 'v':
			buf = append(buf, m.Value...)
		case 'T':
			buf = strconv.AppendInt(buf, m.Timestamp, 10)
		case 'h':
			for i, h := range m.Headers {
				if i > 0 {
					buf = append(buf, ',')
				}
				buf = append(buf, h.Key...)
				buf = append(buf, '=')
				buf = append(buf, h.Value...)
			}
		case 'K':
			if m.Key == nil {
				buf = append(buf, "-1"...)
			} else {
				buf = strconv.AppendInt(buf, int64(len(m.Key)), 10)
			}
		case 'S':
			buf = strconv.AppendInt(buf, int64(len(m.Value)), 10)
		}
	}
	return buf
}

// recordWriter prints consumed records in one of the formats.
type recordWriter struct {
	w      *bufio.Writer
	format string // formatRaw, formatJSON, or "" for tmpl
	enc    *json.Encoder
	tmpl   []tmplPart
	buf    []byte
}

// newRecordWriter returns a writer of records to out in format: raw or
// json (any case), or a template containing '%' (parseTemplate).
func newRecordWriter(out io.Writer, format string) (*recordWriter, error) {
	bw := bufio.NewWriterSize(out, 64<<10)
	rw := &recordWriter{w: bw}
	switch {
	case strings.EqualFold(format, formatRaw):
		rw.format = formatRaw
	case strings.EqualFold(format, formatJSON):
		rw.format = formatJSON
		rw.enc = json.NewEncoder(bw)
		rw.enc.SetEscapeHTML(false)
	case strings.Contains(format, "%"):
		tmpl, err := parseTemplate(format)
		if err != nil {
			return nil, err
		}
		rw.tmpl = tmpl
	default:
		return nil, fmt.Errorf("--format %q: want raw, json, or a template containing %%, such as '%%k\\t%%v\\n' (tokens: %s)", format, formatTokens)
	}
	return rw, nil
}

// write prints one record: the value and '\n' (raw), one JSON object per
// line (json), or the template.
func (rw *recordWriter) write(m sdk.Message) error {
	switch rw.format {
	case formatJSON:
		return rw.enc.Encode(toJSONRecord(m))
	case formatRaw:
		if _, err := rw.w.Write(m.Value); err != nil {
			return err
		}
		return rw.w.WriteByte('\n')
	}
	rw.buf = appendTemplate(rw.buf[:0], rw.tmpl, m)
	_, err := rw.w.Write(rw.buf)
	return err
}

func (rw *recordWriter) flush() error { return rw.w.Flush() }

// finish flushes rw after a run that ended with err and returns both
// errors, the flush's only when it is not err again: a failed write to
// stdout stays in the buffered writer and would otherwise be printed twice.
func (rw *recordWriter) finish(err error) error {
	ferr := rw.flush()
	if ferr == nil || (err != nil && errors.Is(err, ferr)) {
		return err
	}
	return errors.Join(err, ferr)
}
