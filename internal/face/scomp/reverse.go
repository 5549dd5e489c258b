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
// for (reverseInvoke) and checked against the output schema.
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
	out, pe := c.reverseInvoke(ctx, params, "client binding "+strconv.Quote(name), map[string]any{"binding": name})
	if pe != nil {
		return nil, pe
	}
	if err := validate(cb.output, string(out)); err != nil {
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"binding": name, "param": "output"},
			"client binding %q answered a value that does not match its output schema: %v", name, err)
	}
	return out, nil
}

// clientRefParams are the params of the server's invoke of one of the
// client's function references.
type clientRefParams struct {
	Ref   string          `json:"ref"`
	Input json.RawMessage `json:"input"`
}

// invokeClientRef calls the client's function reference ref with input
// (JSON text), as invokeClient calls a binding (no schema: the
// reference was declared by the value that carried it).
func (c *conn) invokeClientRef(ctx context.Context, ref, input string) (json.RawMessage, *api.Error) {
	if c.box == nil || !c.box.crefs[ref] {
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"ref": ref},
			"the client's function reference %q was released", ref)
	}
	params, _ := jsonrpc.Marshal(clientRefParams{Ref: ref, Input: json.RawMessage(input)})
	return c.reverseInvoke(ctx, params, "the client's function reference "+strconv.Quote(ref), map[string]any{"ref": ref})
}

// reverseInvoke sends an invoke request with params and the server's
// next id, and waits for the answer: at most the invoke timeout, and
// never past ctx (the eval's) or the connection. While it waits, the
// worker serves the client's requests that need no VM of their own.
// what names the callee in errors, and every error's data holds the
// members of data.
func (c *conn) reverseInvoke(ctx context.Context, params json.RawMessage, what string, data map[string]any) (json.RawMessage, *api.Error) {
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range data {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
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
		return nil, api.Errorf(api.CodeInternalError, with(), "cannot send the invoke of %s: %v", what, err)
	}
	timeout := c.s.opts.InvokeTimeout
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case m := <-ch:
			if m.Error != nil {
				d := with()
				if m.Error.Data != nil {
					d["data"] = m.Error.Data
				}
				return nil, &api.Error{Code: m.Error.Code, Message: what + " failed: " + m.Error.Message, Data: d}
			}
			out := m.Result
			if len(bytes.TrimSpace(out)) == 0 {
				out = json.RawMessage("null")
			}
			return out, nil
		case <-timer.C:
			return nil, api.Errorf(api.CodeExecutionTimeout, with("timeout_ms", timeout.Milliseconds()),
				"%s did not answer within %v", what, timeout)
		case <-ctx.Done():
			return nil, api.Errorf(api.CodeExecutionTimeout, with(), "the eval's time ran out during the call")
		case <-c.done:
			return nil, api.Errorf(api.CodeInternalError, with(), "the connection ended during the call")
		case m := <-c.requests:
			if m.Method == "eval" || m.Method == "handshake" {
				c.backlog = append(c.backlog, m)
				continue
			}
			if err := c.reply(ctx, m); err != nil {
				return nil, api.Errorf(api.CodeInternalError, with(), "the connection ended during the call: %v", err)
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

// sendRelease tells the client the sandbox let go of its function
// reference ref (release_ref, a notification). A connection that cannot
// take it is ending anyway.
func (c *conn) sendRelease(ref string) {
	if c.ws == nil {
		return
	}
	params, _ := jsonrpc.Marshal(map[string]string{"ref": ref})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.write(ctx, jsonrpc.AppendRequest(nil, nil, "release_ref", params)); err != nil {
		c.s.opts.Logger.Debug("scomp: release_ref not sent", "ref", ref, "err", err)
	}
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
