package jsonrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/deadline"
)

// Handler serves the peer's requests and notifications. Requests are
// handled concurrently, each on its own goroutine; the peer's only
// request in flight is handled on the reading goroutine itself, which
// moves the reading elsewhere once the request has taken
// Options.InlineBudget or calls the peer, so a request that waits (for
// a line yet to be read, a user, an event) delays the next lines by at
// most the budget. Notifications are handled one at a time on the read
// loop, in the order they arrived, so Handle must return promptly for
// them. Each call gets its own ctx, cancelled when it returns or when
// the connection closes. For a notification the result is discarded. An error that is not an
// *api.Error is answered as INTERNAL_ERROR; a panic is recovered,
// reported to Options.OnPanic and answered with a plain INTERNAL_ERROR
// that does not carry the panic's text.
type Handler interface {
	Handle(ctx context.Context, m *Message) (result any, err error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m *Message) (any, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m *Message) (any, error) { return f(ctx, m) }

// Options configure a Conn.
type Options struct {
	// Handler serves incoming requests; nil answers METHOD_NOT_FOUND.
	Handler Handler
	// MaxLine bounds one incoming line; 0 means DefaultMaxLine.
	MaxLine int
	// MaxInFlight bounds the peer's requests being handled at once; the
	// connection stops reading while it is reached. 0 means 256.
	MaxInFlight int
	// InlineBudget is how long the peer's request is served on the
	// reading goroutine when it is the only one in flight and nothing
	// more has been read (no hand-off to a worker and back). Past it,
	// or as soon as the request calls the peer, the reading moves to
	// another goroutine, so that the peer's next lines (and answers to
	// this side's calls) are read meanwhile. 0 means
	// DefaultInlineBudget; negative serves every request on a worker.
	InlineBudget time.Duration
	// MaxBatch bounds the messages of one batch; a larger batch is
	// answered with one INVALID_REQUEST. 0 means DefaultMaxBatch.
	MaxBatch int
	// WriteTimeout closes the connection when the peer does not read a
	// reply for this long. 0 means one minute; negative disables it.
	WriteTimeout time.Duration
	// OnProtocolError, if set, is told of each message answered with a
	// decode error (for logging).
	OnProtocolError func(*api.Error)
	// OnPanic, if set, is told of a handler's panic, with its stack (for
	// logging). The peer only ever sees "internal error".
	OnPanic func(v any, stack []byte)

	// IdleTimeout closes a connection that has received nothing for this
	// long while it is not busy: no request of the peer's being handled,
	// no call of ours waiting for an answer, and KeepAlive (if set)
	// reporting false. 0 means never.
	IdleTimeout time.Duration
	// KeepAlive, if set, reports duties that keep an idle connection open
	// (an app it serves, a subscription it holds). It is called on the
	// read loop when the idle timeout expires.
	KeepAlive func() bool
	// MessageTimeout bounds how long a line may take to arrive once its
	// first byte has: a peer that starts a line and stalls, or trickles a
	// huge one, is told so and closed. 0 means no bound.
	MessageTimeout time.Duration
	// LineBudget, if set, bounds the memory held by long lines of every
	// connection that shares it (see LineReader); a line it has no room
	// for is answered with RATE_LIMITED and skipped.
	LineBudget *deadline.Budget
	// Gate, if set, must be passed before anything else is read.
	Gate *Gate
	// ReadOnDemand makes the connection read only while a call of this
	// side's waits for its answer, and on that call's goroutine, until
	// StartReading: a lone call's answer reaches its caller with no
	// hand-off from a reading goroutine. Whatever else arrives meanwhile
	// (notifications, the peer's requests, other calls' answers) is
	// served as Run would serve it, but only while some call waits. For
	// a side that expects nothing unasked (a client before it
	// subscribes or serves anything). It is ignored with Gate,
	// IdleTimeout or MessageTimeout, or on a connection without
	// SetReadDeadline (with which a call's context interrupts its read).
	ReadOnDemand bool
	// ReceiveFDs reads a Unix socket with recvmsg and keeps the file
	// descriptors that come with a response's line for its caller
	// (CallFDs); descriptors that come with anything else are closed.
	// Without it, descriptors sent to this side are discarded by the
	// kernel, unread.
	ReceiveFDs bool
}

// Gate makes a connection authenticate first, alone: the first line must
// be one request (not a batch, not a notification) for Method, read with
// lines bounded to MaxLine. It is served on the read loop, so nothing
// after it is read until it is answered. If it is anything else, or the
// handler answers it with an error, the answer is sent and the
// connection closed; a line over MaxLine is answered as soon as its
// MaxLine+1st byte arrives, without waiting for its newline; a connection that has not passed within Timeout is
// closed. Once it has passed, lines are bounded by Options.MaxLine.
type Gate struct {
	Method  string
	MaxLine int
	Timeout time.Duration
}

// DefaultMaxBatch is the default bound on a batch's messages.
const DefaultMaxBatch = 1024

// batchParallel bounds how many of one batch's requests run at once, so a
// single line cannot start a goroutine per element.
const batchParallel = 8

// Conn is one JSON-RPC 2.0 connection, symmetric: it serves the peer's
// requests and lets this side send requests and notifications to the peer.
//
// Concurrency: Call, Notify, StartReading and Close may be called from
// any goroutine. Run must be called exactly once. One goroutine at a
// time reads: the holder of the reading token (rtok), which is Run's
// once the connection reads in the background, and until then (with
// Options.ReadOnDemand) a waiting call's, in turn. Run's reading moves
// to another goroutine when a request it serves inline outlasts its
// budget or calls the peer (reader, handOff). Writers share bw under
// wmu and write on their own goroutine: no writer goroutine stands
// between a reply and the socket.
type Conn struct {
	rwc  io.ReadWriteCloser
	opts Options

	ctx    context.Context // cancelled when the connection closes
	cancel context.CancelFunc

	// wmu guards bw. queued counts writers that have announced a line and
	// not yet written it; the last of them flushes, so lines written
	// together share one syscall.
	wmu    sync.Mutex
	bw     *bufio.Writer
	queued atomic.Int32

	nextID atomic.Int64
	// pmu guards pending.
	pmu     sync.Mutex
	pending map[string]chan *Message
	// lastWords is the peer's last message when it was an error with a
	// null id (a refusal written before hanging up); any later message
	// clears it. Run stores it before it reads the next line, so it is
	// set before the connection closes on the peer's EOF. Once the
	// connection has closed, calls fail with it (closeError).
	lastWords atomic.Pointer[api.Error]
	// gone is set once a write found the peer gone (peerGone); Run then
	// reads on for its last words, for at most goneGrace.
	gone sync.Once

	handlers sync.WaitGroup
	// inFlight counts the peer's requests (batches count once) read and
	// not yet answered (a lone request: whose handler has not returned);
	// the idle timeout spares a connection with any.
	inFlight atomic.Int32

	// rd is Run's reader, set before the loop starts; serving says
	// whether its goroutine is serving a request inline (notInline,
	// inline, handedOver). Calls read it to hand the reading off.
	rd      *reader
	serving atomic.Int32
	// rtok is the reading token: whoever holds it may run rd.step. Run
	// holds it for good once the connection reads in the background;
	// before that (Options.ReadOnDemand) calls take it in turn. bg is
	// closed by StartReading; onDemand is set while calls read.
	rtok     chan struct{}
	bg       chan struct{}
	bgOnce   sync.Once
	onDemand atomic.Bool

	closeOnce sync.Once
	closeErr  error
	done      chan struct{}
	// gatePassed is set once Options.Gate has been passed.
	gatePassed atomic.Bool
}

// NewConn wraps rwc. Call Run to start serving.
func NewConn(rwc io.ReadWriteCloser, opts Options) *Conn {
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultMaxLine
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 256
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = time.Minute
	}
	if opts.InlineBudget == 0 {
		opts.InlineBudget = DefaultInlineBudget
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		rwc:     rwc,
		opts:    opts,
		ctx:     ctx,
		cancel:  cancel,
		bw:      bufio.NewWriterSize(rwc, 32<<10),
		pending: make(map[string]chan *Message),
		done:    make(chan struct{}),
		rtok:    make(chan struct{}, 1),
		bg:      make(chan struct{}),
	}
	c.rd = c.newReader()
	_, canInterrupt := rwc.(readDeadliner)
	if opts.ReadOnDemand && canInterrupt && opts.Gate == nil && opts.IdleTimeout <= 0 && opts.MessageTimeout <= 0 {
		c.onDemand.Store(true)
		c.rd.lr.KeepPartial = true
	} else {
		close(c.bg)
	}
	return c
}

