package scomp

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// DefaultInvokeTimeout bounds the client's answer to one reverse invoke.
const DefaultInvokeTimeout = 30 * time.Second

// clientBinding is a binding the client declared, with its compiled
// schemas (nil: any value).
type clientBinding struct {
	Binding
	input, output *jsonschema.Schema
}

// invokeParams are the params of the server's invoke request.
type invokeParams struct {
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// invokeClient calls the client's binding name with input (JSON text):
// the argument is checked against the binding's input schema, sent as
// an invoke request with the server's next id, and the answer waited
// for (at most the invoke timeout, and never past ctx, the eval's) and
// checked against the output schema. While it waits, the worker serves
// the client's requests that need no VM of their own.
func (c *conn) invokeClient(ctx context.Context, name, input string) (json.RawMessage, *api.Error) {
	cb, ok := c.clients[name]
	if !ok {
		return nil, api.Errorf(api.CodeCapabilityNotFound, map[string]any{"binding": name}, "no client binding %q", name)
	}
	if err := validate(cb.input, input); err != nil {
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"binding": name, "param": "input"},
			"client binding %q: the argument does not match its input schema: %v", name, err)
	}
	params, _ := jsonrpc.Marshal(invokeParams{Name: name, Input: json.RawMessage(input)})
	ch := make(chan *jsonrpc.Message, 1)
	c.mu.Lock()
	c.nextID++
	id := strconv.FormatInt(c.nextID, 10)
	if c.pending == nil {
		c.pending = map[string]chan *jsonrpc.Message{}
	}
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.write(ctx, jsonrpc.AppendRequest(nil, json.RawMessage(id), "invoke", params)); err != nil {
		return nil, api.Errorf(api.CodeInternalError, map[string]any{"binding": name}, "cannot send the invoke of client binding %q: %v", name, err)
	}
	timeout := c.s.opts.InvokeTimeout
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case m := <-ch:
			if m.Error != nil {
				data := map[string]any{"binding": name}
				if m.Error.Data != nil {
					data["data"] = m.Error.Data
				}
				return nil, &api.Error{Code: m.Error.Code, Message: "client binding " + strconv.Quote(name) + " failed: " + m.Error.Message, Data: data}
			}
			out := m.Result
			if len(bytes.TrimSpace(out)) == 0 {
				out = json.RawMessage("null")
			}
			if err := validate(cb.output, string(out)); err != nil {
				return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"binding": name, "param": "output"},
					"client binding %q answered a value that does not match its output schema: %v", name, err)
			}
			return out, nil
		case <-timer.C:
			return nil, api.Errorf(api.CodeExecutionTimeout, map[string]any{"binding": name, "timeout_ms": timeout.Milliseconds()},
				"client binding %q did not answer within %v", name, timeout)
		case <-ctx.Done():
			return nil, api.Errorf(api.CodeExecutionTimeout, map[string]any{"binding": name}, "the eval's time ran out during the call")
		case <-c.done:
			return nil, api.Errorf(api.CodeInternalError, map[string]any{"binding": name}, "the connection ended during the call")
		case m := <-c.requests:
			if m.Method == "eval" || m.Method == "handshake" {
				c.backlog = append(c.backlog, m)
				continue
			}
			if err := c.reply(ctx, m); err != nil {
				return nil, api.Errorf(api.CodeInternalError, map[string]any{"binding": name}, "the connection ended during the call: %v", err)
			}
		}
	}
}

// validate checks the JSON text v against sch (nil: anything goes).
func validate(sch *jsonschema.Schema, v string) error {
	if sch == nil {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(v))
	if err != nil {
		return err
	}
	return sch.Validate(doc)
}

// MaxRefs bounds the function references a session has handed out and
// the client has not released.
const MaxRefs = 1024

// refParams are the params of the client's invoke of a function
// reference.
type refParams struct {
	Ref   *string         `json:"ref"`
	Input json.RawMessage `json:"input"`
}

// invokeRef runs the client's invoke of a function reference the
// sandbox handed out: the function is called with the input and
// awaited. Inside an eval (the client invoking while the server waits
// for it) it runs on the eval's VM and within its time; otherwise it is
// bounded as an eval is.
func (c *conn) invokeRef(ctx context.Context, raw json.RawMessage) (any, error) {
	if c.box == nil {
		return nil, api.Errorf(api.CodeInvalidRequest, nil, "invoke before handshake: the session is not live yet")
	}
	var p refParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	if p.Ref == nil {
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"param": "ref"},
			"invoke needs params.ref, a function reference the server handed out")
	}
	input := string(bytes.TrimSpace(p.Input))
	if input == "" {
		input = "null"
	}
	v, err := c.box.callRef(ctx, *p.Ref, input)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// releaseRef frees one function reference; an unknown one is ignored.
func (c *conn) releaseRef(raw json.RawMessage) {
	var p refParams
	if c.box == nil || json.Unmarshal(raw, &p) != nil || p.Ref == nil || c.box.vm == nil {
		c.s.opts.Logger.Debug("scomp: release_ref of nothing", "params", string(raw))
		return
	}
	if _, err := c.box.vm.Call("__scomp_release", *p.Ref); err != nil {
		c.s.opts.Logger.Debug("scomp: release_ref failed", "err", err)
	}
}
