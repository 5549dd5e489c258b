package jsonrpc

import (
	"encoding/json"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		line      string
		batch     bool
		msgs      int
		errs      []api.Code
		errIDNull bool
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"a"}`, false, 1, nil, false},
		{`{"jsonrpc":"2.0","method":"a"}`, false, 1, nil, false},
		{`{"jsonrpc":"2.0","id":"x","result":{}}`, false, 1, nil, false},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"m"}}`, false, 1, nil, false},
		{`{"jsonrpc":"2.0","id":1`, false, 0, []api.Code{api.CodeParseError}, true},
		{`[{"jsonrpc":"2.0","id":1,"method":"a"},`, false, 0, []api.Code{api.CodeParseError}, true},
		{`"str"`, false, 0, []api.Code{api.CodeInvalidRequest}, true},
		{`[]`, false, 0, []api.Code{api.CodeInvalidRequest}, true},
		{`[1,2]`, true, 0, []api.Code{api.CodeInvalidRequest, api.CodeInvalidRequest}, true},
		{`{"jsonrpc":"2.0","id":true,"method":"a"}`, false, 0, []api.Code{api.CodeInvalidRequest}, true},
		{`{"jsonrpc":"2.0","id":1,"method":""}`, false, 0, []api.Code{api.CodeInvalidRequest}, false},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":3}`, false, 0, []api.Code{api.CodeInvalidRequest}, false},
		{`{"jsonrpc":"2.0","id":1,"method":"a","result":3}`, false, 0, []api.Code{api.CodeInvalidRequest}, false},
		{`{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}`, false, 0, []api.Code{api.CodeInvalidRequest}, false},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"x"}}`, false, 0, []api.Code{api.CodeInvalidRequest}, false},
		{`{"jsonrpc":"2.0"}`, false, 0, []api.Code{api.CodeInvalidRequest}, true},
		{`[{"jsonrpc":"2.0","method":"a"},{"x":1}]`, true, 1, []api.Code{api.CodeInvalidRequest}, true},
	}
	for _, tt := range tests {
		d := Decode([]byte(tt.line))
		if d.Batch != tt.batch || len(d.Messages) != tt.msgs || len(d.Errors) != len(tt.errs) {
			t.Errorf("Decode(%s) = batch %v, %d msgs, %d errs; want %v, %d, %d", tt.line, d.Batch, len(d.Messages), len(d.Errors), tt.batch, tt.msgs, len(tt.errs))
			continue
		}
		for i, e := range d.Errors {
			if e.Err.Code != tt.errs[i] {
				t.Errorf("Decode(%s) error %d = %v, want %v", tt.line, i, e.Err.Code, tt.errs[i])
			}
			if tt.errIDNull && string(e.ID) != "null" {
				t.Errorf("Decode(%s) error id = %s, want null", tt.line, e.ID)
			}
		}
	}
}

func TestIDKey(t *testing.T) {
	if IDKey(json.RawMessage("1")) != IDKey(json.RawMessage("1.0")) {
		t.Error("1 and 1.0 should share a key")
	}
	if IDKey(json.RawMessage(`"1"`)) == IDKey(json.RawMessage("1")) {
		t.Error(`"1" and 1 must not share a key`)
	}
}

func TestEncodeErrorDefaultsMessage(t *testing.T) {
	got := string(EncodeError(&api.Error{Code: api.CodeRateLimited, Data: map[string]any{"retry_after_ms": 100}}))
	want := `{"code":-32018,"message":"Rate limited","data":{"retry_after_ms":100}}`
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// FuzzDecode checks that no input panics the decoder and that every
// rejected message carries a code from the catalogue.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"health.check"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"}]`,
		`{"jsonrpc":"2.0","id":1,"result":{"status":"success"}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x","data":{}}}`,
		`[]`, `[1]`, `{`, `null`, `{"jsonrpc":"2.0","id":[],"method":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		d := Decode(line)
		for _, e := range d.Errors {
			if e.Err == nil {
				t.Fatal("decode error without an *api.Error")
			}
			if _, ok := e.Err.Code.Info(); !ok {
				t.Fatalf("code %d is not in the catalogue", e.Err.Code)
			}
			if !validID(e.ID) {
				t.Fatalf("error reply id %q is not a valid id", e.ID)
			}
			var v any
			if err := json.Unmarshal(AppendError(nil, e.ID, e.Err), &v); err != nil {
				t.Fatalf("error reply is not JSON: %v", err)
			}
		}
		for _, m := range d.Messages {
			if m.Method == "" && m.ID == nil {
				t.Fatal("message with neither method nor id accepted")
			}
		}
	})
}

func TestRecoverID(t *testing.T) {
	tests := []struct{ prefix, want string }{
		{`{"jsonrpc":"2.0","id":17,"method":"x","params":{"a":"xxxxxxxx`, `17`},
		{`{"id":"abc","method":"x"`, `"abc"`},
		{`{"jsonrpc":"2.0","method":"x","params":{"a":"xxxxxxxx`, `null`},
		{`{"id":{"a":1}}`, `null`},
		{`[{"id":1}]`, `null`},
		{`garbage`, `null`},
		{``, `null`},
	}
	for _, tt := range tests {
		if got := string(RecoverID([]byte(tt.prefix))); got != tt.want {
			t.Errorf("RecoverID(%s) = %s, want %s", tt.prefix, got, tt.want)
		}
	}
}
