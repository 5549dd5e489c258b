package pavo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits on what a host may send.
const (
	// DefaultMaxLine bounds one request line, without its newline.
	DefaultMaxLine = 1 << 20
	// MaxDepth bounds the nesting of objects and arrays in a request. An
	// element tree in render's data nests two levels per element, and the
	// AT-SPI adapter walks 64 elements deep.
	MaxDepth = 512
	// maxEcho bounds how much of a host's string an error message quotes.
	maxEcho = 120
)

// The ops of protocol v1, sorted.
const (
	OpJobs          = "jobs"
	OpManifest      = "manifest"
	OpNotifications = "notifications"
	OpQuery         = "query"
	OpRender        = "render"
	OpSubmit        = "submit"
	OpView          = "view"
	OpViews         = "views"
)

// Ops lists the ops of protocol v1, sorted.
var Ops = []string{OpJobs, OpManifest, OpNotifications, OpQuery, OpRender, OpSubmit, OpView, OpViews}

// Request is one decoded request line. Only the members of its op are
// set; members of other ops and unknown members are ignored (protocol v1
// is additive, so a newer host may send members this driver does not
// know).
type Request struct {
	Op string

	// View is the view of view and submit.
	View string
	// Params are the caller params of view and query; nil when absent.
	Params map[string]json.RawMessage

	// Query is the query of query.
	Query string

	// Kind, Node, Data, Surface and Format are render's.
	Kind    string
	Node    json.RawMessage
	Data    map[string]json.RawMessage
	Surface string
	Format  string

	// Form and Values are submit's.
	Form   string
	Values map[string]json.RawMessage
}

// RequestError is a request line the driver cannot serve: malformed
// JSON, a missing or unknown op, a member of the wrong type.
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return e.Msg }

func reqErrorf(format string, args ...any) error {
	return &RequestError{Msg: fmt.Sprintf(format, args...)}
}

// Decode decodes one request line (without its newline). The line must
// be exactly one JSON object, nested at most MaxDepth deep, without a
// duplicate key in any object; op must be one of Ops; the members of the
// op must have their types. Any other line is a *RequestError.
func Decode(line []byte) (*Request, error) {
	if err := checkJSON(line); err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(line, &top); err != nil {
		return nil, reqErrorf("malformed request: %v", err)
	}
	opRaw, ok := top["op"]
	if !ok {
		return nil, reqErrorf(`missing "op"`)
	}
	var op string
	if err := stringMember(opRaw, "op", &op); err != nil {
		return nil, err
	}
	if !slices.Contains(Ops, op) {
		return nil, reqErrorf("unknown op %s (known: %s)", quote(op), strings.Join(Ops, ", "))
	}
	r := &Request{Op: op}
	m := members{op: op, top: top}
	switch op {
	case OpView:
		m.str("view", true, &r.View)
		m.object("params", &r.Params)
	case OpQuery:
		m.str("query", true, &r.Query)
		m.object("params", &r.Params)
	case OpRender:
		m.str("kind", true, &r.Kind)
		m.raw("node", &r.Node)
		m.object("data", &r.Data)
		m.str("surface", true, &r.Surface)
		m.str("format", false, &r.Format)
	case OpSubmit:
		m.str("view", true, &r.View)
		m.str("form", false, &r.Form)
		m.object("values", &r.Values)
	}
	if m.err != nil {
		return nil, m.err
	}
	return r, nil
}

// members decodes an op's members, keeping the first error.
type members struct {
	op  string
	top map[string]json.RawMessage
	err error
}

// str decodes a string member. null is the same as absent; a required
// member must be present and not empty.
func (m *members) str(name string, required bool, dst *string) {
	if m.err != nil {
		return
	}
	raw, ok := m.top[name]
	if !ok || isNull(raw) {
		if required {
			m.err = reqErrorf("%s: missing %q", m.op, name)
		}
		return
	}
	if err := stringMember(raw, name, dst); err != nil {
		m.err = reqErrorf("%s: %v", m.op, err)
		return
	}
	if required && *dst == "" {
		m.err = reqErrorf("%s: %q must not be empty", m.op, name)
	}
}

