package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
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

// recordWriter prints consumed records in one of the formats.
type recordWriter struct {
	w      *bufio.Writer
	format string
	enc    *json.Encoder
}

func newRecordWriter(out io.Writer, format string) (*recordWriter, error) {
	if format != formatRaw && format != formatJSON {
		return nil, fmt.Errorf("--format %q: want raw or json", format)
	}
	bw := bufio.NewWriterSize(out, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &recordWriter{w: bw, format: format, enc: enc}, nil
}

// write prints one record: the value and '\n' (raw) or one JSON object
// per line (json).
func (rw *recordWriter) write(m sdk.Message) error {
	if rw.format == formatJSON {
		return rw.enc.Encode(toJSONRecord(m))
	}
	if _, err := rw.w.Write(m.Value); err != nil {
		return err
	}
	return rw.w.WriteByte('\n')
}

func (rw *recordWriter) flush() error { return rw.w.Flush() }
