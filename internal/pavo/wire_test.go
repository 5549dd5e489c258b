package pavo

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line string
		want *Request
	}{
		{`{"op":"manifest"}`, &Request{Op: "manifest"}},
		{` {"op":"views","future":[1,{"a":2}]} `, &Request{Op: "views"}},
		{`{"op":"view","view":"apps","params":{"state":"running"}}`,
			&Request{Op: "view", View: "apps", Params: map[string]json.RawMessage{"state": json.RawMessage(`"running"`)}}},
		{`{"op":"view","view":"apps","params":null}`, &Request{Op: "view", View: "apps"}},
		{`{"op":"query","query":"apps.list"}`, &Request{Op: "query", Query: "apps.list"}},
		{`{"op":"render","kind":"k","node":{"x":1},"data":{"a":[]},"surface":"web","format":null}`,
			&Request{Op: "render", Kind: "k", Node: json.RawMessage(`{"x":1}`), Data: map[string]json.RawMessage{"a": json.RawMessage(`[]`)}, Surface: "web"}},
		{`{"op":"submit","view":"jobs","form":"undo","values":{"job_id":"j"}}`,
			&Request{Op: "submit", View: "jobs", Form: "undo", Values: map[string]json.RawMessage{"job_id": json.RawMessage(`"j"`)}}},
		{`{"op":"submit","view":"jobs"}`, &Request{Op: "submit", View: "jobs"}},
		// The same key in sibling objects is not a duplicate.
		{`{"op":"submit","view":"v","values":{"a":{"k":1},"b":{"k":2}}}`,
			&Request{Op: "submit", View: "v", Values: map[string]json.RawMessage{"a": json.RawMessage(`{"k":1}`), "b": json.RawMessage(`{"k":2}`)}}},
	}
	for _, tt := range tests {
		got, err := Decode([]byte(tt.line))
		if err != nil {
			t.Errorf("Decode(%s): %v", tt.line, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Decode(%s) (-want +got):\n%s", tt.line, diff)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	tests := []struct{ line, want string }{
		{``, "malformed request: empty line"},
		{`nope`, "malformed request: invalid character 'o' in literal null (expecting 'u') (at byte 2)"},
		{`[]`, "malformed request: want a JSON object, got array"},
		{`null`, "malformed request: want a JSON object, got null"},
		{`{"op":"manifest"`, "malformed request: unexpected end of the line"},
		{`{"op":"manifest"}x`, "malformed request: data after the JSON object"},
		{`{"op":"manifest"}{}`, "malformed request: data after the JSON object"},
		{`{"op":"manifest","op":"manifest"}`, `malformed request: duplicate key "op"`},
		{`{"op":"submit","view":"v","values":{"a":1,"a":2}}`, `malformed request: duplicate key "a"`},
		{`{"op":"manifest","x":` + deep + `}`, "malformed request: nested deeper than 512 levels"},
		{`{}`, `missing "op"`},
		{`{"op":null}`, `"op" must be a string, got null`},
		{`{"op":["view"]}`, `"op" must be a string, got array`},
		{`{"op":"MANIFEST"}`, `unknown op "MANIFEST" (known: jobs, manifest, notifications, query, render, submit, view, views)`},
		{`{"op":"` + strings.Repeat("x", 300) + `"}`, `unknown op "` + strings.Repeat("x", maxEcho) + `"… (300 bytes) (known: jobs, manifest, notifications, query, render, submit, view, views)`},
		{`{"op":"view"}`, `view: missing "view"`},
		{`{"op":"view","view":null}`, `view: missing "view"`},
		{`{"op":"view","view":""}`, `view: "view" must not be empty`},
		{`{"op":"view","view":true}`, `view: "view" must be a string, got boolean`},
		{`{"op":"view","view":"a","params":"x"}`, `view: "params" must be an object, got string`},
		{`{"op":"query"}`, `query: missing "query"`},
		{`{"op":"render","kind":"k","surface":"s"}`, `render: missing "node"`},
		{`{"op":"render","kind":"k","node":"n","surface":"s"}`, `render: "node" must be an object, got string`},
		{`{"op":"render","kind":"k","node":{},"surface":"s","data":[]}`, `render: "data" must be an object, got array`},
		{`{"op":"render","kind":"k","node":{},"surface":"s","format":1}`, `render: "format" must be a string, got number`},
		{`{"op":"render","node":{},"surface":"s"}`, `render: missing "kind"`},
		{`{"op":"submit","view":"v","form":{}}`, `submit: "form" must be a string, got object`},
		{`{"op":"submit","view":"v","values":1.5}`, `submit: "values" must be an object, got number`},
	}
	for _, tt := range tests {
		_, err := Decode([]byte(tt.line))
		if err == nil {
			t.Errorf("Decode(%.80s): no error, want %q", tt.line, tt.want)
			continue
		}
		if _, ok := err.(*RequestError); !ok {
			t.Errorf("Decode(%.80s): got a %T, want a *RequestError", tt.line, err)
		}
		if err.Error() != tt.want {
			t.Errorf("Decode(%.80s):\n got %q\nwant %q", tt.line, err, tt.want)
		}
	}
}

// TestTablesSorted keeps the op table, the query table and the read-only
// methods sorted, and the op table complete against the spec's ops.
func TestTablesSorted(t *testing.T) {
	t.Parallel()
	spec := []string{"manifest", "views", "view", "query", "render", "submit", "jobs", "notifications"}
	slices.Sort(spec)
	if !slices.Equal(Ops, spec) {
		t.Errorf("Ops = %v, want the spec's %v", Ops, spec)
	}
	var ops []string
	for _, e := range opTable {
		ops = append(ops, e.op)
	}
	if !slices.Equal(ops, Ops) {
		t.Errorf("opTable = %v, want %v", ops, Ops)
	}
	if !slices.IsSorted(queryNames()) {
		t.Errorf("queryTable is not sorted: %v", queryNames())
	}
	if !slices.IsSorted(readOnlyMethods) {
		t.Errorf("readOnlyMethods is not sorted: %v", readOnlyMethods)
	}
	if !slices.IsSorted(renderKinds) {
		t.Errorf("renderKinds is not sorted: %v", renderKinds)
	}
}

func TestReplyLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		got  []byte
		want string
	}{
		{okLine(map[string]string{"markup": "<svg>&</svg>"}), `{"ok":true,"result":{"markup":"<svg>&</svg>"}}`},
		{okLine([]int{}), `{"ok":true,"result":[]}`},
		{okLine(nil), `{"ok":true,"result":null}`},
		{okLine(math.NaN()), `{"ok":false,"error":"encoding the result: json: unsupported value: NaN"}`},
		{okLine(map[string]any{"c": make(chan int)}), `{"ok":false,"error":"encoding the result: json: unsupported type: chan int"}`},
		{errLine("bad \"x\" <y>"), `{"ok":false,"error":"bad \"x\" <y>"}`},
		{errLine(""), `{"ok":false,"error":"unknown error"}`},
		{errLine("\xff"), `{"ok":false,"error":"\ufffd"}`},
	}
	for _, tt := range tests {
		if string(tt.got) != tt.want {
			t.Errorf("got %s, want %s", tt.got, tt.want)
		}
		if !json.Valid(tt.got) {
			t.Errorf("%s is not JSON", tt.got)
		}
	}
}

