package manifest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

func TestValidateAppID(t *testing.T) {
	valid := []string{
		"org.example.mail", "a.b", "com.example.My_App-2", "0.1", "org.example." + strings.Repeat("a", MaxAppID-12),
	}
	for _, id := range valid {
		if err := ValidateAppID(id); err != nil {
			t.Errorf("ValidateAppID(%q) = %v, want nil", id, err)
		}
	}
	tests := []struct {
		id  string
		msg string
	}{
		{"", "required"},
		{"mail", "two or more"},
		{"org..mail", "label 2 is empty"},
		{".org.mail", "label 1 is empty"},
		{"org.mail.", "label 3 is empty"},
		{"org.-mail", `label "-mail" must start with a letter or digit`},
		{"org._mail", "must start with a letter or digit"},
		{"org.ma il", `has character ' '`},
		{"org.ma/il", `has character '/'`},
		{"org.mäil", "non-ASCII"},
		{"org.example." + strings.Repeat("a", MaxAppID-11), "at most 255"},
	}
	for _, tt := range tests {
		err := ValidateAppID(tt.id)
		t.Run(tt.id, func(t *testing.T) {
			checkError(t, err, api.CodeInvalidParams, "app_id", "", "app_id: ", tt.msg)
		})
	}
}

func TestCheckParams(t *testing.T) {
	no := false
	decls := []api.ParamDecl{
		{Name: "s", Type: api.TypeString},
		{Name: "i", Type: api.TypeInteger, Required: &no},
		{Name: "n", Type: api.TypeNumber, Required: &no},
		{Name: "b", Type: api.TypeBoolean, Required: &no},
		{Name: "o", Type: api.TypeObject, Required: &no},
		{Name: "a", Type: api.TypeArray, Required: &no},
		{Name: "x", Type: api.TypeAny, Required: &no},
	}
	valid := []string{
		`{"s":""}`,
		`{"s":"hi","i":3,"n":1.5,"b":false,"o":{},"a":[],"x":null}`,
		`{"s":"","i":-9223372036854775808}`,
		`{"s":"","i":9223372036854775807}`,
		`{"s":"","i":2.0}`,
		`{"s":"","i":1e3}`,
		`{"s":"","i":-0}`,
		`{"s":"","i":30e-1}`,
		`{"s":"","n":1e300,"x":[1,{"a":null}]}`,
		` { "s" : "" } `,
	}
	for _, p := range valid {
		if err := CheckParams("org.example.mail.compose", decls, json.RawMessage(p)); err != nil {
			t.Errorf("CheckParams(%s) = %v, want nil", p, err)
		}
	}

	tests := []struct {
		params string
		field  string
		msg    string
	}{
		{``, "params.s", "params.s: required parameter of capability org.example.mail.compose missing"},
		{`null`, "params.s", "required parameter"},
		{`{}`, "params.s", "required parameter"},
		{`[]`, "params", "params: capability org.example.mail.compose: expected object, got array"},
		{`"s"`, "params", "expected object, got string"},
		{`{"s":"","S":1}`, "params.S", "params.S: unknown parameter of capability org.example.mail.compose (declared: s, i, n, b, o, a, x)"},
		{`{"s":"","zz":1,"aa":2}`, "params.aa", "unknown parameter"},
		{`{"s":1}`, "params.s", "params.s: capability org.example.mail.compose: expected string, got number"},
		{`{"s":null}`, "params.s", "expected string, got null"},
		{`{"s":"","i":"1"}`, "params.i", "expected integer, got string"},
		{`{"s":"","i":1.5}`, "params.i", "expected integer, got 1.5, which has a fractional part"},
		{`{"s":"","i":1.0000000000000001}`, "params.i", "fractional part"},
		{`{"s":"","i":9223372036854775808}`, "params.i", "out of the int64 range"},
		{`{"s":"","i":-9223372036854775809}`, "params.i", "out of the int64 range"},
		{`{"s":"","i":1e19}`, "params.i", "out of the int64 range"},
		{`{"s":"","i":null}`, "params.i", "expected integer, got null"},
		{`{"s":"","n":"1"}`, "params.n", "expected number, got string"},
		{`{"s":"","b":0}`, "params.b", "expected boolean, got number"},
		{`{"s":"","o":[]}`, "params.o", "expected object, got array"},
		{`{"s":"","a":{}}`, "params.a", "expected array, got object"},
		{`{"s":"","s":""}`, "params", "duplicate member name"},
		{`{"s":"` + "\xff" + `"}`, "params", "UTF-8"},
		{`{"s":"","n":1e999}`, "params", "not a finite"},
		{`{"s":`, "params", "not valid I-JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.params, func(t *testing.T) {
			err := CheckParams("org.example.mail.compose", decls, json.RawMessage(tt.params))
			checkError(t, err, api.CodeInvalidParams, tt.field, "", tt.msg)
		})
	}
}

func TestCheckParamsNoDecls(t *testing.T) {
	for _, p := range []string{``, `null`, `{}`} {
		if err := CheckParams("a.b.c", nil, json.RawMessage(p)); err != nil {
			t.Errorf("CheckParams(%q) = %v, want nil", p, err)
		}
	}
	err := CheckParams("a.b.c", nil, json.RawMessage(`{"x":1}`))
	checkError(t, err, api.CodeInvalidParams, "params.x", "", "params.x: unknown parameter of capability a.b.c (it declares none)")
}

func TestCheckParamsBadDecl(t *testing.T) {
	decls := []api.ParamDecl{{Name: "x", Type: "strng"}}
	err := CheckParams("a.b.c", decls, json.RawMessage(`{"x":1}`))
	checkError(t, err, api.CodeInternalError, "", "", `declares unknown type "strng"`)
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		why  string // "" for ok
	}{
		{"0", 0, ""},
		{"-0", 0, ""},
		{"0.000", 0, ""},
		{"0e99999999999999999999", 0, ""},
		{"7", 7, ""},
		{"-7", -7, ""},
		{"7.0", 7, ""},
		{"7.50e1", 75, ""},
		{"750e-1", 75, ""},
		{"1E2", 100, ""},
		{"1e+2", 100, ""},
		{"9223372036854775807", 9223372036854775807, ""},
		{"-9223372036854775808", -9223372036854775808, ""},
		{"922337203685477580.7e1", 9223372036854775807, ""},
		{"0.0000000000000000000000000000000000000000001e43", 1, ""},
		{"7.5", 0, "has a fractional part"},
		{"1e-1", 0, "has a fractional part"},
		{"1e-99999999999999999999", 0, "has a fractional part"},
		{"9223372036854775808", 0, "is out of the int64 range"},
		{"-9223372036854775809", 0, "is out of the int64 range"},
		{"1e19", 0, "is out of the int64 range"},
		{"1e2000000", 0, "is out of the int64 range"},
		{"1e99999999999999999999", 0, "is out of the int64 range"},
	}
	for _, tt := range tests {
		got, ok, why := parseInt(tt.in)
		if tt.why == "" && (!ok || got != tt.want) {
			t.Errorf("parseInt(%s) = %d, %v, %q, want %d", tt.in, got, ok, why, tt.want)
		}
		if tt.why != "" && (ok || why != tt.why) {
			t.Errorf("parseInt(%s) = %d, %v, %q, want not ok, %q", tt.in, got, ok, why, tt.why)
		}
	}
}
