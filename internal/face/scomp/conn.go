package scomp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"

	"github.com/coder/websocket"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// conn is one scomp connection: its core session and, once the
// handshake is done, its sandbox and the client's bindings.
//
// Two goroutines serve it: the reader (readLoop) reads every frame,
// answers the ones that are no valid message, hands replies to the
// reverse invokes waiting for them and queues requests; the worker (run)
// handles the queued requests in order, so evals run one at a time.
// While an eval waits for the client's answer to a reverse invoke, the
// worker serves the requests that need no VM of their own (anything but
// eval and handshake, which wait their turn): no side waits on the
// other.
type conn struct {
	s         *Server
	ws        *websocket.Conn
	sess      *core.Session
	transport map[string]any

	sessionID string
	box       *sandbox // nil until the handshake
	// events buffers the events of the session's subscription, opened
	// at the handshake, for nextEvent.
	events *eventBuffer
	// reserved is the heap the connection reserved of
	// Options.MemoryTotal (0: none, as in FuzzHandle).
	reserved int
	clients  map[string]*clientBinding

	// requests carries the reader's requests to the worker; done is
	// closed when the reader ends. Both are nil when no reader runs
	// (FuzzHandle).
	requests chan *jsonrpc.Message
	done     chan struct{}
	// backlog holds the evals and handshakes that arrived while an eval
	// waited for the client, in order; only the worker uses it.
	backlog []*jsonrpc.Message

	mu      sync.Mutex
	nextID  int64
	pending map[string]chan *jsonrpc.Message // by the server's request id
}

// maxQueued bounds the requests queued on one connection; one more is
// answered RATE_LIMITED at once.
const maxQueued = 64

func randomSessionID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "sess_" + hex.EncodeToString(b)
}

func (c *conn) close() {
	if c.box != nil {
		c.box.close()
	}
	c.sess.Close()
	c.ws.CloseNow()
}

// run serves the connection until it ends: the reader runs beside it,
// and the worker handles the requests in order. When the reader ends
// (the client went, or a binary frame), ctx is cancelled, which
// interrupts the eval running; its answer is dropped.
func (c *conn) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.requests = make(chan *jsonrpc.Message, maxQueued)
	c.done = make(chan struct{})
	c.pending = map[string]chan *jsonrpc.Message{}
	var rerr error
	go func() {
		defer close(c.done)
		defer cancel()
		rerr = c.readLoop(ctx)
	}()
	defer func() {
		c.ws.CloseNow()
		<-c.done
	}()
	for {
		var m *jsonrpc.Message
		if len(c.backlog) > 0 {
			m, c.backlog = c.backlog[0], c.backlog[1:]
		} else {
			select {
			case m = <-c.requests:
			case <-c.done:
				return rerr
			}
		}
		if err := c.reply(ctx, m); err != nil {
			return err
		}
	}
}

// reply answers one request, writing the answer.
func (c *conn) reply(ctx context.Context, m *jsonrpc.Message) error {
	out := c.answer(ctx, m)
	if out == nil {
		return nil
	}
	return c.write(ctx, out)
}

func (c *conn) write(ctx context.Context, b []byte) error {
	if c.ws == nil {
		return errors.New("no transport")
	}
	return c.ws.Write(ctx, websocket.MessageText, b)
}

// readLoop reads frames until the connection ends. A binary frame closes
// it with 1003.
func (c *conn) readLoop(ctx context.Context) error {
	for {
		typ, data, err := c.ws.Read(ctx)
		if err != nil {
			return err
		}
		if typ == websocket.MessageBinary {
			c.ws.Close(websocket.StatusUnsupportedData, "binary frames are not scomp: send one JSON-RPC message per text frame")
			return errors.New("binary frame")
		}
		out, m := c.frame(data)
		if m != nil {
			if m.IsResponse() {
				c.deliver(m)
				continue
			}
			select {
			case c.requests <- m:
				continue
			default:
				if m.ID == nil {
					continue
				}
				out = jsonrpc.AppendError(nil, m.ID, api.Errorf(api.CodeRateLimited, map[string]any{"scope": "queue", "limit": maxQueued},
					"too many requests queued on this connection (%d): wait for answers", maxQueued))
			}
		}
		if out != nil {
			if err := c.write(ctx, out); err != nil {
				return err
			}
		}
	}
}