type readDeadliner interface{ SetReadDeadline(time.Time) error }

// StartReading makes a connection made with Options.ReadOnDemand read in
// the background from now on, as one without it does: for a side that
// is about to be sent something unasked (events it subscribes to,
// requests for what it serves), or wants Done closed when the peer
// hangs up. It is safe to call more than once, from any goroutine.
func (c *Conn) StartReading() {
	c.bgOnce.Do(func() {
		select {
		case <-c.bg: // never on demand
		default:
			close(c.bg)
		}
	})
}

// Context is cancelled when the connection closes.
func (c *Conn) Context() context.Context { return c.ctx }

// Done is closed when the connection has closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// CloseWhenIdle stops reading from the peer and closes the connection
// once the requests already read have been answered: a handler may call
// it to end its own connection after its reply.
func (c *Conn) CloseWhenIdle() {
	c.StartReading() // someone must read on to the EOF
	if cr, ok := c.rwc.(interface{ CloseRead() error }); ok && cr.CloseRead() == nil {
		return // Run sees EOF, answers what it has, then closes
	}
	c.Close()
}

// Close closes the connection and fails outstanding calls. It is safe to
// call more than once.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.closeErr = c.rwc.Close()
		c.pmu.Lock()
		for k, ch := range c.pending {
			delete(c.pending, k)
			close(ch)
		}
		c.pmu.Unlock()
		close(c.done)
	})
	return c.closeErr
}

