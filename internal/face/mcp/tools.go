package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// tool is one entry of the face's tool table: its MCP description, its
// input schema (JSON Schema 2020-12, checked before the call), and the
// core call it makes.
type tool struct {
	name, title, description string
	schema                   string
	readOnly, destructive    bool
	call                     func(ctx context.Context, c *call) (any, error)

	compileOnce sync.Once
	compiled    *jsonschema.Schema
}

// call is one tools/call as a handler sees it.
type call struct {
	s    *Server
	cl   *caller
	req  *sdk.CallToolRequest
	args json.RawMessage
}

// textResult is a result whose text content is not its JSON: the
// compact form of an element tree.
type textResult struct {
	text       string
	structured any
}

// tools is the face's tool table, sorted by name (a test keeps it so).
var tools = []*tool{
	{name: "pcp_act", title: "Act on an element", readOnly: false, destructive: true, call: act,
		description: "Perform a structural action (activate, select, set_value, scroll, read_text) on an element of an accessible app's window (Tier 2): by element_id from pcp_elements, or by target (role, name, text, states). A target is resolved by the adapter; more than one match is TARGET_AMBIGUOUS listing the candidates. Actions by target may need the user's approval, which the call waits for.",
		schema: `{"type":"object","properties":{
"surface_id":{"type":"string","minLength":1,"description":"the window, e.g. atspi.gnome-calculator/1"},
"action":{"type":"string","minLength":1,"description":"activate, select, set_value, scroll or read_text"},
"element_id":{"type":"string","minLength":1,"description":"an element id from pcp_elements"},
"target":{"type":"object","description":"find the element instead of naming it","properties":{
"role":{"type":"string"},"name":{"type":"string"},"text":{"type":"string"},
"states":{"type":"array","items":{"type":"string"},"description":"states the element must have; \"!checked\" negates"}},"additionalProperties":false},
"value":{"description":"the value for set_value"}},
"required":["surface_id","action"],"additionalProperties":false}`},
	{name: "pcp_context", title: "Session context", readOnly: true, call: sessionContext,
		description: "The desktop session as PCP sees it: the focused surface (window), the active surfaces, and system state.",
		schema:      `{"type":"object","properties":{},"additionalProperties":false}`},
	{name: "pcp_describe", title: "Describe a capability", readOnly: true, call: describe,
		description: "One capability's full description: its parameters as a JSON Schema, its trust level (auto runs at once, confirm waits for the user, deny is refused) and whether its app is running.",
		schema:      `{"type":"object","properties":{"capability_id":{"type":"string","minLength":1,"description":"e.g. org.pcp.notes.create"}},"required":["capability_id"],"additionalProperties":false}`},
	{name: "pcp_elements", title: "Read a window's elements", readOnly: true, call: elements,
		description: "The element tree of a surface (window) of an accessible app, as compact text (one element a line: id, role, label, states, actions, value) or JSON. Limit it with max_depth, or read a subtree with focus_id.",
		schema: `{"type":"object","properties":{
"surface_id":{"type":"string","minLength":1},
"focus_id":{"type":"string","minLength":1,"description":"return only this element's subtree"},
"max_depth":{"type":"integer","minimum":1,"maximum":64,"default":8},
"format":{"enum":["text","json"],"default":"text"}},
"required":["surface_id"],"additionalProperties":false}`},
	{name: "pcp_events", title: "Recent events", readOnly: true, call: events,
		description: "Recent PCP events (apps registering, capabilities invoked, confirmations, window and element changes), newest last; with wait_ms, waits up to that long for the next event matching types, app_id and surface_id instead.",
		schema: `{"type":"object","properties":{
"types":{"type":"array","items":{"type":"string","minLength":1},"description":"event types, e.g. element.value_changed; default all"},
"app_id":{"type":"string"},"surface_id":{"type":"string"},
"limit":{"type":"integer","minimum":1,"maximum":100,"default":20},
"wait_ms":{"type":"integer","minimum":0,"maximum":60000}},"additionalProperties":false}`},
	{name: "pcp_invoke", title: "Invoke a capability", readOnly: false, destructive: true, call: invoke,
		description: "Invoke a capability with its parameters (see pcp_describe). A capability at trust level confirm waits for the user's decision (up to a bound) and then returns its outcome; a refusal is an error result.",
		schema: `{"type":"object","properties":{
"capability_id":{"type":"string","minLength":1},
"params":{"type":"object","description":"the capability's parameters"},
"app_id":{"type":"string","minLength":1,"description":"default: the capability id without its last part"}},
"required":["capability_id"],"additionalProperties":false}`},
	{name: "pcp_search", title: "Search capabilities", readOnly: true, call: search,
		description: "Find capabilities by free text over their names, descriptions and parameter names, best first; filter by app_id or tier. Also lists the accessible apps (Tier 2) and their windows that match, which pcp_elements and pcp_act reach.",
		schema: `{"type":"object","properties":{
"query":{"type":"string","description":"words to look for; empty lists everything"},
"app_id":{"type":"string","minLength":1},
"tier":{"type":"integer","minimum":1,"maximum":3},
"limit":{"type":"integer","minimum":1,"maximum":50,"default":10}},"additionalProperties":false}`},
}

