package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// lineReader splits its input into records, one per line, the way
// `sq produce` documents it:
//
//   - every '\n' ends a record, so an empty line is an empty record;
//   - bytes after the last '\n' are one more record, so a final newline adds
//     no record ("a\n" is 1 record, "a\n\nb" is 3, "" is 0, "\n" is 1 empty);
//   - all other bytes are kept exactly, including a '\r' before the '\n'
//     (CRLF input gives values ending in '\r') and invalid UTF-8.
//
// A line longer than maxLineBytes (without its '\n') is an error naming its
// line number; the reader's buffer is sized to that limit, not to
// bufio's 64 KiB default.
type lineReader struct {
	r            *bufio.Reader
	maxLineBytes int
	line         int // number of the line last returned, from 1
}

// minLineBuffer keeps the buffer useful when the limit is tiny.
const minLineBuffer = 4 << 10

func newLineReader(r io.Reader, maxLineBytes int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, max(maxLineBytes+1, minLineBuffer)), maxLineBytes: maxLineBytes}
}

// lineTooLongError reports a line over the limit.
type lineTooLongError struct {
	line  int // 1-based line number
	limit int // bytes
}

func (e *lineTooLongError) Error() string {
	return fmt.Sprintf("line %d is longer than %d bytes", e.line, e.limit)
}

// next returns the next line without its '\n', valid until the following
// call, and its 1-based number. At the end of the input it returns io.EOF.
func (lr *lineReader) next() ([]byte, int, error) {
	b, err := lr.r.ReadSlice('\n')
	switch {
	case err == nil:
		b = b[:len(b)-1]
	case errors.Is(err, bufio.ErrBufferFull):
		lr.line++
		return nil, lr.line, &lineTooLongError{line: lr.line, limit: lr.maxLineBytes}
	case errors.Is(err, io.EOF):
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
