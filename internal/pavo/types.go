package pavo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// ProtocolVersion is the pavo wire protocol this driver speaks.
const ProtocolVersion = "v1"

// DriverManifest is the manifest op's result.
type DriverManifest struct {
	Name         string        `json:"name"`
	Title        string        `json:"title"`
	Version      string        `json:"version"`
	Description  string        `json:"description"`
	Verbs        []string      `json:"verbs"`
	Capabilities []string      `json:"capabilities"`
	Views        []ViewSummary `json:"views"`
	// Render lists, per surface, the node kinds this driver renders.
	Render      map[string][]string `json:"render"`
	Contributes Contributes         `json:"contributes"`
	Protocol    string              `json:"protocol"`
}

// Contributes says which aggregated feeds the driver provides.
type Contributes struct {
	Jobs          bool `json:"jobs"`
	Notifications bool `json:"notifications"`
}

// ViewSummary is a ViewSpec without its root tree.
type ViewSummary struct {
	ID          string         `json:"id"`
	Title       string         `json:"title"`
	Route       string         `json:"route"`
	Description string         `json:"description,omitempty"`
	Queries     []QueryBinding `json:"queries"`
	// Params describes the caller params the view reads (a PCP
	// extension; hosts that do not know it ignore it).
	Params []FormField `json:"params,omitempty"`
}

// ViewSpec is a view: its summary and its root tree.
type ViewSpec struct {
	ID          string         `json:"id"`
	Title       string         `json:"title"`
	Route       string         `json:"route"`
	Description string         `json:"description,omitempty"`
	Queries     []QueryBinding `json:"queries"`
	Params      []FormField    `json:"params,omitempty"`
	Root        ViewNode       `json:"root"`
}

// QueryBinding names the data a view's nodes read: the result of running
// Query (with Params merged under the caller's params) is stored in the
// view's data under Name.
type QueryBinding struct {
	Name string `json:"name"`
	// Op is the op that resolves it; always "query" here.
	Op     string         `json:"op,omitempty"`
	Query  string         `json:"query"`
	Params map[string]any `json:"params,omitempty"`
	// Driver names a foreign driver; PCP's own views never set it.
	Driver string `json:"driver,omitempty"`
}

// ViewNode is one node of a view's tree. Kind says how to show it:
// "stack" (its children, top to bottom), "text" (Text), "table" (the rows
// of the array bound to Query, Columns of them), "properties" (the
// object bound to Query, one line per column), "form" (Fields, posted
// with submit to SubmitOp), or a kind of this driver's own that the host
// asks it to render ("pcp.element-tree", "pcp.audit-log",
// "pcp.audit-chain").
type ViewNode struct {
	Kind        string      `json:"kind"`
	ID          string      `json:"id,omitempty"`
	Title       string      `json:"title,omitempty"`
	Text        string      `json:"text,omitempty"`
	Query       string      `json:"query,omitempty"`
	Columns     []Column    `json:"columns,omitempty"`
	Fields      []FormField `json:"fields,omitempty"`
	SubmitOp    string      `json:"submit_op,omitempty"`
	SubmitLabel string      `json:"submit_label,omitempty"`
	Children    []ViewNode  `json:"children,omitempty"`
}

// Column is one column of a table or one line of a properties node: Key
// is the member of each row object shown.
type Column struct {
	Key   string `json:"key"`
	Label string `json:"label"`
	// Align is "left" (the default), "right" or "center".
	Align string `json:"align,omitempty"`
}

// Form field types.
const (
	FieldString  = "string"
	FieldInteger = "integer"
	FieldNumber  = "number"
	FieldBoolean = "boolean"
	FieldEnum    = "enum"
	FieldJSON    = "json"
)

// FormField is one editable field of a form node (and, in ViewSpec.Params,
// one parameter a view reads).
type FormField struct {
	Key      string   `json:"key"`
	Label    string   `json:"label"`
	Type     string   `json:"type"`
	Required bool     `json:"required,omitempty"`
	Options  []string `json:"options,omitempty"`
	Default  any      `json:"default,omitempty"`
	Help     string   `json:"help,omitempty"`
	ReadOnly bool     `json:"readonly,omitempty"`

	// jsonKind narrows a "json" field to a manifest type: "object",
	// "array" or "any" (the default).
	jsonKind string
}

