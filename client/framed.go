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
//
// On a Unix socket it reads with recvmsg, so an ExecuteResponse's
// attachments arrive as the memfds passed with its frame
// (docs/framed.md, "Attachments"); every descriptor that comes with any
// other frame is closed.
type Framed struct {
	conn net.Conn
	// fr reads a Unix socket, r any other connection; one is set.
	fr *frame.FDReader
	r  *frame.Reader

	mu     sync.Mutex // one request at a time; guards fr, r and events
	events []json.RawMessage
}

// maxFramedPayload bounds a frame the client accepts: an ExecuteResponse
// with attachments inline (api.InlineAttachmentLimit, in base64) fits.
const maxFramedPayload = 16 << 20

// DialFramed connects to the daemon's socket ("" means DefaultSocket())
// and speaks frames on it.
func DialFramed(ctx context.Context, path string) (*Framed, error) {
	c, err := dialUnix(ctx, path)
	if err != nil {
		return nil, err
	}
	return NewFramed(c), nil
}

// NewFramed speaks frames on c, which it owns from now on.
func NewFramed(c net.Conn) *Framed {
	if mr, ok := c.(frame.MsgReader); ok {
		return &Framed{conn: c, fr: frame.NewFDReader(mr, maxFramedPayload)}
	}
	return &Framed{conn: c, r: frame.NewReader(bufio.NewReader(c), maxFramedPayload)}
}

// Close closes the connection, and the descriptors received for frames
// not yet read.
func (f *Framed) Close() error {
	err := f.conn.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fr != nil {
		f.fr.Close()
	}
	return err
}

// next reads the next frame and the descriptors that came with it.
func (f *Framed) next() (frame.Frame, []int, error) {
	if f.fr != nil {
		return f.fr.Next()
	}
	fr, err := f.r.Next()
	return fr, nil, err
}

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
// Descriptors that come with the reply are closed.
func (f *Framed) Request(ctx context.Context, t frame.Type, payload, reply any) (frame.Type, error) {
	return f.request(ctx, t, payload, func(fr frame.Frame, _ []int) error {
		if reply == nil {
			return nil
		}
		if err := json.Unmarshal(fr.Payload, reply); err != nil {
			return fmt.Errorf("pcp: decoding %s: %w", fr.Type, err)
		}
		return nil
	})
}

// request sends a frame as Request does and hands the reply frame and
// the descriptors that came with it to decode, then closes them.
func (f *Framed) request(ctx context.Context, t frame.Type, payload any, decode func(frame.Frame, []int) error) (frame.Type, error) {
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
		fr, fds, err := f.next()
		if err != nil {
			return 0, ctxErr(ctx, err)
		}
		if fr.Type != frame.ExecuteResponse {
			closeFDs(fds)
			fds = nil
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
		err = decode(fr, fds)
		closeFDs(fds)
		return fr.Type, err
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
	return f.ExecuteRequest(ctx, &api.ExecuteRequest{Capability: capability, Params: params, Admin: admin})
}

// ExecuteRequest sends req and returns the CapabilityResult, its
// Attachments filled with their bytes: read from the memfds that came
// with the frame, or decoded from the inline base64. As
// Client.InvokeCapability does, it refuses (INTERNAL_ERROR) an
// attachment whose descriptor is missing, is not a memory file sealed
// against shrinking, or whose size differs; it closes every descriptor.
func (f *Framed) ExecuteRequest(ctx context.Context, req *api.ExecuteRequest) (*api.CapabilityResult, error) {
	var res *api.CapabilityResult
	_, err := f.request(ctx, frame.ExecuteRequest, req, func(fr frame.Frame, fds []int) error {
		if fr.Type != frame.ExecuteResponse {
			return fmt.Errorf("pcp: ExecuteRequest answered with %s", fr.Type)
		}
		var r struct {
			Result *wireResult `json:"result"`
		}
		if err := json.Unmarshal(fr.Payload, &r); err != nil {
			return api.Errorf(api.CodeInternalError, nil, "decoding the ExecuteResponse: %v", err)
		}
		if r.Result == nil {
			return errors.New("pcp: ExecuteResponse without a result")
		}
		var err error
		res, err = fromWire(r.Result, fds)
		return err
	})
	return res, err
}
