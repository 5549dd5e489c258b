package mcp

import (
	"encoding/json"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

func TestToolTable(t *testing.T) {
	if !sortedTools() {
		t.Error("the tool table is not sorted by name")
	}
	for _, tl := range tools {
		var m map[string]any
		if err := json.Unmarshal([]byte(tl.schema), &m); err != nil || m["type"] != "object" {
			t.Errorf("%s: input schema is not an object schema: %v", tl.name, err)
		}
		compileSchema(tl.name, tl.schema) // panics on a bad schema
		if tl.readOnly && tl.destructive {
			t.Errorf("%s: read-only and destructive", tl.name)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	var invoke *tool
	for _, tl := range tools {
		if tl.name == "pcp_invoke" {
			invoke = tl
		}
	}
	for _, tc := range []struct{ args, field string }{
		{`{}`, "arguments"},
		{`{"capability_id":7}`, "capability_id"},
		{`{"capability_id":"a.b","params":[1]}`, "params"},
		{`{"capability_id":"a.b","extra":1}`, "arguments"},
	} {
		err := invoke.validate(json.RawMessage(tc.args))
		e := api.AsError(err)
		if e == nil || e.Code != api.CodeInvalidParams {
			t.Errorf("%s: got %v, want INVALID_PARAMS", tc.args, err)
			continue
		}
		if got := e.DataMap()["field"]; got != tc.field {
			t.Errorf("%s: field %v, want %s (%s)", tc.args, got, tc.field, e.Message)
		}
	}
	if err := invoke.validate(json.RawMessage(`{"capability_id":"a.b","params":{"x":1}}`)); err != nil {
		t.Errorf("valid arguments refused: %v", err)
	}
}
