package sdk

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/tier1"
)

// handlers bounds and tracks the request goroutines of one Serve call,
// across its connections. A connection that ends does not wait for its
// handlers: their contexts are cancelled and Serve reconnects at once. A
// handler that ignores its context goes on until it returns, holding its
// slot in running, so that stuck handlers, however many connections
// come and go, never exceed MaxConcurrentRequests and a new connection's
// requests wait for a slot (or their deadline) like any others.
type handlers struct {
	running chan struct{}  // a token per handler running
	wg      sync.WaitGroup // every request goroutine; Serve waits for it
}

func newHandlers() *handlers {
	return &handlers{running: make(chan struct{}, MaxConcurrentRequests)}
}

// conn is one connection to a per-app socket.
//
// Concurrency: serve runs on Serve's goroutine and is the only reader of
// nc. Each request it admits runs on its own goroutine, tracked by
// handlers, which may outlive the connection; they send nothing once it
// has ended. wmu serializes writes to nc; fmu guards failErr. Handlers
// never hold wmu while calling PcpServer.
type conn struct {
	appID       string
	prefix      string // appID + "."
	srv         PcpServer
	nc          net.Conn
	socket      string
	manifest    json.RawMessage // sent verbatim in every ManifestResponse
	log         *slog.Logger
	onConnected func(socket string)
	// stopOnShutdown is Options.StopOnShutdown.
	stopOnShutdown bool
	handlers       *handlers

	// ctx is cancelled when the connection ends; every handler's context
	// derives from it.
	ctx    context.Context
	cancel context.CancelFunc
	// admitted holds a token per request of this connection read and
	// not yet answered.
	admitted chan struct{}

	wmu sync.Mutex

	fmu     sync.Mutex
	failErr error // why a write ended the connection, if one did
}

// serve reads and dispatches the daemon's frames until the connection
// ends, and cancels the handlers it started without waiting for them.
// connected reports whether the handshake (GetManifest answered)
// happened.
func (c *conn) serve(parent context.Context) (connected bool, err error) {
	c.ctx, c.cancel = context.WithCancel(parent)
	c.admitted = make(chan struct{}, MaxPendingRequests)
	stop := context.AfterFunc(c.ctx, func() { c.nc.Close() })
	defer func() {
		// Close before cancelling, so that a handler ended by the
		// cancellation sends nothing on a connection that is over.
		c.nc.Close()
		c.cancel()
		stop()
	}()

	c.nc.SetReadDeadline(time.Now().Add(handshakeTimeout))
	fr := frame.NewReader(bufio.NewReader(c.nc), tier1.MaxPayload)
	fr.FailFast() // the daemon never sends a larger frame: no use reading it
	for {
		f, err := fr.Next()
		if err != nil {
			return connected, c.readError(err, connected)
		}
		msg, err := tier1.Decode(f.Type, f.Payload)
		if err != nil {
			return connected, c.protocolError(err)
		}
		switch m := msg.(type) {
		case *tier1.Ping:
			// Answered here, not on a handler's goroutine, so that a
			// liveness check never waits for busy handlers.
			if err := c.send(&tier1.Pong{}); err != nil {
				return connected, err
			}
		case *tier1.GetManifest:
			if err := c.send(&tier1.ManifestResponse{AppID: c.appID, Manifest: c.manifest}); err != nil {
				return connected, err
			}
			if !connected {
				connected = true
				c.nc.SetReadDeadline(time.Time{})
				c.log.Info("serving on the per-app socket")
				if c.onConnected != nil {
					c.onConnected(c.socket)
				}
			}
		case *tier1.AppShutdown:
			if !connected {
				// Refused before any handshake: another connection serves
				// the app. Not a shutdown of this app; try again later.
				c.log.Info("pcpd refused the connection", "reason", m.Reason)
				return connected, fmt.Errorf("sdk: pcpd refused the connection to %s: %s", c.socket, m.Reason)
			}
			return connected, c.shutdown(parent, m.Reason)
		case *tier1.InvokeCapability, *tier1.ValidateParamsMsg, *tier1.QueryState:
			if !connected {
				return connected, c.protocolError(fmt.Errorf("%s before GetManifest", f.Type))
			}
			if !c.admit(msg) {
				return connected, c.ended()
			}
		default:
			return connected, c.protocolError(fmt.Errorf("unexpected %s from the daemon", f.Type))
		}
	}
}

