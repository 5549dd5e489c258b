package scomp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/coder/websocket"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// conn is one scomp connection: its core session and, once the
// handshake is done, its sandbox. Only the connection's goroutine uses
// it.
type conn struct {
	s         *Server
	ws        *websocket.Conn
	sess      *core.Session
	transport map[string]any

	sessionID string
	box       *sandbox // nil until the handshake
}

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

// run reads, handles and answers one message at a time until the
// connection ends. A binary frame closes it with 1003.
func (c *conn) run(ctx context.Context) error {
	for {
		typ, data, err := c.ws.Read(ctx)
		if err != nil {
			return err
		}
		if typ == websocket.MessageBinary {
			c.ws.Close(websocket.StatusUnsupportedData, "binary frames are not scomp: send one JSON-RPC message per text frame")
			return errors.New("binary frame")
		}
		reply := c.handle(ctx, data)
		if reply == nil {
			continue
		}
		if err := c.ws.Write(ctx, websocket.MessageText, reply); err != nil {
			return err
		}
	}
}

// handle answers one text frame; nil means no answer.
func (c *conn) handle(ctx context.Context, data []byte) []byte {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		return jsonrpc.AppendError(nil, nil, api.Errorf(api.CodeInvalidRequest, nil,
			"batches are not part of scomp: send one JSON-RPC message per text frame"))
	}
	d := jsonrpc.Decode(data)
	if len(d.Errors) > 0 {
		return jsonrpc.AppendError(nil, d.Errors[0].ID, d.Errors[0].Err)
	}
	m := d.Messages[0]
	switch {
	case m.IsResponse():
		// No request of the server's is outstanding in this version.
		c.s.opts.Logger.Debug("scomp: a response to no request", "id", string(m.ID))
		return nil
	case m.IsNotification():
		if m.Method != "release_ref" {
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
	case "invoke", "release_ref":
		return nil, api.Errorf(api.CodeMethodNotFound, map[string]any{"method": m.Method},
			"%s is not served yet: this server declares no function references", m.Method)
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
