// Package deadline bounds how long a peer may take over reading, for the
// faces that read messages from a stream (JSON-RPC lines, frames): a
// connection that sends nothing is idle, one that has started a message
// must finish it in time. It also holds Budget, a daemon-wide bound on
// the memory that long messages may pin.
package deadline

import (
	"io"
	"sync/atomic"
	"time"
)

// Setter is the part of a net.Conn a Reader needs.
type Setter interface{ SetReadDeadline(time.Time) error }

// Reader reads from a connection and keeps its read deadline in step
// with where the peer is in the stream:
//
//   - between messages, the deadline is Idle from now (none when Idle is
//     0), renewed on every read;
//   - once the first byte of a message has arrived, the deadline is
//     Message from that moment (none when Message is 0), so a message
//     started must be complete within Message however slowly its bytes
//     trickle in.
//
// The caller says where messages begin (Begin). A read that times out
// returns the connection's timeout error (os.ErrDeadlineExceeded);
// InMessage tells the two cases apart.
//
// Concurrency: a Reader belongs to the goroutine that reads the
// connection; no method may be called concurrently with another.
type Reader struct {
	r io.Reader
	d Setter
	// Idle and Message are the timeouts; they may be changed between
	// reads (e.g. when a connection's duties change).
	Idle, Message time.Duration

	inMessage bool
	started   time.Time // arrival of the current message's first byte
	lastRead  time.Time // arrival of the last bytes read
	set       time.Time // the deadline as last set on d
}

// NewReader returns a Reader of r whose deadlines are set on d (usually
// the same connection).
func NewReader(r io.Reader, d Setter, idle, message time.Duration) *Reader {
	return &Reader{r: r, d: d, Idle: idle, Message: message}
}

// Begin marks the start of the next message. pending reports that bytes
// of it have already been read (by a buffer above the Reader, in the same
// read as the end of the previous message): the message then began when
// those bytes arrived.
func (r *Reader) Begin(pending bool) {
	r.inMessage = pending
	if pending {
		r.started = r.lastRead
	}
}

// InMessage reports whether a message has started and not yet been
// marked complete by the next Begin.
func (r *Reader) InMessage() bool { return r.inMessage }

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	r.arm()
	n, err := r.r.Read(p)
	if n > 0 {
		now := time.Now()
		if !r.inMessage {
			r.inMessage, r.started = true, now
		}
		r.lastRead = now
	}
	return n, err
}

// arm sets the deadline the next read needs. An idle deadline is only
// moved when it would move by more than an eighth of Idle, so a busy
// connection does not pay for a timer update on every read; an idle
// connection may therefore be closed up to an eighth of Idle early.
func (r *Reader) arm() {
	var want time.Time
	switch {
	case r.inMessage && r.Message > 0:
		want = r.started.Add(r.Message)
	case !r.inMessage && r.Idle > 0:
		want = time.Now().Add(r.Idle)
		if !r.set.IsZero() && want.After(r.set) && want.Sub(r.set) < r.Idle/8 {
			return
		}
	}
	if want.Equal(r.set) {
		return
	}
	r.set = want
	r.d.SetReadDeadline(want)
}

// Budget bounds the bytes that connections may hold, together, for
// messages larger than their own fixed read buffer. Take reserves, Release
// returns. A nil *Budget is unlimited.
//
// Concurrency: safe for concurrent use.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// Max is the budget's size; 0 for a nil budget.
func (b *Budget) Max() int64 {
	if b == nil {
		return 0
	}
	return b.max
}

// Take reserves n bytes; it reports false, reserving nothing, when that
// would exceed the budget.
func (b *Budget) Take(n int64) bool {
	if b == nil {
		return true
	}
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

// Release returns n bytes taken earlier.
func (b *Budget) Release(n int64) {
	if b != nil {
		b.used.Add(-n)
	}
}

// Used reports the bytes reserved now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}
