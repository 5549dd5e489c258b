package jsonrpc

import (
	"bufio"
	"errors"
	"io"
)

// DefaultMaxLine is the default bound on one line: 1 MiB.
const DefaultMaxLine = 1 << 20

// ErrLineTooLong reports a line over the reader's bound. The reader has
// already skipped to the end of that line, so the stream stays in sync.
var ErrLineTooLong = errors.New("jsonrpc: line too long")

// LineReader reads newline-delimited messages, each at most max bytes
// (excluding the newline). It is not safe for concurrent use.
type LineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
	// Skipped is the size of the last oversized line, for error data.
	Skipped int64
	// SkippedPrefix holds the first bytes of the last oversized line, so
	// that its id can often still be read and the error answered under
	// it. Valid until the next call.
	SkippedPrefix []byte
	prefix        [prefixSize]byte
}

// prefixSize is how much of an oversized line is kept.
const prefixSize = 4096

func (l *LineReader) keepPrefix(b []byte) {
	n := copy(l.prefix[:], b)
	l.SkippedPrefix = l.prefix[:n]
}

// NewLineReader returns a reader bounded to max bytes a line.
func NewLineReader(r io.Reader, max int) *LineReader {
	if max <= 0 {
		max = DefaultMaxLine
	}
	size := 64 << 10
	if max < size {
		size = max + 1
	}
	return &LineReader{r: bufio.NewReaderSize(r, size), max: max}
}

// ReadLine returns the next line without its newline. The slice is valid
// until the next call. A final line without a newline is returned before
// io.EOF. A line over the bound yields ErrLineTooLong after it has been
// consumed.
func (l *LineReader) ReadLine() ([]byte, error) {
	line, err := l.r.ReadSlice('\n')
	if err == nil {
		line = line[:len(line)-1]
		if len(line) > l.max {
			l.keepPrefix(line)
			l.Skipped = int64(len(line))
			return nil, ErrLineTooLong
		}
		return line, nil
	}
	if err != bufio.ErrBufferFull {
		if len(line) > 0 && err == io.EOF {
			if len(line) > l.max {
				l.keepPrefix(line)
				l.Skipped = int64(len(line))
				return nil, ErrLineTooLong
			}
			return line, nil
		}
		return nil, err
	}
	// The line is longer than the buffer: gather it up to the bound.
	l.buf = append(l.buf[:0], line...)
	for {
		line, err = l.r.ReadSlice('\n')
		n := len(line)
		if err == nil {
			n-- // the newline
		}
		if len(l.buf)+n > l.max {
			total := int64(len(l.buf) + n)
			l.keepPrefix(append(l.buf, line[:min(n, prefixSize)]...))
			l.buf = l.buf[:0]
			if err == nil {
				l.Skipped = total
				return nil, ErrLineTooLong
			}
			for err == bufio.ErrBufferFull {
				line, err = l.r.ReadSlice('\n')
				total += int64(len(line))
			}
			l.Skipped = total
			if err == nil {
				l.Skipped--
				return nil, ErrLineTooLong
			}
			if err == io.EOF {
				return nil, ErrLineTooLong
			}
			return nil, err
		}
		l.buf = append(l.buf, line[:n]...)
		switch err {
		case nil:
			return l.buf, nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if len(l.buf) > 0 {
				return l.buf, nil
			}
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}

// Buffered reports whether more input is already buffered.
func (l *LineReader) Buffered() int { return l.r.Buffered() }
