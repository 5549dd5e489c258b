package scomp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// ProtocolVersion is the scomp version this face speaks.
const ProtocolVersion = "0.1"

// Binding is one function a peer declares at handshake.
type Binding struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Input       json.RawMessage `json:"input,omitempty"`
	Output      json.RawMessage `json:"output,omitempty"`
	Effects     []string        `json:"effects,omitempty"`
}

type handshakeParams struct {
	Protocol string          `json:"protocol"`
	Bindings []Binding       `json:"bindings"`
	Metadata json.RawMessage `json:"metadata"`
}

type handshakeResult struct {
	Protocol  string         `json:"protocol"`
	SessionID string         `json:"sessionId"`
	Bindings  []Binding      `json:"bindings"`
	Metadata  map[string]any `json:"metadata"`
}

// serverBinding is what a server binding calls.
type serverBinding struct {
	Binding
	capID, appID string
}

func (c *conn) handshake(ctx context.Context, raw json.RawMessage) (any, error) {
	if c.box != nil {
		return nil, api.Errorf(api.CodeInvalidRequest, map[string]any{"sessionId": c.sessionID}, "the session is live already: handshake once per connection")
	}
	var p handshakeParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	if p.Protocol != ProtocolVersion {
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"param": "protocol", "supported": []string{ProtocolVersion}},
			"protocol %q is not served: this server speaks scomp %s", p.Protocol, ProtocolVersion)
	}
	seen := map[string]bool{}
	clients := map[string]*clientBinding{}
	var order []string
	for i, b := range p.Bindings {
		if !isIdentifier(b.Name) {
			return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"param": fmt.Sprintf("bindings[%d].name", i), "binding": b.Name},
				"client binding %q: the name must be a JavaScript identifier", b.Name)
		}
		if seen[b.Name] {
			return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"param": fmt.Sprintf("bindings[%d].name", i), "binding": b.Name},
				"client binding %q is declared twice", b.Name)
		}
		seen[b.Name] = true
		if sandboxGlobals[b.Name] || strings.HasPrefix(b.Name, "__scomp") {
			return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"param": fmt.Sprintf("bindings[%d].name", i), "binding": b.Name},
				"client binding %q: the name is a global of the sandbox already", b.Name)
		}
		cb := &clientBinding{Binding: b}
		for _, part := range []struct {
			name   string
			schema json.RawMessage
			out    **jsonschema.Schema
		}{{"input", b.Input, &cb.input}, {"output", b.Output, &cb.output}} {
			sch, err := compileSchema(part.schema)
			if err != nil {
				return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"param": fmt.Sprintf("bindings[%d].%s", i, part.name), "binding": b.Name},
					"client binding %q: its %s schema is not a valid JSON Schema 2020-12: %v", b.Name, part.name, err)
			}
			*part.out = sch
		}
		clients[b.Name] = cb
		order = append(order, b.Name)
	}
	cctx := core.WithSession(ctx, c.sess)
	// The registry's capabilities: the generic ones of the apps reached
	// through accessibility are not bound (they are acted on by element).
	caps, err := c.s.b.QueryCapabilities(cctx, &api.QueryCapabilitiesParams{Registered: true})
	if err != nil {
		return nil, err
	}
	var bindings []serverBinding
	for _, cp := range caps.Capabilities {
		if cp.TrustLevel == api.TrustDeny {
			continue
		}
		bindings = append(bindings, serverBinding{capID: cp.ID, appID: cp.AppID, Binding: Binding{
			Name: BindingName(cp.ID), Description: describe(cp), Input: api.ParamsSchema(cp.Parameters), Output: resultSchema, Effects: effects(cp)}})
	}
	slices.SortFunc(bindings, func(a, b serverBinding) int { return strings.Compare(a.capID, b.capID) })
	bindings = append(bindings, builtinBindings()...)
	for _, sb := range bindings {
		if clients[sb.Name] != nil {
			what := "PCP capability " + sb.capID
			if sb.capID == "" {
				what = "pcpd's own"
			}
			return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"binding": sb.Name},
				"client binding %q has the name of a server binding (%s)", sb.Name, what)
		}
	}
	c.clients = clients
	box, err := newSandbox(c, bindings, order)
	if err != nil {
		return nil, err
	}
	c.box = box
	c.sessionID = c.s.opts.NewSessionID()
	lim := c.limits()
	out := handshakeResult{Protocol: ProtocolVersion, SessionID: c.sessionID, Bindings: []Binding{}, Metadata: map[string]any{
		"server":    map[string]any{"name": "pcpd", "version": c.s.opts.Version},
		"runtime":   map[string]any{"language": "javascript", "engine": "quickjs", "evalTimeoutMs": lim.EvalTimeout.Milliseconds(), "memoryLimitBytes": lim.MemoryLimit},
		"transport": c.transport,
		"actor":     c.sess.Actor(),
	}}
	for _, b := range bindings {
		out.Bindings = append(out.Bindings, b.Binding)
	}
	return out, nil
}

// compileSchema compiles a schema as Draft 2020-12; an absent one is
// the empty schema.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
	if err != nil {
		return nil, err
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.UseLoader(noLoader{})
	if err := comp.AddResource("scomp:binding", doc); err != nil {
		return nil, err
	}
	return comp.Compile("scomp:binding")
}

// noLoader refuses every remote reference: a schema is what it says.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: schemas may not refer outside themselves", url)
}

func describe(c api.Capability) string {
	d := c.Description
	if d == "" {
		d = c.ID
	}
	d += " (PCP capability " + c.ID + ", trust level " + c.TrustLevel + ")"
	return d
}

// effects are the binding's effects: "confirm" when a call waits for the
// user's approval, and the manifest's confirmation type when it has one.
func effects(c api.Capability) []string {
	e := []string{}
	if c.TrustLevel == api.TrustConfirm {
		e = append(e, "confirm")
	}
	if c.ConfirmationType != "" {
		e = append(e, c.ConfirmationType)
	}
	return e
}

// resultSchema is what every server binding resolves to: the
// capability's result.
var resultSchema = json.RawMessage(`{"type":"object","properties":{"status":{"enum":["success","partial","deferred"]},"data":{},` +
	`"attachments":{"type":"array","description":"binary payloads: {name, media_type, size, data (base64)}, or truncated and reason past the limit"}},"required":["status"]}`)