// ViewResult is the view op's result.
type ViewResult struct {
	View ViewSpec       `json:"view"`
	Data map[string]any `json:"data"`
}

// BindingError is the data of a binding that failed.
type BindingError struct {
	Error string `json:"error"`
}

// QueryResult is the query op's result.
type QueryResult struct {
	Query string `json:"query"`
	Data  any    `json:"data"`
}

// SubmitResult is the submit op's result. Every field is optional; a
// non-empty Errors means the submit was rejected. Members this type does
// not know survive a decode and encode in Extra.
type SubmitResult struct {
	Message string                     `json:"message,omitempty"`
	Errors  map[string]string          `json:"errors,omitempty"`
	Data    any                        `json:"data,omitempty"`
	View    *ViewResult                `json:"view,omitempty"`
	Extra   map[string]json.RawMessage `json:"-"`
}

// JobItem is one entry of the jobs feed. Members this type does not know
// survive in Extra; PCP fills it with its own (kind, app_id,
// capability_id, …).
type JobItem struct {
	ID        string                     `json:"id"`
	Title     string                     `json:"title"`
	Status    string                     `json:"status"`
	Detail    string                     `json:"detail,omitempty"`
	Route     string                     `json:"route,omitempty"`
	UpdatedAt string                     `json:"updated_at,omitempty"`
	Extra     map[string]json.RawMessage `json:"-"`
}

// NotificationItem is one entry of the notifications feed. Read is always
// written (false: v1 has no write path). Unknown members survive in
// Extra.
type NotificationItem struct {
	ID        string                     `json:"id"`
	Title     string                     `json:"title"`
	Body      string                     `json:"body,omitempty"`
	Severity  string                     `json:"severity,omitempty"`
	Route     string                     `json:"route,omitempty"`
	CreatedAt string                     `json:"created_at,omitempty"`
	Read      bool                       `json:"read"`
	Extra     map[string]json.RawMessage `json:"-"`
}

// Render model types.
const (
	RenderRows        = "rows"
	RenderSVG         = "svg"
	RenderText        = "text"
	RenderPlaceholder = "placeholder"
)

// RowsModel is a table.
type RowsModel struct {
	Type    string     `json:"type"`
	Headers []string   `json:"headers"`
	Aligns  []string   `json:"aligns,omitempty"`
	Rows    [][]string `json:"rows"`
}

// SVGModel is a self-contained <svg> picture.
type SVGModel struct {
	Type   string `json:"type"`
	Markup string `json:"markup"`
}

// TextModel is lines of plain text.
type TextModel struct {
	Type  string   `json:"type"`
	Lines []string `json:"lines"`
}

// PlaceholderModel names a component the host shows in its place.
type PlaceholderModel struct {
	Type      string         `json:"type"`
	Component string         `json:"component"`
	Props     map[string]any `json:"props,omitempty"`
}

// The catch-all types encode their known members in declaration order,
// then the unknown ones in key order. A known member's name in Extra is
// ignored: the typed field wins.

type submitKnown struct {
	Message string            `json:"message,omitempty"`
	Errors  map[string]string `json:"errors,omitempty"`
	Data    any               `json:"data,omitempty"`
	View    *ViewResult       `json:"view,omitempty"`
}

var submitMembers = []string{"message", "errors", "data", "view"}

// MarshalJSON encodes the known members and then Extra.
func (s SubmitResult) MarshalJSON() ([]byte, error) {
	return withExtra(submitKnown{s.Message, s.Errors, s.Data, s.View}, s.Extra, submitMembers)
}

// UnmarshalJSON decodes the known members and keeps the rest in Extra.
func (s *SubmitResult) UnmarshalJSON(b []byte) error {
	var k struct {
		Message string            `json:"message,omitempty"`
		Errors  map[string]string `json:"errors,omitempty"`
		Data    json.RawMessage   `json:"data,omitempty"`
		View    *ViewResult       `json:"view,omitempty"`
	}
	extra, err := splitExtra(b, &k, submitMembers)
	if err != nil {
		return err
	}
	*s = SubmitResult{Message: k.Message, Errors: k.Errors, View: k.View, Extra: extra}
	if k.Data != nil {
		s.Data = k.Data
	}
	return nil
}

