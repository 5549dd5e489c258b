// Package stream is the framed face of spec 001 on the client socket: a
// u8 type tag and a u32 big-endian length before each JSON payload (see
// internal/frame and docs/framed.md). It accepts exactly the six client
// requests the spec lists, answers each with its reply frame or an
// ErrorResponse, and pushes events as PushEvent frames. Like every face,
// it decodes, calls one core method and encodes.
//
// Requests on one connection are served one at a time, in order, and
// each gets exactly one reply frame, so replies correlate with requests
// by their order; PushEvent frames may come between them. A client that
// wants requests served concurrently opens more connections.
package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/attach"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/deadline"
	"github.com/pcp-dev/pcp/internal/frame"
)

// Options configure the face.
type Options struct {
	// MaxPayload bounds one frame's payload; 0 means frame.DefaultMaxPayload.
	MaxPayload int
	// IdleTimeout closes a connection that sends nothing for this long
	// while it holds no subscription (requests are served one at a
	// time, so none is in flight while the face waits); 0 means never.
	IdleTimeout time.Duration
	// MessageTimeout bounds the arrival of one frame, header and payload
	// (a skipped one included), from its first byte; 0 means no bound.
	MessageTimeout time.Duration
	// MaxUnreadAttachments bounds, per connection, the bytes of the
	// attachments passed as memfds that the peer may not have read; 0
	// means attach.DefaultMaxUnread (see attach.Budget).
	MaxUnreadAttachments int64
	Logger               *slog.Logger
}

// Server serves the framed face of one broker.
type Server struct {
	b    *core.Broker
	opts Options
}

