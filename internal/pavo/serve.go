package pavo

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
)

// Serve reads request lines from r and writes one reply line to w for
// each, in order, until r ends (EOF: Serve returns nil), ctx is cancelled
// (Serve returns nil at once) or writing to w fails (Serve returns the
// error). Lines that hold only white space are skipped without a reply,
// as keep-alives; a last line without a newline is served. A line longer
// than d.MaxLine is read to its end, discarded and answered with an
// ok:false reply.
//
// Requests are served one at a time. Serve reads r on a goroutine of its
// own, at most one line ahead; when Serve returns because ctx was
// cancelled, that goroutine ends once its pending Read returns (close r
// to end it sooner).
func Serve(ctx context.Context, r io.Reader, w io.Writer, d *Driver) error {
	limit := d.MaxLine
	if limit <= 0 {
		limit = DefaultMaxLine
	}
	lines := make(chan lineMsg)
	done := make(chan struct{})
	defer close(done)
	go readLines(r, limit, lines, done)

	bw := bufio.NewWriter(w)
	for {
		var m lineMsg
		select {
		case <-ctx.Done():
			return nil
		case m = <-lines:
		}
		if m.err != nil {
			if errors.Is(m.err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading requests: %w", m.err)
		}
		var reply []byte
		switch {
		case m.size > limit:
			reply = errLine(fmt.Sprintf("line too long: %d bytes exceeds the limit of %d bytes", m.size, limit))
		case blank(m.line):
			continue
		default:
			reply = d.Handle(ctx, m.line)
		}
		if ctx.Err() != nil {
			return nil // shutting down: the reply is not awaited
		}
		bw.Write(reply)
		bw.WriteByte('\n')
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("writing a reply: %w", err)
		}
	}
}

// blank reports whether line holds nothing but JSON white space.
func blank(line []byte) bool {
	return len(bytes.Trim(line, " \t\r")) == 0
}

// lineMsg is one line read, or the error that ended reading. size is the
// line's length; when it exceeds the limit, line is nil.
type lineMsg struct {
	line []byte
	size int
	err  error
}

// readLines sends r's lines on out until r fails or ends, or done is
// closed.
func readLines(r io.Reader, limit int, out chan<- lineMsg, done <-chan struct{}) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		m := readLine(br, limit)
		select {
		case out <- m:
		case <-done:
			return
		}
		if m.err != nil {
			return
		}
	}
}

// readLine reads one line without its newline (and a \r before it). A
// line longer than limit is consumed and measured but not kept. At the end
// of r a last unterminated line is returned first, then io.EOF.
func readLine(br *bufio.Reader, limit int) lineMsg {
	var (
		buf   []byte
		size  int     // bytes read for this line, the newline included
		over  bool    // more than limit+2 bytes: buf is no longer kept
		last2 [2]byte // the last two bytes read
	)
	for {
		chunk, err := br.ReadSlice('\n')
		size += len(chunk)
		for _, c := range chunk[len(chunk)-min(len(chunk), 2):] {
			last2[0], last2[1] = last2[1], c
		}
		if !over && size <= limit+2 {
			buf = append(buf, chunk...)
		} else {
			over, buf = true, nil
		}
		switch {
		case err == nil, errors.Is(err, io.EOF):
			if err != nil && size == 0 {
				return lineMsg{err: io.EOF}
			}
			n := size
			if last2[1] == '\n' {
				n--
			}
			if n > 0 && (last2[1] == '\r' || (last2[1] == '\n' && last2[0] == '\r')) {
				n--
			}
			if over || n > limit {
				return lineMsg{size: n}
			}
			return lineMsg{line: buf[:n], size: n}
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return lineMsg{err: err}
		}
	}
}