// admit starts a goroutine for request msg, waiting while
// MaxPendingRequests are outstanding. It reports false when the
// connection ended first.
func (c *conn) admit(msg any) bool {
	select {
	case c.admitted <- struct{}{}:
	case <-c.ctx.Done():
		return false
	}
	// The deadline runs from the request's arrival, time spent waiting
	// for a free handler included.
	ctx, cancel := c.ctx, context.CancelFunc(func() {})
	if m, ok := msg.(*tier1.InvokeCapability); ok && m.DeadlineMS > 0 {
		ctx, cancel = context.WithTimeout(c.ctx, time.Duration(m.DeadlineMS)*time.Millisecond)
	}
	c.handlers.wg.Add(1)
	go func() {
		defer c.handlers.wg.Done()
		defer func() { <-c.admitted }()
		defer cancel()
		c.handle(ctx, msg)
	}()
	return true
}

// handle runs one request when a handler slot is free and sends its reply.
func (c *conn) handle(ctx context.Context, msg any) {
	select {
	case c.handlers.running <- struct{}{}:
	case <-ctx.Done():
		if c.ctx.Err() == nil { // the deadline passed while it waited
			c.reply(msg, c.errorReply(msg, ctx.Err()))
		}
		return
	}
	reply, err := c.call(ctx, msg)
	<-c.handlers.running
	if err != nil {
		c.log.Debug("request failed", "request", describe(msg), "err", err)
		reply = c.errorReply(msg, err)
	}
	c.reply(msg, reply)
}

// call runs PcpServer's method for msg and returns the reply, or the
// error to report in its place. A panic is recovered as INTERNAL_ERROR.
func (c *conn) call(ctx context.Context, msg any) (reply tier1.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("handler panicked", "request", describe(msg), "panic", p, "stack", string(debug.Stack()))
			reply, err = nil, api.Errorf(api.CodeInternalError, nil, "%s panicked: %v", describe(msg), p)
		}
	}()
	switch m := msg.(type) {
	case *tier1.InvokeCapability:
		name, err := c.capabilityName(m.CapabilityID)
		if err != nil {
			return nil, err
		}
		res, err := c.srv.Invoke(ctx, &Invocation{CapabilityID: m.CapabilityID, Name: name, Source: m.Source, Params: m.Params})
		if err != nil {
			return nil, err
		}
		out := &tier1.CapabilityResultMsg{RequestID: m.RequestID, Status: api.StatusSuccess}
		if res != nil {
			if res.Status != "" {
				out.Status = res.Status
			}
			out.Data = res.Data
		}
		return out, nil
	case *tier1.ValidateParamsMsg:
		if _, err := c.capabilityName(m.CapabilityID); err != nil {
			return nil, err
		}
		if err := c.srv.ValidateParams(ctx, m.CapabilityID, m.Params); err != nil {
			return nil, err
		}
		return &tier1.ValidateResultMsg{RequestID: m.RequestID, Valid: true}, nil
	case *tier1.QueryState:
		st, err := c.srv.QueryState(ctx, m.Keys)
		if err != nil {
			return nil, err
		}
		if len(st) == 0 {
			st = json.RawMessage(`{}`)
		}
		return &tier1.StateResponse{RequestID: m.RequestID, State: st}, nil
	}
	panic(fmt.Sprintf("sdk: call with %T", msg)) // admit takes requests only
}

// capabilityName returns the name of the capability id, which must be one
// of this app's.
func (c *conn) capabilityName(id string) (string, error) {
	name, ok := strings.CutPrefix(id, c.prefix)
	if !ok || name == "" {
		return "", api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": id}, "%s is not a capability of %s", id, c.appID)
	}
	return name, nil
}

// errorReply returns the reply to request msg that reports err.
// StateResponse has no error field: its state is {"error": message}.
func (c *conn) errorReply(msg any, err error) tier1.Message {
	switch m := msg.(type) {
	case *tier1.InvokeCapability:
		return &tier1.CapabilityResultMsg{RequestID: m.RequestID, Error: errorInfo(err)}
	case *tier1.ValidateParamsMsg:
		return &tier1.ValidateResultMsg{RequestID: m.RequestID, Error: errorInfo(err)}
	case *tier1.QueryState:
		c.log.Warn("state query failed", "err", err)
		ei := errorInfo(err)
		if ei.Message == "" {
			ei.Message = api.Code(ei.Code).Name()
		}
		st, _ := json.Marshal(map[string]string{"error": ei.Message})
		return &tier1.StateResponse{RequestID: m.RequestID, State: st}
	}
	panic(fmt.Sprintf("sdk: errorReply to %T", msg))
}