// Run reads and serves messages until the peer closes the connection, a
// read fails, or Close is called. When the peer stops sending (EOF), the
// requests already read are still answered before the connection closes;
// Run returns once every handler has returned.
func (c *Conn) Run() error {
	r := c.rd
	if r.fr != nil {
		// After the loop has ended, whichever goroutine ran it last.
		defer r.fr.fds.CloseAll()
	}
	if r.gated && c.opts.Gate.Timeout > 0 {
		t := time.AfterFunc(c.opts.Gate.Timeout, func() {
			if !c.gatePassed.Load() {
				c.Close()
			}
		})
		defer t.Stop()
	}
	end, over := c.awaitReading()
	handedOff := false
	if !over {
		end, handedOff = r.loop()
	}
	if handedOff {
		end = <-r.ended
	}
	// On EOF the requests already read are answered before the
	// connection closes. Any other end (a broken connection, a timeout,
	// Close) cancels their contexts first.
	if !end.eof {
		c.Close()
	}
	close(r.work)
	c.handlers.Wait()
	c.Close()
	return end.err
}

// awaitReading takes the reading token for Run: at once, or (on demand)
// once StartReading is called. over is set when the reading ended
// meanwhile, in a call that read for itself (end says how), or because
// the connection was closed.
func (c *Conn) awaitReading() (end loopEnd, over bool) {
	r := c.rd
	select {
	case <-c.bg:
	case end = <-r.ended:
		return end, true
	case <-c.done:
		// A call may be reading: its read fails now, and it ends the
		// reading (and keeps the token).
		select {
		case c.rtok <- struct{}{}:
			return loopEnd{}, true
		case end = <-r.ended:
			return end, true
		}
	}
	select {
	case c.rtok <- struct{}{}:
	case end = <-r.ended:
		return end, true
	}
	c.onDemand.Store(false)
	return loopEnd{}, false
}

// reader is the state of a connection's read loop. One goroutine at a
// time runs the loop: Run's, until a request it serves inline outlasts
// Options.InlineBudget or calls the peer, when the reading is handed to
// a new goroutine (handOff) and the one left behind finishes the request.
// The hand-off (an atomic swap of Conn.serving, then the go statement)
// orders everything the old goroutine did to the reader before what the
// new one does.
type reader struct {
	c     *Conn
	lr    *LineReader
	fr    *fdReader
	gated bool
	// lineNo numbers the lines ReadLine consumes, blank and skipped
	// ones included, to claim each line's descriptors.
	lineNo int64
	// work hands requests to a pool of worker goroutines that outlive
	// one request, so a busy connection does not pay for a new
	// goroutine (and the growth of its stack) per request. The reader is
	// the only sender; Run closes it, which lets idle workers exit.
	work chan func()
	// workers counts worker goroutines, and a request left behind by a
	// hand-off until it is done: at most MaxInFlight, but for left-behind
	// requests that found the pool full. Only the reader adds to it.
	workers atomic.Int32
	// timer hands the reading off when a request served inline
	// outlasts the budget. The reader arms it and stops it; a stop or an
	// arming that comes late (after a hand-off) can only hand a later
	// request off early, which is never wrong.
	timer *time.Timer
	// ended receives the loop's end when a goroutine other than Run's
	// ran the loop last.
	ended chan loopEnd
}

// loopEnd is how a read loop ended: eof when the peer stopped sending
// (answer what was read, then close); err is what Run returns.
type loopEnd struct {
	eof bool
	err error
}

// Values of Conn.serving.
const (
	notInline  = 0 // the reader is reading, or dispatching
	inline     = 1 // the reader is serving a request itself
	handedOver = 2 // a new goroutine has taken over the reading
)

// DefaultInlineBudget is how long a lone request is served on the
// reading goroutine before the reading moves to another goroutine.
const DefaultInlineBudget = time.Millisecond

func (c *Conn) newReader() *reader {
	lr, fr, gated := c.lineReader()
	r := &reader{c: c, lr: lr, fr: fr, gated: gated, work: make(chan func()), ended: make(chan loopEnd, 1)}
	r.timer = time.AfterFunc(time.Hour, c.handOff)
	r.timer.Stop()
	return r
}

// lineFDs claims the descriptors of the line just read.
func (r *reader) lineFDs() []int {
	r.lineNo++
	if r.fr == nil {
		return nil
	}
	return r.fr.fds.Take(r.lineNo - 1)
}

