package jsonrpc

import (
	"bytes"
	"context"
	"net"
	"syscall"

	"github.com/pcp-dev/pcp/internal/unixsock"
)

// File descriptors beside lines, on Unix sockets (docs/jsonrpc.md,
// "Attachments"). The sender passes a line's descriptors with SCM_RIGHTS
// in one sendmsg holding the line's first byte and nothing before it, so
// they belong to the line that holds the last byte the receiver's
// recvmsg returned with them (a line's newline counts as part of it):
// Linux ends a stream socket's read at the segment that carries them.

// FDCarrier is a handler result that passes file descriptors with its
// reply line. From the moment Handle returns it, the Conn owns FDs: it
// closes them once they are sent, and on every path that does not send
// them (a notification, an encoding failure, a closed connection, a
// batch, which cannot carry them).
type FDCarrier interface {
	FDs() []int
}

// MaxFDsPerLine bounds the descriptors passed with one line, both ways.
// The kernel's own bound (SCM_MAX_FD) is 253.
const MaxFDsPerLine = 32

// maxHeldFDs bounds the descriptors a receiving Conn holds for lines not
// yet read; more are closed on arrival, and their lines lack them.
const maxHeldFDs = 2 * MaxFDsPerLine

type batchKey struct{}

// InBatch reports whether ctx is a handler's for a request of a batch,
// whose reply cannot carry descriptors.
func InBatch(ctx context.Context) bool {
	b, _ := ctx.Value(batchKey{}).(bool)
	return b
}

type msgWriter interface {
	WriteMsgUnix(b, oob []byte, addr *net.UnixAddr) (n, oobn int, err error)
}

type msgReader interface {
	ReadMsgUnix(b, oob []byte) (n, oobn, flags int, addr *net.UnixAddr, err error)
}

// CanPassFDs reports whether the connection can send descriptors with
// its lines (a Unix socket).
func (c *Conn) CanPassFDs() bool {
	_, ok := c.rwc.(msgWriter)
	return ok
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

// lineFDs assigns descriptors received on a byte stream to the lines
// they came with. Chunk is told of every read, in order; Take hands out
// a line's descriptors, lines being taken in order. Every descriptor it
// is given is either handed out by Take or closed (with close) exactly
// once: by Take when its line was passed over, by Chunk when more than
// max are held or a chunk brings more than MaxFDsPerLine for one line,
// by CloseAll. Not safe for concurrent use.
type lineFDs struct {
	close func(int)
	max   int
	// lines counts the newlines of the chunks so far: the number of the
	// line the next byte belongs to.
	lines int64
	held  []heldFDs // in line order
	count int       // descriptors in held
}

type heldFDs struct {
	line int64
	fds  []int
}

// Chunk records a read of data that came with fds.
func (l *lineFDs) Chunk(data []byte, fds []int) {
	if len(fds) > 0 {
		line := l.lines
		if n := len(data); n > 0 {
			line += int64(bytes.Count(data[:n-1], []byte{'\n'}))
		}
		l.add(line, fds)
	}
	l.lines += int64(bytes.Count(data, []byte{'\n'}))
}

func (l *lineFDs) add(line int64, fds []int) {
	var h *heldFDs
	if n := len(l.held); n > 0 && l.held[n-1].line == line {
		h = &l.held[n-1] // a hostile sender's second batch for one line
	} else {
		l.held = append(l.held, heldFDs{line: line})
		h = &l.held[len(l.held)-1]
	}
	for _, fd := range fds {
		if l.count >= l.max || len(h.fds) >= MaxFDsPerLine {
			l.close(fd)
			continue
		}
		h.fds = append(h.fds, fd)
		l.count++
	}
	if len(h.fds) == 0 {
		l.held = l.held[:len(l.held)-1]
	}
}

// Take returns the descriptors of line (numbered from 0) and closes
// those of earlier lines, which nobody will take.
func (l *lineFDs) Take(line int64) []int {
	var got []int
	i := 0
	for ; i < len(l.held) && l.held[i].line <= line; i++ {
		h := l.held[i]
		l.count -= len(h.fds)
		if h.line == line {
			got = h.fds
			continue
		}
		for _, fd := range h.fds {
			l.close(fd)
		}
	}
	l.held = append(l.held[:0], l.held[i:]...)
	return got
}

// CloseAll closes every descriptor held.
func (l *lineFDs) CloseAll() {
	for _, h := range l.held {
		for _, fd := range h.fds {
			l.close(fd)
		}
	}
	l.held, l.count = nil, 0
}

// fdReader reads a Unix socket with recvmsg, keeping the descriptors
// that come with the bytes in fds. It is read by Run's goroutine only.
type fdReader struct {
	c   msgReader
	oob []byte
	fds lineFDs
}

func newFDReader(c msgReader) *fdReader {
	return &fdReader{
		c:   c,
		oob: make([]byte, syscall.CmsgSpace(4*MaxFDsPerLine)),
		fds: lineFDs{close: func(fd int) { syscall.Close(fd) }, max: maxHeldFDs},
	}
}

func (r *fdReader) Read(p []byte) (int, error) {
	n, oobn, _, _, err := r.c.ReadMsgUnix(p, r.oob)
	n, oobn = max(n, 0), max(oobn, 0) // a failed read may report -1
	var fds []int
	if oobn > 0 {
		fds = unixsock.ParseRights(r.oob[:oobn])
	}
	// MSG_CTRUNC: the kernel closed what did not fit; those lines lack
	// descriptors, which their readers see as missing.
	r.fds.Chunk(p[:n], fds)
	return n, err
}
