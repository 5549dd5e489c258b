package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/frame"
)

// Framed is a client of the framed face (spec 001): tag and length before
// each JSON payload. Requests are answered in order, one reply frame
// each; PushEvent frames that arrive meanwhile are kept for Events.
// Methods may be called concurrently; requests are sent one at a time.
type Framed struct {
	conn net.Conn
	r    *frame.Reader

	mu     sync.Mutex // one request at a time; guards r
	events []json.RawMessage
}

// DialFramed connects to the daemon's socket ("" means DefaultSocket())
// and speaks frames on it.
func DialFramed(ctx context.Context, path string) (*Framed, error) {
	c, err := dialUnix(ctx, path)
	if err != nil {
		return nil, err
	}
	return &Framed{conn: c, r: frame.NewReader(bufio.NewReader(c), 16<<20)}, nil
}

// Close closes the connection.
func (f *Framed) Close() error { return f.conn.Close() }

// FrameError is an ErrorResponse as received: the stream code beside the
// PCP error.
type FrameError struct {
	Status uint16
	Err    *api.Error
}

func (e *FrameError) Error() string { return fmt.Sprintf("%v (stream code %d)", e.Err, e.Status) }

// Unwrap gives the PCP error, so errors.Is and errors.As see PCP codes.
func (e *FrameError) Unwrap() error { return e.Err }

// Request sends a frame of type t with payload (encoded as JSON, nil for
// none) and decodes the reply into reply, which may be nil. It returns
// the reply's type; an ErrorResponse is returned as *FrameError.
func (f *Framed) Request(ctx context.Context, t frame.Type, payload, reply any) (frame.Type, error) {
	var b []byte
	if payload != nil {
		var err error
		if b, err = json.Marshal(payload); err != nil {
			return 0, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		f.conn.SetDeadline(dl)
	} else {
		f.conn.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { f.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := frame.Write(f.conn, frame.Frame{Type: t, Payload: b}); err != nil {
		return 0, ctxErr(ctx, err)
	}
	for {
		fr, err := f.r.Next()
		if err != nil {
			return 0, ctxErr(ctx, err)
		}
		switch fr.Type {
		case frame.PushEvent, frame.EventNotification:
			f.events = append(f.events, append(json.RawMessage(nil), fr.Payload...))
			continue
		case frame.ErrorResponse:
			var e api.ErrorResponse
			if err := json.Unmarshal(fr.Payload, &e); err != nil {
				return fr.Type, fmt.Errorf("pcp: undecodable ErrorResponse: %w", err)
			}
			pe := &api.Error{Code: api.Code(e.PCPCode), Message: e.Message, Data: e.Data}
			return fr.Type, &FrameError{Status: e.Code, Err: pe}
		}
		if reply != nil {
			if err := json.Unmarshal(fr.Payload, reply); err != nil {
				return fr.Type, fmt.Errorf("pcp: decoding %s: %w", fr.Type, err)
			}
		}
		return fr.Type, nil
	}
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Events returns and forgets the PushEvent payloads received so far.
func (f *Framed) Events() []json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev := f.events
	f.events = nil
	return ev
}

// Ping sends Ping and returns the Pong.
func (f *Framed) Ping(ctx context.Context) (*api.Pong, error) {
	var p api.Pong
	t, err := f.Request(ctx, frame.Ping, nil, &p)
	if err == nil && t != frame.Pong {
		err = fmt.Errorf("pcp: Ping answered with %s", t)
	}
	return &p, err
}

// RegistryQuery sends a RegistryQuery.
func (f *Framed) RegistryQuery(ctx context.Context, query *api.RegistryQuery) (*api.RegistryResponse, error) {
	var r api.RegistryResponse
	_, err := f.Request(ctx, frame.RegistryQuery, query, &r)
	return &r, err
}

// Execute sends an ExecuteRequest and returns the CapabilityResult.
func (f *Framed) Execute(ctx context.Context, capability string, params json.RawMessage, admin bool) (*api.CapabilityResult, error) {
	var r api.ExecuteResponse
	req := &api.ExecuteRequest{Capability: capability, Params: params, Admin: admin}
	if _, err := f.Request(ctx, frame.ExecuteRequest, req, &r); err != nil {
		return nil, err
	}
	if r.Result == nil {
		return nil, errors.New("pcp: ExecuteResponse without a result")
	}
	return r.Result, nil
}
