package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
)

// HeaderLen is the length of a frame header: the u8 tag and the u32
// big-endian payload length.
const HeaderLen = 5

// DefaultMaxPayload is the payload bound of a Reader built with
// maxPayload <= 0: 1 MiB.
const DefaultMaxPayload = 1 << 20

// Frame is one message on the stream. Payload is opaque to this package
// (JSON on the client socket, CBOR on per-app sockets).
type Frame struct {
	Type    Type
	Payload []byte
}

// Append appends the encoding of f to dst and returns the extended slice.
// It writes f.Type as given, valid or not, so tests can build any byte
// stream; Write is the checked path. It panics if the payload does not
// fit the u32 length field, which a caller bounding its payloads never
// reaches.
func Append(dst []byte, f Frame) []byte {
	if uint64(len(f.Payload)) > math.MaxUint32 {
		panic(fmt.Sprintf("frame: %s payload of %d bytes does not fit a u32 length", f.Type, len(f.Payload)))
	}
	dst = append(dst, byte(f.Type))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(f.Payload)))
	return append(dst, f.Payload...)
}

// writeBufs recycles Write's buffers. A buffer that grew past a frame of
// DefaultMaxPayload is dropped rather than pinned in the pool.
var writeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledBuf = HeaderLen + DefaultMaxPayload

// Write writes f to w in a single Write call, so frames never interleave
// on a writer whose Write is safe for concurrent use and writes the whole
// buffer (a net.Conn), and a datagram-like writer sees whole frames. It refuses a type that is not
// one of the 27 and a payload that does not fit the u32 length field.
// Write does not apply a Reader's maxPayload: the peer's bound is the
// peer's business.
func Write(w io.Writer, f Frame) error {
	if err := checkWritable(f); err != nil {
		return err
	}
	bp := writeBufs.Get().(*[]byte)
	b := Append((*bp)[:0], f)
	_, err := w.Write(b)
	if cap(b) <= maxPooledBuf {
		*bp = b
		writeBufs.Put(bp)
	}
	return err
}

// checkWritable refuses a type that is not one of the 27 and a payload
// that does not fit the u32 length field.
func checkWritable(f Frame) error {
	if !f.Type.Valid() {
		return fmt.Errorf("frame: writing %s: not a message type", f.Type)
	}
	if uint64(len(f.Payload)) > math.MaxUint32 {
		return fmt.Errorf("frame: writing %s: payload of %d bytes does not fit a u32 length", f.Type, len(f.Payload))
	}
	return nil
}

// TooLargeError reports a frame whose payload length exceeds the Reader's
// bound. The payload has been read and discarded, so the stream is still
// in sync; the caller answers ErrorResponse 400 and reads on.
type TooLargeError struct {
	Type   Type
	Length uint32 // the length the header announced
	Max    int    // the Reader's bound
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("frame: %s payload of %d bytes exceeds the maximum of %d", e.Type, e.Length, e.Max)
}

// UnknownTypeError reports a frame whose tag is 0 or above 27.
//
// When the announced length is within the Reader's bound the frame has
// been skipped (Skipped is true) and the stream is in sync. When it is
// not, the bytes are most likely not frames at all (a JSON-RPC client on
// the framed socket: '{' is tag 123 and `"jso` a 577 MB length), so
// nothing is discarded, Skipped is false, and the Reader returns this
// same error from every later call: the caller answers ErrorResponse 400
// and closes the connection.
type UnknownTypeError struct {
	Tag     uint8
	Length  uint32
	Skipped bool
}

func (e *UnknownTypeError) Error() string {
	if e.Skipped {
		return fmt.Sprintf("frame: unknown type tag %d (%d-byte payload skipped)", e.Tag, e.Length)
	}
	return fmt.Sprintf("frame: unknown type tag %d with a %d-byte length: stream out of sync", e.Tag, e.Length)
}

// Reader reads frames from a byte stream. It is not safe for concurrent
// use; one goroutine owns a connection's reading side.
//
// Reader does no buffering of its own: each frame costs two reads of the
// underlying reader (header, payload). Wrap a socket in a bufio.Reader to
// batch small frames; the daemon does so anyway to peek the first byte.
type Reader struct {
	r   io.Reader
	max int
	hdr [HeaderLen]byte
	buf []byte // payload buffer, reused; grows to the largest frame read, at most max
	err error  // sticky: set once the stream is known to be out of sync
	// failFast: an oversized payload ends the stream (see FailFast).
	failFast bool
}

// NewReader returns a Reader that accepts payloads of at most maxPayload
// bytes; maxPayload <= 0 means DefaultMaxPayload.
func NewReader(r io.Reader, maxPayload int) *Reader {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	return &Reader{r: r, max: maxPayload}
}

// FailFast makes an oversized payload end the stream rather than be
// skipped: Next returns the *TooLargeError at once, without reading the
// payload, and returns it again on every later call. It suits a peer that
// has no business sending such a frame, where staying in sync is worth
// nothing and waiting for a megabyte of garbage is worth less.
func (r *Reader) FailFast() { r.failFast = true }

// MaxPayload returns the Reader's payload bound.
func (r *Reader) MaxPayload() int { return r.max }

// Next returns the next frame. The payload is valid until the next call;
// copy it to keep it.
//
// Errors:
//   - io.EOF: the stream ended at a frame boundary.
//   - io.ErrUnexpectedEOF: the stream ended inside a header or a payload
//     (including the payload of a frame being skipped).
//   - *TooLargeError: the payload was longer than the bound; it has been
//     discarded and Next returns Frame{Type: t} alongside. Reading on is
//     safe.
//   - *UnknownTypeError: the tag is not a message type; see its Skipped.
//   - any other error of the underlying reader, unchanged.
//
// A skipped payload is discarded with io.CopyN, so skipping costs no
// memory but as long as the peer takes to send it: a peer that announces
// a huge length and then stops sending blocks Next indefinitely. The
// caller bounds that with a read deadline on the connection, as it must
// for a peer that stops mid-frame anyway.
func (r *Reader) Next() (Frame, error) {
	if r.err != nil {
		return Frame{}, r.err
	}
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return Frame{}, err // io.EOF at a boundary, io.ErrUnexpectedEOF inside the header
	}
	t := Type(r.hdr[0])
	n := binary.BigEndian.Uint32(r.hdr[1:])
	tooLarge := uint64(n) > uint64(r.max)
	if !t.Valid() {
		e := &UnknownTypeError{Tag: r.hdr[0], Length: n, Skipped: !tooLarge}
		if tooLarge {
			r.err = e
			return Frame{}, e
		}
		if err := r.discard(n); err != nil {
			return Frame{}, err
		}
		return Frame{}, e
	}
	if tooLarge && r.failFast {
		r.err = &TooLargeError{Type: t, Length: n, Max: r.max}
		return Frame{Type: t}, r.err
	}
	if tooLarge {
		if err := r.discard(n); err != nil {
			return Frame{}, err
		}
		return Frame{Type: t}, &TooLargeError{Type: t, Length: n, Max: r.max}
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n)
	}
	p := r.buf[:n]
	if _, err := io.ReadFull(r.r, p); err != nil {
		return Frame{}, eofIsUnexpected(err)
	}
	return Frame{Type: t, Payload: p}, nil
}

func (r *Reader) discard(n uint32) error {
	_, err := io.CopyN(io.Discard, r.r, int64(n))
	return eofIsUnexpected(err)
}

// eofIsUnexpected turns io.EOF, which past a header always means a
// truncated frame, into io.ErrUnexpectedEOF.
func eofIsUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
