package jsonrpc

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"

	"github.com/pcp-dev/pcp/internal/deadline"
)

// DefaultMaxLine is the default bound on one line: 1 MiB.
const DefaultMaxLine = 1 << 20

// ErrLineTooLong reports a line over the reader's bound. The reader has
// already skipped to the end of that line, so the stream stays in sync.
var ErrLineTooLong = errors.New("jsonrpc: line too long")

// ErrNoLineBudget reports a line longer than the reader's own buffer that
// the shared Budget had no room for. Like ErrLineTooLong, the line has
// been skipped and the stream is in sync.
var ErrNoLineBudget = errors.New("jsonrpc: no memory budget left for a long line")

// ErrLineCut reports a line over the bound of a reader with Cut set: it
// is reported as soon as the bound is crossed, without reading on to the
// newline, so the stream is out of sync and the caller must hang up.
var ErrLineCut = errors.New("jsonrpc: line too long; not read to its end")

// LineReader reads newline-delimited messages, each at most max bytes
// (excluding the newline). It is not safe for concurrent use.
//
// Memory: a reader holds its fixed buffer (at most 64 KiB) for good. A
// line longer than that is gathered in a second buffer, reserved from
// Budget (when set) and given back, buffer and reservation, at the next
// ReadLine: a connection does not keep a megabyte because it once sent
// a megabyte.
type LineReader struct {
	r   *bufio.Reader
	src io.Reader // what r reads from
	max int
	buf []byte
	// reserved is what buf holds of Budget.
	reserved int64
	// Budget, if set, bounds the long-line buffers of every reader that
	// shares it.
	Budget *deadline.Budget
	// Deadlines, if set, is the deadline reader below r (src): ReadLine
	// tells it where each line begins.
	Deadlines *deadline.Reader
	// Cut, when set, makes a line over the bound end the reading: no
	// byte past the bound (and its buffer) is read, and ReadLine returns
	// ErrLineCut, for a connection that is hung up on an oversized line
	// anyway and need not wait for its newline.
	Cut bool
	// KeepPartial makes a read that fails with os.ErrDeadlineExceeded
	// (a reader interrupted on purpose) keep what it had of the line:
	// the next ReadLine goes on with it, so the stream stays in sync.
	KeepPartial bool
	// skipping is set when an interrupted read was skipping an
	// oversized line: skipTotal bytes of it so far, skipReason to report.
	skipping   bool
	skipTotal  int64
	skipReason error
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

// maxBuffer is the largest fixed buffer of a reader.
const maxBuffer = 64 << 10

func (l *LineReader) keepPrefix(b []byte) {
	n := copy(l.prefix[:], b)
	l.SkippedPrefix = l.prefix[:n]
}

// addPrefix appends b to SkippedPrefix, up to prefixSize.
func (l *LineReader) addPrefix(b []byte) {
	n := len(l.SkippedPrefix)
	n += copy(l.prefix[n:], b)
	l.SkippedPrefix = l.prefix[:n]
}

// NewLineReader returns a reader bounded to max bytes a line.
func NewLineReader(r io.Reader, max int) *LineReader {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &LineReader{r: bufio.NewReaderSize(r, bufferFor(max)), src: r, max: max}
}

func bufferFor(max int) int { return min(maxBuffer, max+1) }

// SetMax changes the line bound, growing the fixed buffer if the new
// bound calls for a larger one (bytes already buffered are kept).
func (l *LineReader) SetMax(max int) {
	if max <= 0 {
		max = DefaultMaxLine
	}
	l.max = max
	if size := bufferFor(max); size > l.r.Size() {
		pending := make([]byte, l.r.Buffered())
		io.ReadFull(l.r, pending) // cannot fail: the bytes are buffered
		l.r = bufio.NewReaderSize(&prefixed{pending: pending, r: l.src}, size)
	}
}

// Max is the line bound in force.
func (l *LineReader) Max() int { return l.max }

// prefixed reads pending, then r.
type prefixed struct {
	pending []byte
	r       io.Reader
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.pending) > 0 {
		n := copy(b, p.pending)
		p.pending = p.pending[n:]
		return n, nil
	}
	return p.r.Read(b)
}

// release gives back the long-line buffer of the previous call.
func (l *LineReader) release() {
	if l.buf != nil {
		l.buf = nil
		l.Budget.Release(l.reserved)
		l.reserved = 0
	}
}

