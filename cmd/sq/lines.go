package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// lineReader splits its input into records at a delimiter (newline by
// default), the way `sq produce` documents it:
//
//   - every delimiter ends a record, so two delimiters in a row make an
//     empty record;
//   - bytes after the last delimiter are one more record, so a final
//     delimiter adds no record ("a\n" is 1 record, "a\n\nb" is 3, "" is 0,
//     "\n" is 1 empty), as kcat -D;
//   - all other bytes are kept exactly, including a '\r' before the '\n'
//     (CRLF input gives values ending in '\r'), NUL bytes and invalid UTF-8.
//
// A delimiter may be several bytes ("\r\n", "--"); it is matched left to
// right without overlap. A record longer than maxLineBytes (without its
// delimiter) is an error naming its number; the reader's buffer is sized
// to that limit, not to bufio's 64 KiB default.
type lineReader struct {
	r            *bufio.Reader
	delim        []byte // never empty
	maxLineBytes int
	line         int    // number of the record last returned, from 1
	acc          []byte // a record being assembled (multi-byte delimiters)
	// eof is set once the input has said io.EOF: a terminal says it once
	// per Ctrl-D and then reads again, so the reader must not ask twice
	// (a last record without its delimiter would otherwise need a second
	// Ctrl-D).
	eof bool
}

// minLineBuffer keeps the buffer useful when the limit is tiny.
const minLineBuffer = 4 << 10

// newLineReader splits r at newlines.
func newLineReader(r io.Reader, maxLineBytes int) *lineReader {
	return newDelimReader(r, []byte{'\n'}, maxLineBytes)
}

// newDelimReader splits r at delim, which must not be empty.
func newDelimReader(r io.Reader, delim []byte, maxLineBytes int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, max(maxLineBytes+len(delim), minLineBuffer)), delim: delim, maxLineBytes: maxLineBytes}
}

// lineTooLongError reports a line over the limit.
type lineTooLongError struct {
	line  int // 1-based line number
	limit int // bytes
}

func (e *lineTooLongError) Error() string {
	return fmt.Sprintf("line %d is longer than %d bytes", e.line, e.limit)
}

// next returns the next record without its delimiter, valid until the
// following call, and its 1-based number. At the end of the input it
// returns io.EOF.
func (lr *lineReader) next() ([]byte, int, error) {
	if lr.eof {
		return nil, lr.line, io.EOF
	}
	if len(lr.delim) > 1 {
		return lr.nextMulti()
	}
	b, err := lr.r.ReadSlice(lr.delim[0])
	switch {
	case err == nil:
		b = b[:len(b)-1]
	case errors.Is(err, bufio.ErrBufferFull):
		lr.line++
		return nil, lr.line, &lineTooLongError{line: lr.line, limit: lr.maxLineBytes}
	case errors.Is(err, io.EOF):
		lr.eof = true
		if len(b) == 0 {
			return nil, lr.line, io.EOF
		}
	default:
		return nil, lr.line, err
	}
	lr.line++
	if len(b) > lr.maxLineBytes {
		return nil, lr.line, &lineTooLongError{line: lr.line, limit: lr.maxLineBytes}
	}
	return b, lr.line, nil
}

// nextMulti is next for a delimiter of several bytes: it reads up to each
// occurrence of the delimiter's last byte until the record assembled so
// far ends with the whole delimiter.
func (lr *lineReader) nextMulti() ([]byte, int, error) {
	last := lr.delim[len(lr.delim)-1]
	lr.acc = lr.acc[:0]
	for {
		b, err := lr.r.ReadSlice(last)
		lr.acc = append(lr.acc, b...)
		switch {
		case err == nil:
			if bytes.HasSuffix(lr.acc, lr.delim) {
				rec := lr.acc[:len(lr.acc)-len(lr.delim)]
				lr.line++
				if len(rec) > lr.maxLineBytes {
					return nil, lr.line, &lineTooLongError{line: lr.line, limit: lr.maxLineBytes}
				}
				return rec, lr.line, nil
			}
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			lr.eof = true
			if len(lr.acc) == 0 {
				return nil, lr.line, io.EOF
			}
			lr.line++
			if len(lr.acc) > lr.maxLineBytes {
				return nil, lr.line, &lineTooLongError{line: lr.line, limit: lr.maxLineBytes}
			}
			return lr.acc, lr.line, nil
		default:
			return nil, lr.line, err
		}
		// A record may end with a partial delimiter, so it is too long
		// only once it cannot fit with the whole delimiter.
		if len(lr.acc) > lr.maxLineBytes+len(lr.delim) {
			lr.line++
			return nil, lr.line, &lineTooLongError{line: lr.line, limit: lr.maxLineBytes}
		}
	}
}

// delimiterEscapes are the escapes parseDelimiter accepts, for its errors.
const delimiterEscapes = `\n (newline), \t (tab), \r (carriage return), \0 (NUL), \\ (backslash), \xNN (byte NN in hex)`

// parseDelimiter reads the --delimiter argument: literal bytes with the
// escapes of delimiterEscapes, so "\0" is a NUL byte and "\r\n" is CRLF.
// An empty delimiter, a lone trailing backslash or an unknown escape is an
// error.
func parseDelimiter(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("--delimiter must not be empty (the default is a newline)")
	}
	return parseEscapes("--delimiter", s)
}

// parseKeySeparator reads the --key-separator argument as parseDelimiter
// reads --delimiter (as kcat's -K takes the format of its -D): '\t' is a
// tab, so tab-separated input splits as a user expects.
func parseKeySeparator(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("--key-separator must not be empty (leave it out for records without keys)")
	}
	return parseEscapes("--key-separator", s)
}

// parseEscapes reads s, the argument of flag: literal bytes with the
// escapes of delimiterEscapes.
func parseEscapes(flag, s string) ([]byte, error) {
	var out []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		if i+1 == len(s) {
			return nil, fmt.Errorf("%s %q ends in a lone backslash; escapes: %s", flag, s, delimiterEscapes)
		}
		i++
		switch s[i] {
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		case 'r':
			out = append(out, '\r')
		case '0':
			out = append(out, 0)
		case '\\':
			out = append(out, '\\')
		case 'x':
			if i+3 > len(s) {
				return nil, fmt.Errorf("%s %q: \\x needs two hex digits", flag, s)
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return nil, fmt.Errorf("%s %q: \\x needs two hex digits, got %q", flag, s, s[i+1:i+3])
			}
			out = append(out, byte(v))
			i += 2
		default:
			return nil, fmt.Errorf("%s %q: unknown escape \\%c; escapes: %s", flag, s, s[i], delimiterEscapes)
		}
	}
	return out, nil
}