// object decodes an optional object member; null is the same as absent.
func (m *members) object(name string, dst *map[string]json.RawMessage) {
	if m.err != nil {
		return
	}
	raw, ok := m.top[name]
	if !ok || isNull(raw) {
		return
	}
	if kind := kindOf(raw); kind != "object" {
		m.err = reqErrorf("%s: %q must be an object, got %s", m.op, name, kind)
		return
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		m.err = reqErrorf("%s: %q: %v", m.op, name, err)
	}
}

// raw keeps a required object member as it came.
func (m *members) raw(name string, dst *json.RawMessage) {
	if m.err != nil {
		return
	}
	raw, ok := m.top[name]
	if !ok || isNull(raw) {
		m.err = reqErrorf("%s: missing %q", m.op, name)
		return
	}
	if kind := kindOf(raw); kind != "object" {
		m.err = reqErrorf("%s: %q must be an object, got %s", m.op, name, kind)
		return
	}
	*dst = raw
}

func stringMember(raw json.RawMessage, name string, dst *string) error {
	if kind := kindOf(raw); kind != "string" {
		return reqErrorf("%q must be a string, got %s", name, kind)
	}
	return json.Unmarshal(raw, dst)
}

func isNull(raw json.RawMessage) bool { return kindOf(raw) == "null" }

// kindOf names the JSON kind of a valid JSON value.
func kindOf(raw json.RawMessage) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// checkJSON checks that line is one JSON object, nested at most MaxDepth
// deep, with no duplicate key in any object.
func checkJSON(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	type level struct {
		object  bool
		wantKey bool
		keys    map[string]struct{}
	}
	var stack []level
	first := true
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if first {
				return reqErrorf("malformed request: empty line")
			}
			return reqErrorf("malformed request: unexpected end of the line")
		}
		if err != nil {
			return reqErrorf("malformed request: %v", syntaxText(err))
		}
		if first {
			first = false
			if d, ok := tok.(json.Delim); !ok || d != '{' {
				return reqErrorf("malformed request: want a JSON object, got %s", tokenKind(tok))
			}
		}
		top := len(stack) - 1
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) >= MaxDepth {
					return reqErrorf("malformed request: nested deeper than %d levels", MaxDepth)
				}
				if top >= 0 && stack[top].object {
					stack[top].wantKey = true // the value this opens is the member's
				}
				stack = append(stack, level{object: t == '{', wantKey: t == '{'})
			case '}', ']':
				stack = stack[:top]
				if len(stack) == 0 {
					if _, err := dec.Token(); err != io.EOF {
						return reqErrorf("malformed request: data after the JSON object")
					}
					return nil
				}
			}
		case string:
			l := &stack[top]
			if l.object && l.wantKey {
				if _, dup := l.keys[t]; dup {
					return reqErrorf("malformed request: duplicate key %s", quote(t))
				}
				if l.keys == nil {
					l.keys = map[string]struct{}{}
				}
				l.keys[t] = struct{}{}
				l.wantKey = false
				continue
			}
			if l.object {
				l.wantKey = true
			}
		default:
			if l := &stack[top]; l.object {
				l.wantKey = true
			}
		}
	}
}

func tokenKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return "array"
		}
		return string(t)
	case string:
		return "string"
	case json.Number, float64:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// syntaxText is a decoding error's message without the package's prefix.
func syntaxText(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	return err.Error()
}

// quote quotes a string that came from the host, cut to maxEcho bytes.
func quote(s string) string {
	if len(s) > maxEcho {
		cut := maxEcho
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// okLine is the reply line carrying result; when result does not
// encode, the reply is the error instead.
func okLine(result any) []byte {
	b, err := marshal(result)
	if err != nil {
		return errLine("encoding the result: " + err.Error())
	}
	out := make([]byte, 0, len(b)+22)
	out = append(out, `{"ok":true,"result":`...)
	out = append(out, b...)
	return append(out, '}')
}

// errLine is the reply line carrying msg.
func errLine(msg string) []byte {
	if msg == "" {
		msg = "unknown error"
	}
	b, err := marshal(msg)
	if err != nil { // a string always encodes
		b = []byte(`"unencodable error"`)
	}
	out := make([]byte, 0, len(b)+22)
	out = append(out, `{"ok":false,"error":`...)
	out = append(out, b...)
	return append(out, '}')
}