// NewServer returns the framed face for b.
func NewServer(b *core.Broker, opts Options) *Server {
	if opts.MaxPayload <= 0 {
		opts.MaxPayload = frame.DefaultMaxPayload
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{b: b, opts: opts}
}

// conn is one framed connection; it is its session's event sink.
// wmu serialises frame writes (replies and pushes).
type conn struct {
	rwc io.ReadWriteCloser
	// mw and budget pass memfds on a Unix socket; nil elsewhere.
	mw     frame.MsgWriter
	budget *attach.Budget
	// cancel ends the context of the request being served: closing the
	// connection cancels it.
	cancel    context.CancelFunc
	wmu       sync.Mutex
	closeOnce sync.Once
}

func (c *conn) write(t frame.Type, payload []byte) error {
	return c.writeFDs(t, payload, nil)
}

// writeFDs writes a frame with fds passed beside it (frame.WriteFDs) and
// closes fds, sent or not: once sendmsg returns, the socket holds them
// until the peer reads them, and the kernel frees them if it never does.
func (c *conn) writeFDs(t frame.Type, payload []byte, fds []int) error {
	defer attach.CloseFDs(fds)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if d, ok := c.rwc.(interface{ SetWriteDeadline(time.Time) error }); ok {
		d.SetWriteDeadline(time.Now().Add(time.Minute))
	}
	if len(fds) > 0 && c.mw != nil {
		return frame.WriteFDs(c.mw, frame.Frame{Type: t, Payload: payload}, fds)
	}
	return frame.Write(c.rwc, frame.Frame{Type: t, Payload: payload})
}

// Event implements core.EventSink: a PushEvent frame. ev.Data, the
// event's members as one encoded object, goes in as it is.
func (c *conn) Event(subID string, ev *api.Event) error {
	return c.push(&api.PushEvent{SubscriptionID: subID, Sequence: ev.Sequence,
		Event: api.PushedDetail{Type: ev.Type, Timestamp: ev.Timestamp, Data: ev.Data}})
}

// EventsLost implements core.EventSink: a PushEvent of type events.lost
// whose data is {"lost": n}; it has no sequence of its own.
func (c *conn) EventsLost(m *api.EventsLost) error {
	data, err := json.Marshal(struct {
		Lost int64 `json:"lost"`
	}{m.Lost})
	if err != nil {
		return err
	}
	return c.push(&api.PushEvent{SubscriptionID: m.SubscriptionID,
		Event: api.PushedDetail{Type: api.NotifyEventsLost, Timestamp: m.Timestamp, Data: data}})
}

// SubscriptionEnded implements core.EventSink: a PushEvent of type
// subscription.ended whose data is {"reason": why}.
func (c *conn) SubscriptionEnded(m *api.SubscriptionEnded) error {
	data, err := json.Marshal(struct {
		Reason string `json:"reason"`
	}{m.Reason})
	if err != nil {
		return err
	}
	return c.push(&api.PushEvent{SubscriptionID: m.SubscriptionID,
		Event: api.PushedDetail{Type: api.NotifySubscriptionEnded, Timestamp: m.Timestamp, Data: data}})
}

func (c *conn) push(p *api.PushEvent) error {
	b, err := marshal(p)
	if err != nil {
		return err
	}
	return c.write(frame.PushEvent, b)
}

// CloseWhenIdle stops reading: the request being served is answered,
// then the read loop sees EOF and the connection closes (a daemon's
// graceful shutdown).
func (c *conn) CloseWhenIdle() {
	if cr, ok := c.rwc.(interface{ CloseRead() error }); ok && cr.CloseRead() == nil {
		return
	}
	c.Close()
}

// Close ends the connection; it is the session's core.Endpoint Closer.
func (c *conn) Close() error {
	var err error
	c.closeOnce.Do(func() { c.cancel(); err = c.rwc.Close() })
	return err
}

// ServeConn serves one accepted connection until it closes.
func (s *Server) ServeConn(rwc io.ReadWriteCloser, info core.SessionInfo) error {
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &conn{rwc: rwc, cancel: cancel}
	if mw, ok := rwc.(frame.MsgWriter); ok {
		if sc, ok := rwc.(syscall.Conn); ok {
			c.mw, c.budget = mw, attach.NewBudget(sc, s.opts.MaxUnreadAttachments)
		}
	}
	// The client socket serves no app and no adapter (Tier 1 apps have
	// their own sockets): it offers events alone.
	sess := s.b.OpenSession(info, core.Endpoint{Events: c, Closer: c})
	defer sess.Close()
	ctx := withBudget(core.WithSession(base, sess), c.budget)
	var (
		src io.Reader = rwc
		dl  *deadline.Reader
	)
	if d, ok := rwc.(deadline.Setter); ok && (s.opts.IdleTimeout > 0 || s.opts.MessageTimeout > 0) {
		dl = deadline.NewReader(rwc, d, s.opts.IdleTimeout, s.opts.MessageTimeout)
		src = dl
	}
	r := frame.NewReader(src, s.opts.MaxPayload)
	for {
		if dl != nil {
			// The Reader buffers nothing above dl: a frame begins with
			// the next byte read.
			dl.Begin(false)
		}
		f, err := r.Next()
		if dl != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			if !dl.InMessage() && sess.OnDuty() {
				continue // a subscriber waiting for events
			}
			if dl.InMessage() {
				c.write(frame.ErrorResponse, errorPayload(api.Errorf(api.CodeInvalidRequest,
					map[string]any{"timeout_ms": s.opts.MessageTimeout.Milliseconds()},
					"a frame must arrive whole within %v of its first byte; closing", s.opts.MessageTimeout)))
			}
			return nil
		}
		var (
			tooLarge *frame.TooLargeError
			unknown  *frame.UnknownTypeError
		)
		switch {
		case err == nil:
		case errors.As(err, &tooLarge):
			c.write(frame.ErrorResponse, errorPayload(api.Errorf(api.CodeInvalidRequest,
				map[string]any{"type": tooLarge.Type.String(), "size": tooLarge.Length, "limit": tooLarge.Max},
				"%s frame of %d bytes exceeds the limit of %d bytes", tooLarge.Type, tooLarge.Length, tooLarge.Max)))
			continue
		case errors.As(err, &unknown):
			c.write(frame.ErrorResponse, errorPayload(api.Errorf(api.CodeMethodNotFound, map[string]any{"tag": unknown.Tag},
				"unsupported message type: tag %d", unknown.Tag)))
			if !unknown.Skipped {
				// Its length cannot be trusted: the stream is lost.
				hangUp(rwc)
				return nil
			}
			continue
		case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			return nil
		default:
			return err
		}
		t, payload, fds := s.handle(ctx, f)
		if err := c.writeFDs(t, payload, fds); err != nil {
			return nil
		}
	}
}

