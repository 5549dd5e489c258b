package pavo

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMergeParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		static map[string]any
		caller string
		want   string
	}{
		{nil, ``, `{}`},
		{map[string]any{"limit": 100}, ``, `{"limit":100}`},
		{map[string]any{"limit": 100}, `{"limit":4}`, `{"limit":4}`},
		{map[string]any{"limit": 100, "kind": "invoke"}, `{"app_id":"a"}`, `{"app_id":"a","kind":"invoke","limit":100}`},
		// The caller's null still wins: it reads as absent, so the query's
		// own default applies.
		{map[string]any{"limit": 100}, `{"limit":null}`, `{"limit":null}`},
		// A static value that does not encode is left out.
		{map[string]any{"bad": func() {}}, `{}`, `{}`},
	}
	for _, tt := range tests {
		var caller map[string]json.RawMessage
		if tt.caller != "" {
			if err := json.Unmarshal([]byte(tt.caller), &caller); err != nil {
				t.Fatal(err)
			}
		}
		got := mustJSON(t, mergeParams(tt.static, caller))
		if got != tt.want {
			t.Errorf("mergeParams(%v, %s) = %s, want %s", tt.static, tt.caller, got, tt.want)
		}
	}
}

// TestBindingMerge: a view's static params lie under the caller's, and
// every binding sees the caller's params.
func TestBindingMerge(t *testing.T) {
	t.Parallel()
	f := demoDaemon()
	d := &Driver{Daemon: f}
	replyOf(t, d, `{"op":"view","view":"events"}`)
	replyOf(t, d, `{"op":"view","view":"events","params":{"limit":"7","type":"x"}}`)
	replyOf(t, d, `{"op":"view","view":"audit","params":{"limit":3}}`)
	got := f.callsTo("events.history")
	want := []string{`{"limit":100}`, `{"limit":7}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events.history params (-want +got):\n%s", diff)
	}
	if got := f.callsTo("audit.tail"); len(got) != 1 || got[0] != `{"limit":3}` {
		t.Errorf("audit.tail params: %v, want the caller's limit 3", got)
	}
}

func TestCheckValues(t *testing.T) {
	t.Parallel()
	fields := []FormField{
		{Key: "s", Type: FieldString},
		{Key: "i", Type: FieldInteger},
		{Key: "n", Type: FieldNumber},
		{Key: "b", Type: FieldBoolean},
		{Key: "e", Type: FieldEnum, Options: []string{"a", "b"}},
		{Key: "o", Type: FieldJSON, jsonKind: "object"},
		{Key: "l", Type: FieldJSON, jsonKind: "array"},
		{Key: "j", Type: FieldJSON},
		{Key: "r", Type: FieldString, Required: true},
	}
	tests := []struct {
		values   string
		want     string
		wantErrs map[string]string
	}{
		{`{"r":""}`, `{"r":""}`, nil},
		{`{"r":"x","s":"text","i":42,"n":1.5,"b":true,"e":"a","o":{"k":1},"l":[1],"j":"plain"}`,
			`{"b":true,"e":"a","i":42,"j":"plain","l":[1],"n":1.5,"o":{"k":1},"r":"x","s":"text"}`, nil},
		// As a command line sends them: strings.
		{`{"r":"x","s":"7","i":" 42 ","n":"-2e3","b":"false","o":"{\"k\": 1}","l":"[1, 2]","j":"[3]"}`,
			`{"b":false,"i":42,"j":"[3]","l":[1,2],"n":-2000,"o":{"k":1},"r":"x","s":"7"}`, nil},
		// Scalars for a string; integral numbers for an integer.
		{`{"r":5,"s":true,"i":3.0,"e":"b"}`, `{"e":"b","i":3,"r":"5","s":"true"}`, nil},
		// null and "" are absent, except "" for a string.
		{`{"r":"x","s":"","i":"","n":null,"b":"","e":"","o":"","l":null}`, `{"r":"x","s":""}`, nil},
		{`{}`, `{}`, map[string]string{"r": "required"}},
		{`{"r":null}`, `{}`, map[string]string{"r": "required"}},
		{`{"r":"x","i":1.5,"n":"1e999","b":"yes","e":"c","o":"[1]","l":"nope","s":{"a":1}}`, `{"r":"x"}`, map[string]string{
			"i": `want an integer, got a number`,
			"n": `want a number, got "1e999"`,
			"b": `want true or false, got "yes"`,
			"e": `want one of a, b, got "c"`,
			"o": `want a JSON object, got an array`,
			"l": `want a JSON array, got a string that is not JSON`,
			"s": `want a string, got an object`,
		}},
		{`{"r":"x","i":9007199254740993,"e":["a"],"b":1}`, `{"r":"x"}`, map[string]string{
			"i": `want an integer, got a number`,
			"e": `want one of a, b, got an array`,
			"b": `want true or false, got a number`,
		}},
		{`{"r":"x","zz":1}`, `{"r":"x"}`, map[string]string{"zz": "not a field of this form"}},
	}
	for _, tt := range tests {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(tt.values), &raw); err != nil {
			t.Fatal(err)
		}
		got, errs := checkValues(fields, raw, true)
		if g := mustJSON(t, got); g != tt.want {
			t.Errorf("checkValues(%s) = %s, want %s", tt.values, g, tt.want)
		}
		if diff := cmp.Diff(tt.wantErrs, errs); diff != "" {
			t.Errorf("checkValues(%s) errors (-want +got):\n%s", tt.values, diff)
		}
	}
	// Params (not strict) ignore keys that are no field.
	if _, errs := checkValues(fields, map[string]json.RawMessage{"r": json.RawMessage(`"x"`), "zz": json.RawMessage(`1`)}, false); errs != nil {
		t.Errorf("params with an unknown key: %v", errs)
	}
}