type jobKnown struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	Status    string `json:"status"`
	Detail    string `json:"detail,omitempty"`
	Route     string `json:"route,omitempty"`
	UpdatedAt string `json:"updated_at,omitempty"`
}

var jobMembers = []string{"id", "title", "status", "detail", "route", "updated_at"}

// MarshalJSON encodes the known members and then Extra.
func (j JobItem) MarshalJSON() ([]byte, error) {
	return withExtra(jobKnown{j.ID, j.Title, j.Status, j.Detail, j.Route, j.UpdatedAt}, j.Extra, jobMembers)
}

// UnmarshalJSON decodes the known members and keeps the rest in Extra.
func (j *JobItem) UnmarshalJSON(b []byte) error {
	var k jobKnown
	extra, err := splitExtra(b, &k, jobMembers)
	if err != nil {
		return err
	}
	*j = JobItem{k.ID, k.Title, k.Status, k.Detail, k.Route, k.UpdatedAt, extra}
	return nil
}

type notificationKnown struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	Body      string `json:"body,omitempty"`
	Severity  string `json:"severity,omitempty"`
	Route     string `json:"route,omitempty"`
	CreatedAt string `json:"created_at,omitempty"`
	Read      bool   `json:"read"`
}

var notificationMembers = []string{"id", "title", "body", "severity", "route", "created_at", "read"}

// MarshalJSON encodes the known members and then Extra.
func (n NotificationItem) MarshalJSON() ([]byte, error) {
	return withExtra(notificationKnown{n.ID, n.Title, n.Body, n.Severity, n.Route, n.CreatedAt, n.Read}, n.Extra, notificationMembers)
}

// UnmarshalJSON decodes the known members and keeps the rest in Extra.
func (n *NotificationItem) UnmarshalJSON(b []byte) error {
	var k notificationKnown
	extra, err := splitExtra(b, &k, notificationMembers)
	if err != nil {
		return err
	}
	*n = NotificationItem{k.ID, k.Title, k.Body, k.Severity, k.Route, k.CreatedAt, k.Read, extra}
	return nil
}

// withExtra encodes known (a struct) and appends the members of extra
// whose names are not in members, sorted by name.
func withExtra(known any, extra map[string]json.RawMessage, members []string) ([]byte, error) {
	b, err := marshal(known)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if !slices.Contains(members, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return b, nil
	}
	slices.Sort(keys)
	out := bytes.NewBuffer(b[:len(b)-1]) // without the closing brace
	for i, k := range keys {
		v := extra[k]
		if !json.Valid(v) {
			return nil, fmt.Errorf("member %q: invalid JSON", k)
		}
		if i > 0 || len(b) > 2 {
			out.WriteByte(',')
		}
		kb, err := marshal(k)
		if err != nil {
			return nil, err
		}
		out.Write(kb)
		out.WriteByte(':')
		if err := json.Compact(out, v); err != nil {
			return nil, err
		}
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// splitExtra decodes b into known and returns its members not named in
// members.
func splitExtra(b []byte, known any, members []string) (map[string]json.RawMessage, error) {
	if err := json.Unmarshal(b, known); err != nil {
		return nil, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	var extra map[string]json.RawMessage
	for k, v := range all {
		if slices.Contains(members, k) {
			continue
		}
		if extra == nil {
			extra = map[string]json.RawMessage{}
		}
		extra[k] = v
	}
	return extra, nil
}

// marshal encodes v as compact JSON without HTML escaping.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// extras builds an Extra map from a Go map of values; values that do not
// encode are left out.
func extras(m map[string]any) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		if v == nil {
			continue
		}
		if s, ok := v.(string); ok && s == "" {
			continue
		}
		b, err := marshal(v)
		if err != nil {
			continue
		}
		out[k] = b
	}
	return out
}