// TestCatchAll: unknown members of SubmitResult, JobItem and
// NotificationItem survive a decode and an encode.
func TestCatchAll(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		into func() any
		want string
	}{
		{`{"message":"m","future":{"b":[1,2]},"errors":{"k":"v"},"alpha":true}`, func() any { return &SubmitResult{} },
			`{"message":"m","errors":{"k":"v"},"alpha":true,"future":{"b":[1,2]}}`},
		{`{"z":1}`, func() any { return &SubmitResult{} }, `{"z":1}`},
		{`{}`, func() any { return &SubmitResult{} }, `{}`},
		{`{"id":"j","title":"t","status":"","progress":0.5,"driver":"x"}`, func() any { return &JobItem{} },
			`{"id":"j","title":"t","status":"","driver":"x","progress":0.5}`},
		{`{"id":"n","title":"t","read":true,"actions":[{"label":"Open"}]}`, func() any { return &NotificationItem{} },
			`{"id":"n","title":"t","read":true,"actions":[{"label":"Open"}]}`},
		{`{"id":"n","title":"t"}`, func() any { return &NotificationItem{} }, `{"id":"n","title":"t","read":false}`},
	}
	for _, tt := range tests {
		v := tt.into()
		if err := json.Unmarshal([]byte(tt.in), v); err != nil {
			t.Errorf("decoding %s: %v", tt.in, err)
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Errorf("encoding %s: %v", tt.in, err)
			continue
		}
		if string(b) != tt.want {
			t.Errorf("round trip of %s: got %s, want %s", tt.in, b, tt.want)
		}
	}
	// A known member's name in Extra does not shadow the typed field.
	j := JobItem{ID: "a", Title: "b", Status: "c", Extra: map[string]json.RawMessage{"id": json.RawMessage(`"other"`)}}
	if b, _ := json.Marshal(j); string(b) != `{"id":"a","title":"b","status":"c"}` {
		t.Errorf("Extra shadowing id: got %s", b)
	}
	// Extra holding invalid JSON fails to encode rather than writing it.
	j.Extra = map[string]json.RawMessage{"x": json.RawMessage(`{`)}
	if _, err := json.Marshal(j); err == nil {
		t.Error("encoding an Extra member that is not JSON: no error")
	}
}
