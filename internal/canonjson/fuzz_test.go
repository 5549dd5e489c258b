package canonjson

import (
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

// FuzzTransform checks that Transform never panics, that what it accepts is
// JSON, and that its output is valid JSON it maps to itself.
func FuzzTransform(f *testing.F) {
	for _, s := range []string{
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
		`[1e21,1e-7,-0,5e-324,1.7976931348623157e308,9007199254740993,0.1]`,
		`"\ud800"`, `"\udc00"`, `"\ud800\ud800"`,
		`{"a":1,"a":2}`,
		`1e400`,
		"\"\xff\"",
		`[[[[[]]]]]`,
		` {"a" : [ true , false , null ] } `,
		`"\u0000\u001f\u2028\u2029/<>&"`,
		`{"version":"1.0","capabilities":[{"name":"compose","tier":1,"trust_level":"confirm","parameters":[{"name":"recipient","type":"string"}]}],"signature":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Transform(in)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Transform(%q): error %T %v, want *Error", in, err, err)
			}
			// Input encoding/json considers well-formed UTF-8 JSON must fail
			// only for a reason RFC 8785 adds, never as a syntax error.
			if e.kind == kindSyntax && json.Valid(in) && utf8.Valid(in) {
				t.Fatalf("Transform(%q): syntax error %v on valid JSON", in, err)
			}
			return
		}
		if !json.Valid(in) {
			t.Fatalf("Transform(%q) = %q, but the input is not valid JSON", in, out)
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("Transform(%q) = %q, not valid UTF-8 JSON", in, out)
		}
		again, err := Transform(out)
		if err != nil {
			t.Fatalf("Transform(%q): %v", out, err)
		}
		if string(again) != string(out) {
			t.Fatalf("Transform not idempotent:\n in  %q\n out %q\n again %q", in, out, again)
		}
	})
}
