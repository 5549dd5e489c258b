package frame

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/pcp-dev/pcp/internal/unixsock"
)

// File descriptors beside frames, on Unix sockets (docs/framed.md,
// "Attachments"). The sender passes a frame's descriptors with
// SCM_RIGHTS in one sendmsg holding the frame's first byte, its tag, and
// nothing else; the rest of the frame follows in ordinary writes. The
// receiver gives the descriptors that came with a read to the frame that
// holds the last byte of that read: Linux ends a stream socket's read at
// the segment that carries descriptors, so that byte is the tag.

// MaxFDsPerFrame bounds the descriptors passed with one frame, both
// ways. The kernel's own bound (SCM_MAX_FD) is 253.
const MaxFDsPerFrame = 32

// maxHeldFDs bounds the descriptors an FDReader holds for frames not yet
// read; more are closed on arrival, and their frames lack them.
const maxHeldFDs = 2 * MaxFDsPerFrame

// MsgWriter is a connection that can pass descriptors: a *net.UnixConn.
type MsgWriter interface {
	WriteMsgUnix(b, oob []byte, addr *net.UnixAddr) (n, oobn int, err error)
}

// MsgReader reads with recvmsg: a *net.UnixConn.
type MsgReader interface {
	ReadMsgUnix(b, oob []byte) (n, oobn, flags int, addr *net.UnixAddr, err error)
}

// WriteFDs writes f to w with fds passed beside it: one sendmsg holding
// the tag and the SCM_RIGHTS message, then the header's length and the
// payload in one Write. With no fds it is Write. It does not close fds.
// Frames written by others must not come between the two calls: the
// caller serialises its writers.
func WriteFDs(w MsgWriter, f Frame, fds []int) error {
	if len(fds) == 0 {
		ww, ok := w.(io.Writer)
		if !ok {
			return io.ErrClosedPipe
		}
		return Write(ww, f)
	}
	if len(fds) > MaxFDsPerFrame {
		return &FDCountError{Count: len(fds)}
	}
	if err := checkWritable(f); err != nil {
		return err
	}
	ww, ok := w.(io.Writer)
	if !ok {
		return io.ErrClosedPipe
	}
	b := Append(make([]byte, 0, HeaderLen+len(f.Payload)), f)
	n, _, err := w.WriteMsgUnix(b[:1], syscall.UnixRights(fds...), nil)
	if err != nil {
		return err
	}
	if n != 1 {
		return io.ErrShortWrite
	}
	_, err = ww.Write(b[1:])
	return err
}

// FDCountError refuses to pass more than MaxFDsPerFrame descriptors.
type FDCountError struct{ Count int }

func (e *FDCountError) Error() string {
	return fmt.Sprintf("frame: %d descriptors for one frame, more than %d", e.Count, MaxFDsPerFrame)
}

// FDReader reads frames from a Unix socket with recvmsg and hands each
// out with the descriptors that came with it. Every descriptor it
// receives is either handed out by Next or closed by it: those of frames
// skipped (oversized, unknown type), those past its bounds
// (MaxFDsPerFrame for one read, 2×MaxFDsPerFrame held ahead of the
// frames read), and those still held when Close is called. Not safe for
// concurrent use.
type FDReader struct {
	src *fdSource
	cnt *countingReader
	r   *Reader
}

// NewFDReader returns an FDReader on c, accepting payloads of at most
// maxPayload bytes (see NewReader). It reads ahead through a buffer of
// its own.
func NewFDReader(c MsgReader, maxPayload int) *FDReader {
	src := &fdSource{
		c:   c,
		oob: make([]byte, syscall.CmsgSpace(4*MaxFDsPerFrame)),
		fds: FrameFDs{Close: func(fd int) { syscall.Close(fd) }, Max: maxHeldFDs},
	}
	cnt := &countingReader{r: bufio.NewReaderSize(src, 64<<10)}
	return &FDReader{src: src, cnt: cnt, r: NewReader(cnt, maxPayload)}
}

