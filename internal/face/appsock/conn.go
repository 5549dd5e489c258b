package appsock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/tier1"
)

// conn is one app's connection on its per-app socket, and the endpoint
// of the session that serves the app (see endpoint). The broker's calls
// become Tier 1 requests: Invoke an InvokeCapability, Ping a Ping;
// ValidateParams, QueryState and Shutdown are the optional parts of the
// contract (core.ParamsValidator, core.StateQuerier, core.Shutdowner).
//
// Requests carry a RequestID from a per-connection counter; replies are
// matched by it, in any order. Ping has no id: Pongs answer Pings in
// order, so waiters queue. One goroutine reads; writers take wmu.
type conn struct {
	srv      *Server
	as       *appSocket
	c        *net.UnixConn
	uid, pid int

	wmu sync.Mutex // serialises frame writes

	// mu guards the fields below.
	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]chan any
	pings    []chan struct{}
	manifest chan *tier1.ManifestResponse // non-nil during the handshake
	sess     *core.Session
	closed   bool
	// refusal is why another connection ended cn's handshake (refuse),
	// kicked closed when it is set.
	refusal string
	kicked  chan struct{}
	// cause is why the connection closed, given to calls still waiting.
	cause error
	done  chan struct{} // closed when the connection starts to end
	ended chan struct{} // closed when it has ended

	// answered is set once the app answered GetManifest, serving once
	// it is registered; guarded by Server.mu, which admits connections by
	// them.
	answered, serving bool
	// handshakeTimeout is the Server's, set when cn is admitted.
	handshakeTimeout time.Duration
}

func newConn(s *Server, as *appSocket, c *net.UnixConn, uid, pid int) *conn {
	return &conn{srv: s, as: as, c: c, uid: uid, pid: pid, pending: map[uint64]chan any{}, done: make(chan struct{}), ended: make(chan struct{}), kicked: make(chan struct{})}
}

// errGone is the cause of a connection that ended without a protocol
// error: the app closed it or crashed. It wraps net.ErrClosed, which the
// broker reports as APP_UNRESPONSIVE.
var errGone = fmt.Errorf("per-app connection closed: %w", net.ErrClosed)

// serve runs the connection: handshake, registration, then replies until
// it closes. A connection admitted with a refusal is told it and closed.
func (cn *conn) serve(refusal string) {
	log := cn.srv.log.With("app_id", cn.as.appID, "pid", cn.pid)
	if refusal != "" {
		log.Warn("refused a per-app connection", "reason", refusal)
		cn.end(refusal, nil)
		return
	}
	defer cn.end("", nil)
	defer cn.srv.leaveHandshake(cn)
	mch := make(chan *tier1.ManifestResponse, 1)
	cn.mu.Lock()
	cn.manifest = mch
	cn.mu.Unlock()
	go cn.readLoop()

	if err := cn.write(tier1.GetManifest{}); err != nil {
		return
	}
	mr, why := cn.awaitManifest(mch)
	if mr == nil {
		if why != "" {
			log.Info("per-app connection ended in the handshake", "reason", why)
			cn.end(why, nil)
		} else {
			log.Info("per-app connection closed during the handshake", "reason", cn.err())
		}
		return
	}
	cn.srv.answered(cn)
	if mr.AppID != cn.as.appID {
		cn.end(fmt.Sprintf("the manifest is for app %q; this socket is for %q", mr.AppID, cn.as.appID), nil)
		return
	}
	if !cn.register(log, mr) {
		return
	}
	log.Info("app serving on its per-app socket")
	<-cn.done
	log.Info("per-app connection closed", "reason", cn.err())
}

// awaitManifest waits for the app's ManifestResponse. Without one it
// returns why the daemon ends the connection, or "" when the connection
// ended by itself.
func (cn *conn) awaitManifest(mch <-chan *tier1.ManifestResponse) (*tier1.ManifestResponse, string) {
	t := time.NewTimer(cn.handshakeTimeout)
	defer t.Stop()
	select {
	case mr := <-mch:
		return mr, ""
	case <-cn.done:
		return nil, ""
	case <-cn.kicked:
		return nil, cn.kickReason()
	case <-t.C:
		return nil, fmt.Sprintf("no ManifestResponse within %s", cn.handshakeTimeout)
	}
}