// dispatch hands f to a worker; false if the connection closed while
// every worker was busy.
func (r *reader) dispatch(f func()) bool {
	c := r.c
	select {
	case r.work <- f: // an idle worker took it
		return true
	default:
	}
	if int(r.workers.Load()) < c.opts.MaxInFlight {
		r.workers.Add(1)
		c.handlers.Add(1)
		go c.worker(r.work, f)
		return true
	}
	select { // every worker is busy: stop reading until one is free
	case r.work <- f:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// carryOn runs the read loop on a new goroutine after a hand-off.
func (r *reader) carryOn() {
	// The request left behind holds a worker's slot until it is done.
	r.workers.Add(1)
	// The timer was armed for the request left behind.
	r.timer.Stop()
	if end, handedOff := r.loop(); !handedOff {
		r.ended <- end
	}
}

// loop reads and serves lines until the connection ends (handedOff
// false) or until this goroutine has served a request inline and found
// the reading handed to another (handedOff true).
func (r *reader) loop() (end loopEnd, handedOff bool) {
	for {
		switch st, end := r.step(true); st {
		case loopOver:
			return end, false
		case handedAway:
			return loopEnd{}, true
		case interrupted: // not expected here; never spin on a stale deadline
			r.c.rwc.(readDeadliner).SetReadDeadline(time.Time{})
		}
	}
}

// Results of step.
const (
	readOn      = iota // the line is served: read the next
	loopOver           // the reading has ended, as loopEnd says
	handedAway         // served a request inline; another goroutine reads now
	interrupted        // a call reading for itself was interrupted by its context
)

// step reads one line and serves it. mayInline lets it serve the peer's
// lone request on this goroutine (see serveInline).
func (r *reader) step(mayInline bool) (int, loopEnd) {
	c, lr := r.c, r.lr
	line, err := lr.ReadLine()
	if err == ErrLineCut {
		// Only the gate cuts lines: answer now, not when the
		// newline or the gate's timeout comes, and hang up.
		c.protocolError(RecoverID(lr.SkippedPrefix), &api.Error{
			Code:    api.CodeInvalidRequest,
			Message: fmt.Sprintf("line exceeds the limit of %d bytes; closing", lr.Max()),
			Data:    map[string]any{"limit": lr.Max()},
		})
		c.hangUp()
		return loopOver, loopEnd{eof: true}
	}
	if err == ErrNoLineBudget || err == ErrLineTooLong {
		closeFDs(r.lineFDs())
		c.refuseLine(lr, err)
		if r.gated && !c.gatePassed.Load() {
			c.hangUp() // the gate's message was not what it must be
			return loopOver, loopEnd{eof: true}
		}
		return readOn, loopEnd{}
	}
	if err != nil {
		if lr.KeepPartial && errors.Is(err, os.ErrDeadlineExceeded) {
			return interrupted, loopEnd{} // a caller's context ended its read
		}
		again, eof, err := c.readFailed(lr, err)
		if again {
			return readOn, loopEnd{}
		}
		return loopOver, loopEnd{eof: eof, err: err}
	}
	fds := r.lineFDs()
	if len(firstNonSpace(line)) == 0 {
		closeFDs(fds)
		return readOn, loopEnd{} // blank lines are keep-alives
	}
	if r.gated && !c.gatePassed.Load() {
		closeFDs(fds)
		if !c.passGate(line) {
			c.hangUp()
			return loopOver, loopEnd{eof: true}
		}
		lr.SetMax(c.opts.MaxLine)
		lr.Cut = false
		return readOn, loopEnd{}
	}
	d := Decode(line)
	if len(fds) > 0 {
		if !d.Batch && len(d.Messages) == 1 && d.Messages[0].IsResponse() {
			d.Messages[0].FDs = fds
		} else {
			closeFDs(fds)
		}
	}
	c.noteLastWords(d)
	if n := len(d.Messages) + len(d.Errors); d.Batch && n > c.opts.MaxBatch {
		c.protocolError(nil, &api.Error{
			Code:    api.CodeInvalidRequest,
			Message: fmt.Sprintf("batch of %d messages exceeds the limit of %d", n, c.opts.MaxBatch),
			Data:    map[string]any{"limit": c.opts.MaxBatch, "size": n},
		})
		return readOn, loopEnd{}
	}
	if d.Batch {
		c.inFlight.Add(1)
		if !r.dispatch(func() { c.serveBatch(d); c.inFlight.Add(-1) }) {
			return loopOver, loopEnd{}
		}
		return readOn, loopEnd{}
	}
	for _, e := range d.Errors {
		c.protocolError(e.ID, e.Err)
	}
	for _, m := range d.Messages {
		switch {
		case m.IsResponse():
			c.deliver(m)
		case m.IsNotification():
			c.handle(m, false) // a notification: handle closes any descriptors
		default:
			lone := c.inFlight.Add(1) == 1 && lr.Buffered() == 0
			if lone && mayInline && c.opts.InlineBudget > 0 {
				switch r.serveInline(m) {
				case servedInline:
					continue
				case leftBehind:
					return handedAway, loopEnd{}
				}
			}
			if !r.dispatch(func() { c.serveOne(m) }) {
				return loopOver, loopEnd{}
			}
		}
	}
	return readOn, loopEnd{}
}

// Results of serveInline.
const (
	notServed    = iota // this side has a call of its own waiting: dispatch
	servedInline        // served; this goroutine reads on
	leftBehind          // served, after the reading was handed off
)

// serveInline serves m, the only request of the peer's in flight and with
// nothing more read, on the reading goroutine: no hand-off to a worker
// and back. If the request outlasts the budget, or calls the peer
// (whose answer must be read), the reading is handed to a new goroutine
// (handOff) and this one leaves once the request is done (Run's
// goroutine waits for the reading to end).
func (r *reader) serveInline(m *Message) int {
	c := r.c
	// Counted before the reading can move on: the reading may end, and
	// Run wait for the handlers, before this request is done.
	c.handlers.Add(1)
	c.serving.Store(inline)
	// A call of this side's that is already waiting for its answer
	// would wait for the request too: serve it beside the reading. (A
	// call made from now on hands the reading off: Call reads serving
	// after it has entered its call in pending.)
	c.pmu.Lock()
	calls := len(c.pending)
	c.pmu.Unlock()
	if calls > 0 && c.serving.CompareAndSwap(inline, notInline) {
		c.handlers.Done()
		return notServed
	}
	// (If that swap failed, a call has handed the reading off already:
	// this goroutine serves the request, left behind.)
	r.timer.Reset(c.opts.InlineBudget)
	c.serveOne(m)
	if c.serving.CompareAndSwap(inline, notInline) {
		r.timer.Stop() // a stop that comes too late hands off the next request early, no worse
		c.handlers.Done()
		return servedInline
	}
	// Another goroutine reads now, and owns the reader; this one gives
	// back the slot the new reader counted for it, and leaves (Run's
	// goroutine waits for the reading's end). It does not join the
	// workers: a connection whose lone requests are slow would grow a
	// pool it never needs.
	r.workers.Add(-1)
	c.handlers.Done()
	return leftBehind
}

// handOff moves the reading to a new goroutine if a request is being
// served on the reading one. It is safe to call from any goroutine.
func (c *Conn) handOff() {
	if c.serving.CompareAndSwap(inline, handedOver) {
		go c.rd.carryOn()
	}
}

// refuseLine answers a line the reader skipped (err is ErrLineTooLong or
// ErrNoLineBudget).
func (c *Conn) refuseLine(lr *LineReader, err error) {
	id := RecoverID(lr.SkippedPrefix)
	if err == ErrNoLineBudget {
		budget := c.opts.LineBudget.Max()
		c.protocolError(id, &api.Error{
			Code:    api.CodeRateLimited,
			Message: fmt.Sprintf("line of %d bytes refused: the daemon's memory for long lines (%d bytes) is in use; retry later", lr.Skipped, budget),
			Data:    map[string]any{"scope": "line_memory", "limit": budget, "size": lr.Skipped},
		})
		return
	}
	limit := lr.Max()
	c.protocolError(id, &api.Error{
		Code:    api.CodeInvalidRequest,
		Message: fmt.Sprintf("line of %d bytes exceeds the limit of %d bytes", lr.Skipped, limit),
		Data:    map[string]any{"limit": limit, "size": lr.Skipped},
	})
}

// readFailed decides what a read error means for Run: again when the
// idle deadline passed on a connection with duties (read on); eof when
// the peer stopped sending (answer what was read, then close); else the
// error Run returns (nil for a closed connection).
func (c *Conn) readFailed(lr *LineReader, err error) (again, eof bool, _ error) {
	switch {
	case errors.Is(err, io.EOF):
		return false, true, nil
	case c.ctx.Err() != nil || errors.Is(err, net.ErrClosed):
		return false, false, nil
	case !errors.Is(err, os.ErrDeadlineExceeded) || lr.Deadlines == nil:
		return false, false, err
	case lr.Deadlines.InMessage():
		c.protocolError(nil, &api.Error{
			Code:    api.CodeInvalidRequest,
			Message: fmt.Sprintf("a line must arrive whole within %v of its first byte; closing", c.opts.MessageTimeout),
			Data:    map[string]any{"timeout_ms": c.opts.MessageTimeout.Milliseconds()},
		})
		return false, false, ErrMessageTimeout
	case c.busy():
		return true, false, nil // idle, but on duty: the deadline is renewed
	}
	return false, false, ErrIdle
}

// ErrIdle is returned by Run when it closed the connection for the idle
// timeout; ErrMessageTimeout when a line did not arrive in time.
var (
	ErrIdle           = errors.New("jsonrpc: connection idle")
	ErrMessageTimeout = errors.New("jsonrpc: line not received in time")
)

// lineReader builds Run's reader: with deadlines when the connection can
// take them, bounded to the gate's line limit until the gate is passed.
func (c *Conn) lineReader() (lr *LineReader, fr *fdReader, gated bool) {
	var (
		src io.Reader = c.rwc
		dl  *deadline.Reader
	)
	if mr, ok := c.rwc.(msgReader); ok && c.opts.ReceiveFDs {
		fr = newFDReader(mr)
		src = fr
	}
	if c.opts.IdleTimeout > 0 || c.opts.MessageTimeout > 0 {
		if d, ok := c.rwc.(deadline.Setter); ok {
			dl = deadline.NewReader(src, d, c.opts.IdleTimeout, c.opts.MessageTimeout)
			src = dl
		}
	}
	max := c.opts.MaxLine
	gated = c.opts.Gate != nil
	if gated && c.opts.Gate.MaxLine > 0 {
		max = min(max, c.opts.Gate.MaxLine)
	}
	lr = NewLineReader(src, max)
	// Before the gate, a line over its bound is answered as soon as the
	// bound is crossed: the connection is hung up on it anyway.
	lr.Cut = gated
	lr.Deadlines = dl
	lr.Budget = c.opts.LineBudget
	return lr, fr, gated
}

// busy reports whether the connection has duties that keep it open
// although the peer is silent.
func (c *Conn) busy() bool {
	if c.inFlight.Load() > 0 {
		return true
	}
	c.pmu.Lock()
	calls := len(c.pending)
	c.pmu.Unlock()
	if calls > 0 {
		return true
	}
	return c.opts.KeepAlive != nil && c.opts.KeepAlive()
}

// passGate serves the first line of a gated connection and reports
// whether the gate is passed.
func (c *Conn) passGate(line []byte) bool {
	method := c.opts.Gate.Method
	d := Decode(line)
	if len(d.Errors) > 0 {
		c.protocolError(d.Errors[0].ID, d.Errors[0].Err)
		return false
	}
	if d.Batch || len(d.Messages) != 1 || d.Messages[0].IsNotification() || d.Messages[0].IsResponse() {
		c.protocolError(nil, &api.Error{
			Code:    api.CodePermissionDenied,
			Message: fmt.Sprintf("authenticate first, alone: the first message must be one %s request", method),
			Data:    map[string]any{"method": method},
		})
		return false
	}
	m := d.Messages[0]
	reply, fds, ok := c.handle(m, false)
	closeFDs(fds)
	c.writeLine(reply)
	if !ok || m.Method != method {
		return false
	}
	c.gatePassed.Store(true)
	return true
}

// hangUp ends a connection after a refusal without discarding the
// refusal: it stops writing, so the peer reads the answer and then EOF,
// before the connection is closed.
func (c *Conn) hangUp() {
	if cw, ok := c.rwc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// worker runs f, then whatever the reader hands it, until work is
// closed.
func (c *Conn) worker(work <-chan func(), f func()) {
	defer c.handlers.Done()
	for {
		f()
		var ok bool
		if f, ok = <-work; !ok {
			return
		}
	}
}

func firstNonSpace(b []byte) []byte {
	for i, ch := range b {
		switch ch {
		case ' ', '\t', '\r':
			continue
		}
		return b[i:]
	}
	return nil
}

func (c *Conn) protocolError(id json.RawMessage, e *api.Error) {
	if c.opts.OnProtocolError != nil {
		c.opts.OnProtocolError(e)
	}
	c.writeLine(AppendError(nil, id, e))
}

// serveOne handles one of the peer's requests, counted in inFlight, and
// writes the reply. The request stops counting when its handler returns,
// before the reply is written, so that a request the peer sends as soon
// as it has the reply finds none in flight (and is served inline).
func (c *Conn) serveOne(m *Message) {
	reply, fds, _ := c.handle(m, false)
	c.inFlight.Add(-1)
	if reply != nil {
		c.writeLineFDs(reply, fds)
	} else {
		closeFDs(fds)
	}
}

// handle runs the handler and returns the encoded reply, or nil for a
// notification, and the descriptors to pass with it, which the caller
// must send or close; ok is false when the reply is an error. inBatch
// tells the handler (InBatch) that its reply cannot carry descriptors.
func (c *Conn) handle(m *Message, inBatch bool) (reply []byte, fds []int, ok bool) {
	var (
		result any
		err    error
	)
	func() {
		ctx, cancel := context.WithCancel(c.ctx)
		defer cancel()
		if inBatch {
			ctx = context.WithValue(ctx, batchKey{}, true)
		}
		defer func() {
			if r := recover(); r != nil {
				if c.opts.OnPanic != nil {
					c.opts.OnPanic(r, debug.Stack())
				}
				err = &api.Error{Code: api.CodeInternalError, Message: "internal error"}
			}
		}()
		if c.opts.Handler == nil {
			err = &api.Error{Code: api.CodeMethodNotFound, Message: "method not found: " + m.Method, Data: map[string]any{"method": m.Method}}
			return
		}
		result, err = c.opts.Handler.Handle(ctx, m)
	}()
	if fc, isFC := result.(FDCarrier); isFC {
		fds = fc.FDs()
	}
	if m.ID == nil {
		closeFDs(fds)
		return nil, nil, err == nil
	}
	if err != nil {
		closeFDs(fds)
		return AppendError(nil, m.ID, api.AsError(err)), nil, false
	}
	b, merr := Marshal(result)
	if merr != nil {
		closeFDs(fds)
		return AppendError(nil, m.ID, &api.Error{Code: api.CodeInternalError, Message: "encoding result: " + merr.Error()}), nil, false
	}
	return AppendResult(make([]byte, 0, len(b)+64), m.ID, b), fds, true
}

func (c *Conn) serveBatch(d Decoded) {
	replies := make([][]byte, 0, len(d.Messages)+len(d.Errors))
	for _, e := range d.Errors {
		if c.opts.OnProtocolError != nil {
			c.opts.OnProtocolError(e.Err)
		}
		replies = append(replies, AppendError(nil, e.ID, e.Err))
	}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out = make([][]byte, len(d.Messages))
		sem = make(chan struct{}, batchParallel)
	)
	for i, m := range d.Messages {
		if m.IsResponse() {
			c.deliver(m)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, fds, _ := c.handle(m, true)
			if len(fds) > 0 {
				closeFDs(fds)
				r = AppendError(nil, m.ID, &api.Error{Code: api.CodeInternalError, Message: "a reply in a batch cannot pass file descriptors"})
			}
			mu.Lock()
			out[i] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, r := range out {
		if r != nil {
			replies = append(replies, r)
		}
	}
	if len(replies) == 0 {
		return // all notifications: no reply at all
	}
	line := []byte{'['}
	for i, r := range replies {
		if i > 0 {
			line = append(line, ',')
		}
		line = append(line, r...)
	}
	c.writeLine(append(line, ']'))
}

func (c *Conn) deliver(m *Message) {
	key := IDKey(m.ID)
	// The send is under pmu (it never blocks: ch has room for the one
	// answer), so a Call that gave up and forgot its key finds any
	// answer, and its descriptors, already in ch.
	c.pmu.Lock()
	defer c.pmu.Unlock()
	ch, ok := c.pending[key]
	delete(c.pending, key)
	if !ok {
		closeFDs(m.FDs)
		return
	}
	ch <- m
}

type deadliner interface{ SetWriteDeadline(time.Time) error }

// writeLine writes one line. Lines from concurrent writers are coalesced:
// the last writer waiting flushes.
func (c *Conn) writeLine(b []byte) error {
	c.queued.Add(1)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.ctx.Err() != nil {
		c.queued.Add(-1)
		return net.ErrClosed
	}
	c.bw.Write(b)
	c.bw.WriteByte('\n')
	if c.queued.Add(-1) != 0 {
		return nil
	}
	if d, ok := c.rwc.(deadliner); ok && c.opts.WriteTimeout > 0 {
		d.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	}
	if err := c.bw.Flush(); err != nil {
		c.writeFailed(err)
		return err
	}
	return nil
}

// writeLineFDs writes one line with fds passed beside it, and closes
// fds, sent or not. Lines written before it are flushed first, and its
// first byte goes alone in the sendmsg that carries fds, so nothing but
// the line's own bytes comes with them (see fds.go).
func (c *Conn) writeLineFDs(b []byte, fds []int) error {
	if len(fds) == 0 {
		return c.writeLine(b)
	}
	defer closeFDs(fds)
	mw, ok := c.rwc.(msgWriter)
	if !ok || len(fds) > MaxFDsPerLine || len(b) == 0 {
		return c.writeLine(AppendError(nil, RecoverID(b), &api.Error{Code: api.CodeInternalError, Message: "this connection cannot pass these file descriptors"}))
	}
	c.queued.Add(1)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.ctx.Err() != nil {
		c.queued.Add(-1)
		return net.ErrClosed
	}
	if d, ok := c.rwc.(deadliner); ok && c.opts.WriteTimeout > 0 {
		d.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	}
	err := c.bw.Flush()
	if err == nil {
		var n int
		n, _, err = mw.WriteMsgUnix(b[:1], syscall.UnixRights(fds...), nil)
		if err == nil && n != 1 {
			err = io.ErrShortWrite
		}
	}
	if err != nil {
		c.queued.Add(-1)
		c.writeFailed(err)
		return err
	}
	c.bw.Write(b[1:])
	c.bw.WriteByte('\n')
	if c.queued.Add(-1) != 0 {
		return nil
	}
	if err := c.bw.Flush(); err != nil {
		c.writeFailed(err)
		return err
	}
	return nil
}

// writeFailed ends a connection whose write failed.
func (c *Conn) writeFailed(err error) {
	if peerGone(err) {
		c.closeAfterGone()
	} else {
		c.Close()
	}
}

// ErrClosed is returned by Call when the connection closed before the
// peer answered. It wraps net.ErrClosed, so callers that know nothing of
// this package can test for it.
var ErrClosed = fmt.Errorf("jsonrpc: connection closed: %w", net.ErrClosed)

// ClosedError is what Call fails with when the peer's last message before
// the connection closed was an error with a null id: the reason it hung
// up (pcpd refusing a connection over a limit, a line that did not arrive
// in time). It reads as that error and matches both it and ErrClosed
// with errors.Is and errors.As.
type ClosedError struct {
	Reason *api.Error
}

func (e *ClosedError) Error() string   { return e.Reason.Error() }
func (e *ClosedError) Unwrap() []error { return []error{e.Reason, ErrClosed} }

// noteLastWords keeps d as the peer's last words if it is a single error
// response with a null id, and forgets earlier ones otherwise.
func (c *Conn) noteLastWords(d Decoded) {
	var e *api.Error
	if !d.Batch && len(d.Messages) == 1 && len(d.Errors) == 0 {
		if m := d.Messages[0]; m.IsResponse() && m.Error != nil && string(m.ID) == "null" {
			e = m.Error
		}
	}
	if e != nil || c.lastWords.Load() != nil {
		c.lastWords.Store(e)
	}
}

// closeError is what a call fails with once the connection has closed.
func (c *Conn) closeError() error {
	e := c.lastWords.Load()
	if e == nil {
		return ErrClosed
	}
	return &ClosedError{Reason: e}
}

// goneGrace bounds how long a connection whose peer has gone is read on
// for what the peer sent before it went.
const goneGrace = time.Second

// peerGone reports a write that failed because the peer closed its end.
func peerGone(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// closeAfterGone handles a write that found the peer gone. Closing at
// once would discard what the peer wrote before it hung up and is still
// unread (pcpd's refusal of a connection over a limit), so Run reads on
// to the end, and the connection is closed after goneGrace regardless.
func (c *Conn) closeAfterGone() {
	c.gone.Do(func() { time.AfterFunc(goneGrace, func() { c.Close() }) })
}

// Call sends a request and decodes the result into result (which may be
// nil or a *json.RawMessage). An error response is returned as *api.Error.
// Descriptors that came with the answer are closed.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	fds, err := c.CallFDs(ctx, method, params, result)
	closeFDs(fds)
	return err
}

// CallFDs is Call that also returns the file descriptors that came with
// a successful answer's line (Options.ReceiveFDs), in the order sent; the
// caller owns them. On error none are returned (any that came are
// closed).
func (c *Conn) CallFDs(ctx context.Context, method string, params, result any) ([]int, error) {
	var pb []byte
	if params != nil {
		var err error
		if pb, err = Marshal(params); err != nil {
			return nil, fmt.Errorf("jsonrpc: encoding %s params: %w", method, err)
		}
	}
	n := c.nextID.Add(1)
	id := json.RawMessage(strconv.AppendInt(nil, n, 10))
	ch := make(chan *Message, 1)
	key := IDKey(id)
	c.pmu.Lock()
	if c.ctx.Err() != nil {
		c.pmu.Unlock()
		return nil, c.closeError()
	}
	c.pending[key] = ch
	c.pmu.Unlock()
	// The answer must be read while the reading goroutine may be
	// serving a request (perhaps the one making this call).
	c.handOff()
	if err := c.writeLine(AppendRequest(nil, id, method, pb)); err != nil {
		c.forget(key, ch)
		// The peer may have hung up with a reason still to be read
		// (read here if no one else reads).
		if _, _, err := c.await(ctx, nil); err != nil {
			return nil, err
		}
		return nil, c.closeError()
	}
	m, ok, err := c.await(ctx, ch)
	switch {
	case err != nil:
		c.forget(key, ch)
		return nil, err
	case !ok:
		return nil, c.closeError()
	}
	{
		if m.Error != nil {
			closeFDs(m.FDs)
			return nil, m.Error
		}
		if result == nil {
			return m.FDs, nil
		}
		if r, ok := result.(*json.RawMessage); ok {
			*r = m.Result
			return m.FDs, nil
		}
		if err := json.Unmarshal(m.Result, result); err != nil {
			closeFDs(m.FDs)
			return nil, fmt.Errorf("jsonrpc: decoding %s result: %w", method, err)
		}
		return m.FDs, nil
	}
}

// await waits for the answer in ch (ok false: the connection closed
// first) or the end of ctx. While the connection reads on demand, it
// takes the reading token when no other call holds it and reads for
// itself (readFor). A nil ch waits for the connection to close.
func (c *Conn) await(ctx context.Context, ch chan *Message) (m *Message, ok bool, err error) {
	for c.onDemand.Load() && ctx.Err() == nil {
		select {
		case m, ok = <-ch:
			return m, ok, nil
		case <-ctx.Done():
		case <-c.done:
			return c.answerAfterClose(ch)
		case c.rtok <- struct{}{}:
			c.readFor(ctx, ch)
		}
	}
	select {
	case m, ok = <-ch:
		return m, ok, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	case <-c.done:
		return c.answerAfterClose(ch)
	}
}

// answerAfterClose is an answer that made it into ch before the
// connection closed, if any.
func (c *Conn) answerAfterClose(ch chan *Message) (*Message, bool, error) {
	select {
	case m, ok := <-ch:
		return m, ok, nil
	default:
		return nil, false, nil
	}
}

// readFor reads and serves lines on the calling goroutine, holding the
// reading token, until ch has its answer, ctx ends (which interrupts a
// read in progress with a past read deadline; the line reader keeps what
// it had), or the connection is to read in the background. It gives the
// token back, the read deadline cleared, except when the reading has
// ended: then it keeps it, so nobody reads again, and hands the end to
// Run.
func (c *Conn) readFor(ctx context.Context, ch chan *Message) {
	r := c.rd
	stop := noInterrupt
	if ctx.Done() != nil { // a context that can end
		stop = c.interruptOnDone(ctx)
	}
	ended := false
	for !ended && len(ch) == 0 && ctx.Err() == nil && c.onDemandStill() {
		// An interrupted step comes back to the loop's test: ctx has
		// ended (only its AfterFunc sets a read deadline).
		if st, end := r.step(false); st == loopOver {
			r.ended <- end
			ended = true
		}
	}
	stop()
	if !ended {
		<-c.rtok
	}
}

func noInterrupt() {}

// interruptOnDone makes the end of ctx interrupt this connection's read
// in progress (a read deadline in the past). The function it returns
// undoes it: once it has returned, no interruption is pending and the
// read deadline is cleared.
func (c *Conn) interruptOnDone(ctx context.Context) (stop func()) {
	dl := c.rwc.(readDeadliner)
	var interrupting sync.WaitGroup
	interrupting.Add(1)
	stopAfter := context.AfterFunc(ctx, func() {
		defer interrupting.Done()
		dl.SetReadDeadline(time.Unix(1, 0))
	})
	return func() {
		if !stopAfter() {
			interrupting.Wait()
			dl.SetReadDeadline(time.Time{})
		}
	}
}

// onDemandStill reports whether calls are still to read for themselves.
func (c *Conn) onDemandStill() bool {
	select {
	case <-c.bg:
		return false
	default:
		return true
	}
}

// forget gives up on the call of key: once it is out of pending no
// answer can arrive (deliver sends under pmu), so one that did is in ch,
// and its descriptors are closed.
func (c *Conn) forget(key string, ch chan *Message) {
	c.pmu.Lock()
	delete(c.pending, key)
	c.pmu.Unlock()
	select {
	case m, ok := <-ch:
		if ok {
			closeFDs(m.FDs)
		}
	default:
	}
}

// Notify sends a notification.
func (c *Conn) Notify(method string, params any) error {
	var pb []byte
	if params != nil {
		var err error
		if pb, err = Marshal(params); err != nil {
			return fmt.Errorf("jsonrpc: encoding %s params: %w", method, err)
		}
	}
	return c.writeLine(AppendRequest(nil, nil, method, pb))
}