func (t *tool) tool() *sdk.Tool {
	f := false
	ann := &sdk.ToolAnnotations{Title: t.title, ReadOnlyHint: t.readOnly, OpenWorldHint: &f}
	if !t.readOnly {
		d := t.destructive
		ann.DestructiveHint = &d
	}
	return &sdk.Tool{Name: t.name, Title: t.title, Description: t.description, InputSchema: json.RawMessage(compact(t.schema)), Annotations: ann}
}

func compact(s string) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// handler wraps a tool's core call: find the caller, check the
// arguments, call, encode.
func (s *Server) handler(t *tool) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		cl := s.callerOf(ctx, req.Session)
		if cl == nil {
			return errorResult(api.Errorf(api.CodeInternalError, nil, "this MCP session has no PCP session")), nil
		}
		ctx, cancel := context.WithCancel(core.WithSession(ctx, cl.sess))
		defer cancel()
		defer context.AfterFunc(cl.ctx, cancel)()
		args := req.Params.Arguments
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		if err := t.validate(args); err != nil {
			return errorResult(err), nil
		}
		res, err := t.call(ctx, &call{s: s, cl: cl, req: req, args: args})
		if err != nil {
			return errorResult(err), nil
		}
		return okResult(res), nil
	}
}

// validate checks args against the tool's input schema; a failure is
// INVALID_PARAMS naming the first field at fault.
func (t *tool) validate(args json.RawMessage) error {
	if t.schema == "" {
		return nil
	}
	t.compileOnce.Do(func() { t.compiled = compileSchema(t.name, t.schema) })
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return api.InvalidParam("arguments", "not JSON: %v", err)
	}
	err = t.compiled.Validate(inst)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return api.InvalidParam("arguments", "%v", err)
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	field := "arguments"
	if len(ve.InstanceLocation) > 0 {
		field = strings.Join(ve.InstanceLocation, ".")
	}
	msg := ve.ErrorKind.LocalizedString(printer)
	return api.InvalidParam(field, "%s", msg)
}

// printer words the schema checker's messages.
var printer = message.NewPrinter(language.Und)

// compileSchema compiles a schema of the table (a bad one is a
// programming error).
func compileSchema(name, schema string) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		panic(fmt.Sprintf("mcp: tool %s: schema: %v", name, err))
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "pcp:tool/" + name
	if err := c.AddResource(url, doc); err != nil {
		panic(fmt.Sprintf("mcp: tool %s: schema: %v", name, err))
	}
	sch, err := c.Compile(url)
	if err != nil {
		panic(fmt.Sprintf("mcp: tool %s: schema: %v", name, err))
	}
	return sch
}

// decode decodes a call's arguments (already checked against the
// schema) into P.
func decode[P any](c *call) (*P, error) {
	p := new(P)
	if err := json.Unmarshal(c.args, p); err != nil {
		return nil, api.InvalidParam("arguments", "%v", err)
	}
	return p, nil
}

// okResult is a successful tool result: the result as structured
// content and, as text, its JSON (or the text form it carries).
func okResult(res any) *sdk.CallToolResult {
	if cr, ok := res.(*api.CapabilityResult); ok && cr != nil && len(cr.Attachments) > 0 {
		return attachmentsResult(cr)
	}
	text := ""
	if tr, ok := res.(*textResult); ok {
		text, res = tr.text, tr.structured
	}
	raw, err := jsonrpc.Marshal(res)
	if err != nil {
		return errorResult(api.Errorf(api.CodeInternalError, nil, "encoding the result: %v", err))
	}
	if text == "" {
		text = string(raw)
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, StructuredContent: json.RawMessage(raw)}
}

// toolError is the structured content of an error result.
type toolError struct {
	Code    api.Code `json:"code"`
	Name    string   `json:"name"`
	Message string   `json:"message"`
	Data    any      `json:"data,omitempty"`
}

// errorResult is a PCP error as a tool result the model can read.
func errorResult(err error) *sdk.CallToolResult {
	e := api.AsError(err)
	te := toolError{Code: e.Code, Name: e.Code.Name(), Message: e.Message, Data: e.Data}
	if te.Message == "" {
		info, _ := e.Code.Info()
		te.Message = info.Message
	}
	raw, merr := jsonrpc.Marshal(te)
	if merr != nil {
		te.Data = nil
		raw, _ = jsonrpc.Marshal(te)
	}
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: te.Name + ": " + te.Message}}, StructuredContent: json.RawMessage(raw)}
}

// sortedTools reports whether the table is sorted by name.
func sortedTools() bool {
	return sort.SliceIsSorted(tools, func(i, j int) bool { return tools[i].name < tools[j].name })
}
