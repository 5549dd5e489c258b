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
// handled concurrently, each on its own goroutine. Notifications are
// handled one at a time on the read loop, in the order they arrived, so
// Handle must return promptly for them. Each call gets its own ctx,
// cancelled when it returns or when the connection closes. For a
// notification the result is discarded. An error that is not an
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
// Concurrency: Call, Notify and Close may be called from any goroutine.
// Run owns the read loop; it must be called exactly once.
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
	// inFlight counts the peer's requests (batches count once) dispatched
	// and not yet answered; the idle timeout spares a connection with any.
	inFlight atomic.Int32

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
	ctx, cancel := context.WithCancel(context.Background())
	return &Conn{
		rwc:     rwc,
		opts:    opts,
		ctx:     ctx,
		cancel:  cancel,
		bw:      bufio.NewWriterSize(rwc, 32<<10),
		pending: make(map[string]chan *Message),
		done:    make(chan struct{}),
	}
}

// Context is cancelled when the connection closes.
func (c *Conn) Context() context.Context { return c.ctx }

// Done is closed when the connection has closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// CloseWhenIdle stops reading from the peer and closes the connection
// once the requests already read have been answered: a handler may call
// it to end its own connection after its reply.
func (c *Conn) CloseWhenIdle() {
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
	// Requests are served by a pool of worker goroutines that outlive
	// one request, so a busy connection does not pay for a new goroutine
	// (and the growth of its stack) per request. Run is the only sender on
	// work; closing it lets idle workers exit.
	work := make(chan func())
	workers := 0
	// eof is set when the peer stopped sending: the requests already read
	// are answered before the connection closes. Any other end (a broken
	// connection, a timeout, Close) cancels their contexts first.
	eof := false
	defer func() {
		if !eof {
			c.Close()
		}
		close(work)
		c.handlers.Wait()
		c.Close()
	}()
	dispatch := func(f func()) bool {
		select {
		case work <- f: // an idle worker took it
			return true
		default:
		}
		if workers < c.opts.MaxInFlight {
			workers++
			c.handlers.Add(1)
			go c.worker(work, f)
			return true
		}
		select { // every worker is busy: stop reading until one is free
		case work <- f:
			return true
		case <-c.ctx.Done():
			return false
		}
	}
	lr, fr, gated := c.lineReader()
	if fr != nil {
		defer fr.fds.CloseAll()
	}
	// lineNo numbers the lines ReadLine consumes, blank and skipped ones
	// included, to claim each line's descriptors.
	var lineNo int64
	lineFDs := func() []int {
		lineNo++
		if fr == nil {
			return nil
		}
		return fr.fds.Take(lineNo - 1)
	}
	if gated && c.opts.Gate.Timeout > 0 {
		t := time.AfterFunc(c.opts.Gate.Timeout, func() {
			if !c.gatePassed.Load() {
				c.Close()
			}
		})
		defer t.Stop()
	}
	for {
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
			eof = true
			return nil
		}
		if err == ErrNoLineBudget || err == ErrLineTooLong {
			closeFDs(lineFDs())
			c.refuseLine(lr, err)
			if gated && !c.gatePassed.Load() {
				c.hangUp() // the gate's message was not what it must be
				eof = true
				return nil
			}
			continue
		}
		if err != nil {
			var again bool
			if again, eof, err = c.readFailed(lr, err); again {
				continue
			}
			return err
		}
		fds := lineFDs()
		if len(firstNonSpace(line)) == 0 {
			closeFDs(fds)
			continue // blank lines are keep-alives
		}
		if gated && !c.gatePassed.Load() {
			closeFDs(fds)
			if !c.passGate(line) {
				c.hangUp()
				eof = true
				return nil
			}
			lr.SetMax(c.opts.MaxLine)
			lr.Cut = false
			continue
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
			continue
		}
		if d.Batch {
			c.inFlight.Add(1)
			if !dispatch(func() { c.serveBatch(d); c.inFlight.Add(-1) }) {
				return nil
			}
			continue
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
				c.inFlight.Add(1)
				if !dispatch(func() { c.serveOne(m); c.inFlight.Add(-1) }) {
					return nil
				}
			}
		}
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

// worker runs f, then whatever Run hands it, until work is closed.
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

// serveOne handles a request or notification and writes the reply.
func (c *Conn) serveOne(m *Message) {
	reply, fds, _ := c.handle(m, false)
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
	if err := c.writeLine(AppendRequest(nil, id, method, pb)); err != nil {
		c.forget(key, ch)
		// The peer may have hung up with a reason still to be read.
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return nil, c.closeError()
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, c.closeError()
		}
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
	case <-ctx.Done():
		c.forget(key, ch)
		return nil, ctx.Err()
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