// register makes cn the app's server: it claims the app, opens the
// session and registers the manifest, one connection of the socket at a
// time. It reports whether cn now serves the app; if not, cn has ended.
func (cn *conn) register(log *slog.Logger, mr *tier1.ManifestResponse) bool {
	select {
	case cn.as.register <- struct{}{}:
	case <-cn.done:
		return false
	case <-cn.kicked:
		cn.end(cn.kickReason(), nil)
		return false
	}
	defer func() { <-cn.as.register }()
	prev, ok := cn.srv.claim(cn)
	if !ok {
		log.Warn("refused a second connection for an app already served")
		cn.end(alreadyServed(cn.as.appID), nil)
		return false
	}
	if prev != nil {
		<-prev.ended // bounded: end takes at most about a second
	}
	sess := cn.srv.b.OpenSession(core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: cn.uid, PID: cn.pid}, cn.endpoint())
	cn.mu.Lock()
	closed := cn.closed
	if !closed {
		cn.sess = sess
	}
	cn.mu.Unlock()
	if closed { // ended while claiming: end did not see the session
		sess.Close()
		return false
	}
	ctx := core.WithSession(context.Background(), sess)
	if _, err := cn.srv.b.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: cn.as.appID, Manifest: mr.Manifest}); err != nil {
		e := api.AsError(err)
		log.Warn("per-app registration refused", "err", e.Message)
		cn.end(fmt.Sprintf("registration refused: %s: %s", e.Code.Name(), e.Message), nil)
		return false
	}
	cn.srv.registered(cn)
	return true
}

// refuse ends cn's handshake with reason, told to the app: it lost to
// another connection or was displaced by newer ones. A connection past
// its handshake ignores it.
func (cn *conn) refuse(reason string) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.refusal == "" && !cn.closed {
		cn.refusal = reason
		close(cn.kicked)
	}
}

func (cn *conn) kickReason() string {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.refusal
}

// readLoop reads replies until the connection fails, then closes it.
func (cn *conn) readLoop() {
	// Buffered: a frame is then one read, not two (header, payload).
	r := frame.NewReader(bufio.NewReader(cn.c), tier1.MaxPayload)
	r.FailFast()
	for {
		f, err := r.Next()
		if err != nil {
			var tl *frame.TooLargeError
			var ut *frame.UnknownTypeError
			switch {
			case errors.As(err, &tl):
				cn.protocolError(fmt.Sprintf("%s frame of %d bytes over the %d-byte limit", tl.Type, tl.Length, tl.Max))
			case errors.As(err, &ut):
				cn.protocolError(err.Error())
			default:
				cn.end("", errGone)
			}
			return
		}
		msg, err := tier1.Decode(f.Type, f.Payload)
		if err != nil {
			cn.protocolError(fmt.Sprintf("%s: %s", f.Type, api.AsError(err).Message))
			return
		}
		if !cn.deliver(msg) {
			cn.protocolError(fmt.Sprintf("unexpected %s from the app", f.Type))
			return
		}
	}
}

// deliver hands a reply to whoever waits for it. A reply nobody waits
// for (its request timed out) is dropped; a message that is not a reply
// the daemon could be waiting for is a protocol error (false).
func (cn *conn) deliver(msg any) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	var id uint64
	switch m := msg.(type) {
	case *tier1.ManifestResponse:
		if cn.manifest == nil {
			return false
		}
		cn.manifest <- m
		cn.manifest = nil
		return true
	case *tier1.Pong:
		if len(cn.pings) == 0 {
			return false
		}
		cn.pings[0] <- struct{}{}
		cn.pings = cn.pings[1:]
		return true
	case *tier1.CapabilityResultMsg:
		id = m.RequestID
	case *tier1.ValidateResultMsg:
		id = m.RequestID
	case *tier1.StateResponse:
		id = m.RequestID
	default:
		return false
	}
	if id == 0 || id > cn.nextID {
		return false // never asked
	}
	if ch := cn.pending[id]; ch != nil {
		delete(cn.pending, id)
		ch <- msg
	}
	return true
}

// protocolError ends a connection whose app broke the Tier 1 protocol:
// calls in flight fail with INTERNAL_ERROR (an adapter failure, 500 on
// the framed face) naming what the app did, and the app is told why.
func (cn *conn) protocolError(what string) {
	cn.srv.log.Warn("per-app protocol error", "app_id", cn.as.appID, "err", what)
	cn.end("protocol error: "+what, api.Errorf(api.CodeInternalError, map[string]any{"app_id": cn.as.appID, "reason": what},
		"app %s broke the Tier 1 protocol (%s); its connection was closed", cn.as.appID, what))
}

// write sends one message, bounded by WriteTimeout.
func (cn *conn) write(m tier1.Message) error { return cn.writeWithin(m, WriteTimeout) }

func (cn *conn) writeWithin(m tier1.Message, timeout time.Duration) error {
	p, err := tier1.Encode(m)
	if err != nil {
		return err
	}
	cn.wmu.Lock()
	cn.c.SetWriteDeadline(time.Now().Add(timeout))
	err = frame.Write(cn.c, frame.Frame{Type: m.Type(), Payload: p})
	cn.wmu.Unlock()
	if err != nil {
		cn.end("", errGone)
		return cn.err()
	}
	return nil
}