// handle serves one request frame and returns the reply frame, and the
// descriptors to pass with it (its attachments), which the caller owns.
// A panic is logged with its stack and answered with a plain
// INTERNAL_ERROR.
func (s *Server) handle(ctx context.Context, f frame.Frame) (rt frame.Type, rp []byte, fds []int) {
	var (
		t   frame.Type
		v   any
		err error
	)
	defer func() {
		if r := recover(); r != nil {
			s.opts.Logger.Error("recovered from a panic in a handler", "frame", f.Type.String(), "panic", r, "stack", string(debug.Stack()))
			attach.CloseFDs(fds)
			rt, rp, fds = frame.ErrorResponse, errorPayload(&api.Error{Code: api.CodeInternalError, Message: "internal error"}), nil
		}
	}()
	switch f.Type {
	case frame.Ping:
		t = frame.Pong
		v, err = s.pong(ctx)
	case frame.RegistryQuery:
		t = frame.RegistryResponse
		v, err = s.registry(ctx, f.Payload)
	case frame.DetectRequest:
		t = frame.DetectResponse
		v, err = s.detect(ctx, f.Payload)
	case frame.ExecuteRequest:
		t = frame.ExecuteResponse
		var r *executeReply
		r, err = s.execute(ctx, f.Payload)
		if r != nil {
			v, fds = r, r.fds
		}
	case frame.SubscribeEvents:
		// The acknowledgement reuses the request's tag (spec 001 names no
		// reply type for it).
		t = frame.SubscribeEvents
		v, err = s.subscribe(ctx, f.Payload)
	case frame.UnsubscribeEvents:
		t = frame.UnsubscribeEvents
		v, err = s.unsubscribe(ctx, f.Payload)
	default:
		err = api.Errorf(api.CodeMethodNotFound, map[string]any{"type": f.Type.String()}, "unsupported message type: %s", f.Type)
	}
	if err != nil {
		return frame.ErrorResponse, errorPayload(err), nil
	}
	b, merr := marshal(v)
	if merr != nil {
		attach.CloseFDs(fds)
		return frame.ErrorResponse, errorPayload(fmt.Errorf("encoding %s: %w", t, merr)), nil
	}
	return t, b, fds
}

// decode reads a JSON payload into v; an empty payload is an empty
// object.
func decode(payload []byte, v any) error {
	payload = bytes.TrimSpace(payload)
	if len(payload) == 0 {
		return nil
	}
	if payload[0] != '{' {
		return &api.Error{Code: api.CodeInvalidParams, Message: "payload must be a JSON object", Data: map[string]any{"field": "payload"}}
	}
	if err := json.Unmarshal(payload, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return api.InvalidParam(te.Field, "wrong type: JSON %s", te.Value)
		}
		return &api.Error{Code: api.CodeInvalidParams, Message: "payload: " + err.Error(), Data: map[string]any{"field": "payload"}}
	}
	return nil
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// errorPayload is the ErrorResponse payload of err, through the one
// error catalogue.
func errorPayload(err error) []byte {
	e := api.AsError(err)
	info, _ := e.Code.Info()
	msg := e.Message
	if msg == "" {
		msg = info.Message
	}
	b, merr := marshal(api.ErrorResponse{Code: info.StreamCode, Message: msg, PCPCode: int(e.Code), Name: info.Name, Data: e.Data})
	if merr != nil {
		b, _ = marshal(api.ErrorResponse{Code: info.StreamCode, Message: msg, PCPCode: int(e.Code), Name: info.Name})
	}
	return b
}

// hangUp ends a connection whose stream is lost without resetting it:
// it stops writing, so the peer reads the error already sent and then
// EOF, and drains what the peer still has in flight (briefly, and at most
// 1 MiB) so that closing does not discard the error with a reset.
func hangUp(rwc io.ReadWriteCloser) {
	if cw, ok := rwc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	if d, ok := rwc.(interface{ SetReadDeadline(time.Time) error }); ok {
		d.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		io.Copy(io.Discard, io.LimitReader(rwc, 1<<20))
	}
}