// reserve makes room in buf for n more bytes, from Budget. It reports
// false when the budget has no room.
func (l *LineReader) reserve(n int) bool {
	need := int64(len(l.buf) + n)
	if need <= l.reserved {
		return true
	}
	grow := max(need, 2*l.reserved, int64(2*l.r.Size()))
	grow = min(grow, int64(l.max))
	if !l.Budget.Take(grow - l.reserved) {
		return false
	}
	l.reserved = grow
	if int64(cap(l.buf)) < grow {
		nb := make([]byte, len(l.buf), grow)
		copy(nb, l.buf)
		l.buf = nb
	}
	return true
}

// ReadLine returns the next line without its newline. The slice is valid
// until the next call. A final line without a newline is returned before
// io.EOF. A line over the bound yields ErrLineTooLong after it has been
// consumed (ErrLineCut at once when Cut is set); a long line the Budget
// cannot hold yields ErrNoLineBudget, likewise.
func (l *LineReader) ReadLine() ([]byte, error) {
	l.release()
	if l.skipping {
		l.skipping = false
		return l.skipRest(l.skipTotal, bufio.ErrBufferFull, l.skipReason)
	}
	if l.Deadlines != nil {
		l.Deadlines.Begin(l.r.Buffered() > 0)
	}
	line, err := l.r.ReadSlice('\n')
	if l.interrupted(err) {
		l.keepPartial(line)
		return nil, err
	}
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
	if len(line) > l.max {
		if l.Cut {
			l.keepPrefix(line)
			l.Skipped = int64(len(line))
			return nil, ErrLineCut
		}
		return l.skip(int64(len(line)), line, ErrLineTooLong)
	}
	if !l.reserve(len(line)) {
		return l.skip(int64(len(line)), line, ErrNoLineBudget)
	}
	l.buf = append(l.buf, line...)
	for {
		line, err = l.r.ReadSlice('\n')
		n := len(line)
		if err == nil {
			n-- // the newline
		}
		if len(l.buf)+n > l.max {
			total := int64(len(l.buf) + n)
			l.keepPrefix(append(l.buf, line[:min(n, prefixSize)]...))
			l.release()
			if l.Cut {
				l.Skipped = total
				return nil, ErrLineCut
			}
			if err == nil {
				l.Skipped = total
				return nil, ErrLineTooLong
			}
			return l.skipRest(total, err, ErrLineTooLong)
		}
		if !l.reserve(n) {
			total := int64(len(l.buf) + n)
			l.keepPrefix(append(l.buf, line[:min(n, prefixSize)]...))
			l.release()
			if err == nil {
				l.Skipped = total
				return nil, ErrNoLineBudget
			}
			return l.skipRest(total, err, ErrNoLineBudget)
		}
		l.buf = append(l.buf, line[:n]...)
		if l.interrupted(err) {
			l.keepPartial(l.buf)
			return nil, err
		}
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

// skip discards the rest of a line whose first n bytes, first, were read
// with bufio.ErrBufferFull, and reports why with reason.
func (l *LineReader) skip(n int64, first []byte, reason error) ([]byte, error) {
	l.keepPrefix(first)
	return l.skipRest(n, bufio.ErrBufferFull, reason)
}

// skipRest discards the rest of a line of which total bytes are read,
// the last read having ended with err.
func (l *LineReader) skipRest(total int64, err, reason error) ([]byte, error) {
	for err == bufio.ErrBufferFull {
		var line []byte
		line, err = l.r.ReadSlice('\n')
		total += int64(len(line))
		l.addPrefix(bytes.TrimSuffix(line, []byte{'\n'}))
	}
	if l.interrupted(err) {
		l.skipping, l.skipTotal, l.skipReason = true, total, reason
		return nil, err
	}
	l.Skipped = total
	if err == nil {
		l.Skipped--
		return nil, reason
	}
	if err == io.EOF {
		return nil, reason
	}
	return nil, err
}

// interrupted reports a read that KeepPartial resumes.
func (l *LineReader) interrupted(err error) bool {
	return l.KeepPartial && err != nil && errors.Is(err, os.ErrDeadlineExceeded)
}

// keepPartial makes the next read begin with a copy of partial, what an
// interrupted read had of its line (the buffered reader has already
// consumed it). The long-line buffer is given back: the line is gathered
// again from the start.
func (l *LineReader) keepPartial(partial []byte) {
	if len(partial) == 0 {
		return
	}
	pending := append([]byte(nil), partial...)
	l.release()
	l.r.Reset(&prefixed{pending: pending, r: l.src})
}

// Buffered reports whether more input is already buffered.
func (l *LineReader) Buffered() int { return l.r.Buffered() }