// request sends a request with a fresh RequestID (set by mk) and waits
// for its reply, ctx or the end of the connection.
func (cn *conn) request(ctx context.Context, mk func(id uint64) tier1.Message) (any, error) {
	ch := make(chan any, 1)
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return nil, cn.cause
	}
	cn.nextID++
	id := cn.nextID
	cn.pending[id] = ch
	cn.mu.Unlock()
	forget := func() {
		cn.mu.Lock()
		delete(cn.pending, id)
		cn.mu.Unlock()
	}
	if err := cn.write(mk(id)); err != nil {
		forget()
		return nil, err
	}
	select {
	case m := <-ch:
		return m, nil
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	case <-cn.done:
		forget()
		return nil, cn.err()
	}
}

// endpoint is what the connection offers the core: the whole PcpServer
// contract, and neither adapter queries nor events (Tier 1 carries no
// notifications).
func (cn *conn) endpoint() core.Endpoint {
	return core.Endpoint{App: cn, Validate: cn, State: cn, Shutdown: cn, Closer: cn}
}

// Invoke implements core.AppChannel: an InvokeCapability request.
func (cn *conn) Invoke(ctx context.Context, p *api.InvokeCapabilityParams) (*api.CapabilityResult, error) {
	var deadline uint32
	if d, ok := ctx.Deadline(); ok {
		// The time left, rounded up to 100 ms: a 30 s timeout reads as
		// 30000 rather than as however many ms are left once the
		// request is encoded.
		ms := (time.Until(d).Milliseconds() + 99) / 100 * 100
		deadline = uint32(min(max(ms, 100), 1<<32-1))
	}
	m, err := cn.request(ctx, func(id uint64) tier1.Message {
		return tier1.InvokeCapability{RequestID: id, CapabilityID: p.CapabilityID, Source: p.Source, Params: p.Params, DeadlineMS: deadline}
	})
	if err != nil {
		return nil, err
	}
	return m.(*tier1.CapabilityResultMsg).Result()
}

// Ping implements core.AppChannel: a Ping, answered by a Pong.
func (cn *conn) Ping(ctx context.Context) error {
	ch := make(chan struct{}, 1)
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return cn.cause
	}
	// A waiter that gives up stays queued: the Pong that answers its Ping
	// must still be matched to it, not to a later Ping.
	cn.pings = append(cn.pings, ch)
	cn.mu.Unlock()
	if err := cn.write(tier1.Ping{}); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-cn.done:
		return cn.err()
	}
}

// ValidateParams implements core.ParamsValidator.
func (cn *conn) ValidateParams(ctx context.Context, capabilityID string, params json.RawMessage) error {
	m, err := cn.request(ctx, func(id uint64) tier1.Message {
		return tier1.ValidateParamsMsg{RequestID: id, CapabilityID: capabilityID, Params: params}
	})
	if err != nil {
		return err
	}
	v := m.(*tier1.ValidateResultMsg)
	if v.Valid {
		return nil
	}
	return v.Error.Err()
}

// QueryState implements core.StateQuerier.
func (cn *conn) QueryState(ctx context.Context, keys []string) (json.RawMessage, error) {
	m, err := cn.request(ctx, func(id uint64) tier1.Message {
		return tier1.QueryState{RequestID: id, Keys: keys}
	})
	if err != nil {
		return nil, err
	}
	return m.(*tier1.StateResponse).State, nil
}

// Shutdown implements core.Shutdowner: AppShutdown, then close.
func (cn *conn) Shutdown(reason string) error {
	cn.end(reason, nil)
	return nil
}

// Close implements the endpoint's Closer.
func (cn *conn) Close() error {
	cn.end("", nil)
	return nil
}

// end closes the connection once, in an order that lets the app come
// straight back: calls in flight fail with cause (errGone when nil), the
// session closes so the app is no longer served by this connection, the
// socket is free for a new connection, and only then is the app told why
// (AppShutdown, when reason is set; an app that does not take the frame
// within a second is closed all the same) and the connection closed.
func (cn *conn) end(reason string, cause error) {
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return
	}
	cn.closed = true
	if cause == nil {
		cause = errGone
	}
	cn.cause = cause
	sess := cn.sess
	cn.mu.Unlock()
	close(cn.done)
	if sess != nil {
		sess.Close() // calls Close, which returns at once
	}
	cn.srv.release(cn)
	if reason != "" {
		cn.writeWithin(tier1.AppShutdown{Reason: reason}, time.Second)
	}
	cn.c.Close()
	close(cn.ended)
}

func (cn *conn) isClosed() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.closed
}

func (cn *conn) err() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.cause
}