// Next returns the next frame and the descriptors that came with it,
// which the caller now owns (it must close them); errors are Reader.Next's.
// On an error, the descriptors of the bytes read are held on or closed.
func (r *FDReader) Next() (Frame, []int, error) {
	start := r.cnt.n
	f, err := r.r.Next()
	end := r.cnt.n
	if err != nil {
		// A skipped frame's descriptors, and any before it, are nobody's.
		r.src.fds.Take(end, end)
		return f, nil, err
	}
	return f, r.src.fds.Take(start, end), nil
}

// Close closes every descriptor held for frames not yet read. It does
// not close the connection.
func (r *FDReader) Close() { r.src.fds.CloseAll() }

// countingReader counts the bytes read through it: the stream offset of
// the next byte the frame Reader reads.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// fdSource reads the socket with recvmsg, keeping the descriptors that
// come with the bytes in fds by stream offset.
type fdSource struct {
	c   MsgReader
	oob []byte
	fds FrameFDs
}

func (s *fdSource) Read(p []byte) (int, error) {
	n, oobn, _, _, err := s.c.ReadMsgUnix(p, s.oob)
	n, oobn = max(n, 0), max(oobn, 0) // a failed read may report -1
	var fds []int
	if oobn > 0 {
		fds = unixsock.ParseRights(s.oob[:oobn])
	}
	// MSG_CTRUNC: the kernel closed what did not fit; those frames lack
	// descriptors, which their readers see as missing.
	s.fds.Chunk(n, fds)
	return n, err
}

// FrameFDs assigns descriptors received on a byte stream to the frames
// they came with, by the stream offset of the last byte of the read that
// brought them. Chunk is told of every read, in order; Take hands out a
// frame's descriptors, frames being taken in order. Every descriptor it
// is given is either handed out by Take or passed to Close exactly once:
// by Take when its frame was passed over, by Chunk when more than Max
// are held or a read brings more than MaxFDsPerFrame, by CloseAll. Not
// safe for concurrent use.
type FrameFDs struct {
	Close func(fd int)
	Max   int
	// off is the stream offset of the next byte.
	off   int64
	held  []heldFDs // in offset order
	count int       // descriptors in held
}

type heldFDs struct {
	at  int64 // the stream offset of the byte they came with
	fds []int
}

// Chunk records a read of n bytes that came with fds. Descriptors that
// came with no bytes belong to the next byte.
func (l *FrameFDs) Chunk(n int, fds []int) {
	if len(fds) > 0 {
		at := l.off
		if n > 0 {
			at += int64(n) - 1
		}
		h := heldFDs{at: at}
		for _, fd := range fds {
			if l.count >= l.Max || len(h.fds) >= MaxFDsPerFrame {
				l.Close(fd)
				continue
			}
			h.fds = append(h.fds, fd)
			l.count++
		}
		if len(h.fds) > 0 {
			l.held = append(l.held, h)
		}
	}
	l.off += int64(n)
}

// Take returns the descriptors that came with the bytes at offsets start
// up to end (a frame), and closes those of earlier bytes, which nobody
// will take. A frame that brought more than MaxFDsPerFrame in all (a
// hostile sender's several reads) keeps the first MaxFDsPerFrame.
func (l *FrameFDs) Take(start, end int64) []int {
	var got []int
	i := 0
	for ; i < len(l.held) && l.held[i].at < end; i++ {
		h := l.held[i]
		l.count -= len(h.fds)
		for _, fd := range h.fds {
			if h.at >= start && len(got) < MaxFDsPerFrame {
				got = append(got, fd)
			} else {
				l.Close(fd)
			}
		}
	}
	l.held = append(l.held[:0], l.held[i:]...)
	return got
}

// Held is the number of descriptors held.
func (l *FrameFDs) Held() int { return l.count }

// CloseAll closes every descriptor held.
func (l *FrameFDs) CloseAll() {
	for _, h := range l.held {
		for _, fd := range h.fds {
			l.Close(fd)
		}
	}
	l.held, l.count = nil, 0
}