// deliver hands a response to the reverse invoke waiting for it. A
// response to no outstanding request of the server's is logged and
// dropped: ids are the server's own in this direction.
func (c *conn) deliver(m *jsonrpc.Message) {
	key := string(bytes.TrimSpace(m.ID))
	c.mu.Lock()
	ch, ok := c.pending[key]
	delete(c.pending, key)
	c.mu.Unlock()
	if !ok {
		c.s.opts.Logger.Debug("scomp: a response to no request of the server's", "id", key)
		return
	}
	ch <- m
}

// frame decodes one text frame: either an answer to send at once (a
// batch, bad JSON) or one message.
func (c *conn) frame(data []byte) ([]byte, *jsonrpc.Message) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		return jsonrpc.AppendError(nil, nil, api.Errorf(api.CodeInvalidRequest, nil,
			"batches are not part of scomp: send one JSON-RPC message per text frame")), nil
	}
	d := jsonrpc.Decode(data)
	if len(d.Errors) > 0 {
		return jsonrpc.AppendError(nil, d.Errors[0].ID, d.Errors[0].Err), nil
	}
	return nil, d.Messages[0]
}

// handle answers one text frame at once; nil means no answer.
func (c *conn) handle(ctx context.Context, data []byte) []byte {
	out, m := c.frame(data)
	if m == nil {
		return out
	}
	if m.IsResponse() {
		c.deliver(m)
		return nil
	}
	return c.answer(ctx, m)
}

// answer runs one request or notification; nil means no answer.
func (c *conn) answer(ctx context.Context, m *jsonrpc.Message) []byte {
	if m.IsNotification() {
		if m.Method == "release_ref" {
			c.releaseRef(m.Params)
		} else {
			c.s.opts.Logger.Debug("scomp: a request without an id is ignored", "method", m.Method)
		}
		return nil
	}
	result, err := c.call(ctx, m)
	if err != nil {
		return appendErr(m.ID, err)
	}
	raw, merr := jsonrpc.Marshal(result)
	if merr != nil {
		return jsonrpc.AppendError(nil, m.ID, api.Errorf(api.CodeInternalError, nil, "cannot encode the result: %v", merr))
	}
	return jsonrpc.AppendResult(nil, m.ID, raw)
}

func appendErr(id json.RawMessage, err error) []byte {
	var ee *evalError
	if errors.As(err, &ee) {
		out := struct {
			Code    int       `json:"code"`
			Message string    `json:"message"`
			Data    evalError `json:"data"`
		}{evalErrorCode, ee.Message, *ee}
		raw, _ := jsonrpc.Marshal(out)
		buf := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
		buf = append(buf, `,"error":`...)
		buf = append(buf, raw...)
		return append(buf, '}')
	}
	var pe *api.Error
	if !errors.As(err, &pe) {
		pe = api.Errorf(api.CodeInternalError, nil, "%v", err)
	}
	return jsonrpc.AppendError(nil, id, pe)
}

// call runs one request.
func (c *conn) call(ctx context.Context, m *jsonrpc.Message) (any, error) {
	switch m.Method {
	case "handshake":
		return c.handshake(ctx, m.Params)
	case "eval":
		if c.box == nil {
			return nil, api.Errorf(api.CodeInvalidRequest, nil, "eval before handshake: the session is not live yet")
		}
		var p struct {
			Code *string `json:"code"`
		}
		if err := decodeParams(m.Params, &p); err != nil {
			return nil, err
		}
		if p.Code == nil {
			return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"param": "code"}, "eval needs params.code, a string of JavaScript")
		}
		v, err := c.box.eval(ctx, *p.Code)
		if err != nil {
			return nil, err
		}
		return struct {
			Value json.RawMessage `json:"value"`
		}{v}, nil
	case "invoke":
		return c.invokeRef(ctx, m.Params)
	case "release_ref":
		return nil, api.Errorf(api.CodeInvalidRequest, map[string]any{"method": m.Method},
			"release_ref is a notification: send it without an id")
	}
	return nil, api.Errorf(api.CodeMethodNotFound, map[string]any{"method": m.Method}, "unknown method %q", m.Method)
}

func decodeParams(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		return api.Errorf(api.CodeInvalidParams, nil, "params: %v", err)
	}
	return nil
}