// errorInfo converts a handler's error to the ErrorInfo sent: an
// *api.Error as it is, a deadline as EXECUTION_TIMEOUT, anything else as
// INTERNAL_ERROR.
func errorInfo(err error) *tier1.ErrorInfo {
	var pe *api.Error
	if !errors.As(err, &pe) && errors.Is(err, context.DeadlineExceeded) {
		err = api.Errorf(api.CodeExecutionTimeout, nil, "%v", err)
	}
	ei := tier1.ErrorInfoOf(err)
	if ei.Code == 0 {
		ei.Code = int32(api.CodeInternalError)
	}
	ei.Message = strings.ToValidUTF8(ei.Message, "\uFFFD")
	return ei
}

// reply sends the reply to msg. A reply that cannot be encoded (an
// invalid status, data that is not JSON, a payload over the limit) is
// replaced by an error reply saying so. Once the connection is ending
// nothing is sent: a handler cut short by its end has nothing to say.
func (c *conn) reply(msg any, reply tier1.Message) {
	if c.ctx.Err() != nil {
		return
	}
	err := c.send(reply)
	var pe *api.Error
	if errors.As(err, &pe) { // tier1.Encode refused it; nothing was written
		c.log.Error("reply not sendable", "request", describe(msg), "err", err)
		err = c.send(c.errorReply(msg, api.Errorf(api.CodeInternalError, nil, "reply to %s not sendable: %s", describe(msg), pe.Message)))
	}
	if err != nil {
		c.log.Debug("reply not sent", "request", describe(msg), "err", err)
	}
}

// send encodes m and writes it as one frame. An encoding error is
// tier1.Encode's *api.Error; a write error ends the connection.
func (c *conn) send(m tier1.Message) error {
	b, err := tier1.Encode(m)
	if err != nil {
		return err
	}
	f := frame.Frame{Type: m.Type(), Payload: b}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err := frame.Write(c.nc, f); err != nil {
		err = fmt.Errorf("sdk: writing %s to %s: %w", f.Type, c.socket, err)
		c.fmu.Lock()
		if c.failErr == nil {
			c.failErr = err
		}
		c.fmu.Unlock()
		c.nc.Close()
		return err
	}
	return nil
}

// ended returns why this side ended the connection: the write error
// that closed it, or the cancellation of its context; nil if neither
// happened.
func (c *conn) ended() error {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	if c.failErr != nil {
		return c.failErr
	}
	return c.ctx.Err()
}

// readError describes why reading the connection failed.
func (c *conn) readError(err error, connected bool) error {
	if e := c.ended(); e != nil {
		return e
	}
	var tooLarge *frame.TooLargeError
	var unknown *frame.UnknownTypeError
	switch {
	case errors.As(err, &tooLarge), errors.As(err, &unknown):
		return c.protocolError(err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("sdk: pcpd closed %s", c.socket)
	case !connected && errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("sdk: no GetManifest from pcpd on %s within %s", c.socket, handshakeTimeout)
	}
	return fmt.Errorf("sdk: reading %s: %w", c.socket, err)
}

// protocolError logs a frame the daemon should not have sent; the
// connection is then closed and Serve reconnects.
func (c *conn) protocolError(err error) error {
	c.log.Warn("protocol error from pcpd; closing the connection", "err", err)
	return fmt.Errorf("sdk: protocol error on %s: %w", c.socket, err)
}

// shutdown handles an AppShutdown after the handshake: it calls
// PcpServer.Shutdown and returns a *ShutdownError, which ends Serve when
// Options.StopOnShutdown is set and is retried otherwise. The caller
// closes the connection.
func (c *conn) shutdown(ctx context.Context, reason string) error {
	c.log.Info("pcpd shut the app down", "reason", reason, "stop", c.stopOnShutdown)
	ctx, cancel := context.WithTimeout(ctx, shutdownTimeout)
	defer cancel()
	if err := c.srv.Shutdown(ctx, reason); err != nil {
		c.log.Warn("shutdown failed", "err", err)
	}
	return &ShutdownError{Reason: reason}
}

// describe names request msg for logs and error messages.
func describe(msg any) string {
	switch m := msg.(type) {
	case *tier1.InvokeCapability:
		return fmt.Sprintf("invoke %s (request %d)", m.CapabilityID, m.RequestID)
	case *tier1.ValidateParamsMsg:
		return fmt.Sprintf("validate_params %s (request %d)", m.CapabilityID, m.RequestID)
	case *tier1.QueryState:
		return fmt.Sprintf("query_state (request %d)", m.RequestID)
	}
	return fmt.Sprintf("%T", msg)
}
