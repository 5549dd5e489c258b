package canonjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestRFCExample is the example of RFC 8785 section 3.2.2.
func TestRFCExample(t *testing.T) {
	in := `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`
	want := `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],` +
		`"string":"€$\u000f\nA'B\"\\\\\"/"}`
	got, err := Transform([]byte(in))
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestSortUTF16 is the sorting example of RFC 8785 section 3.2.3: UTF-16
// order puts U+1F600 (surrogates D83D DE00) before U+FB33, unlike code
// point or UTF-8 byte order.
func TestSortUTF16(t *testing.T) {
	in := `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`
	want := `{"\r":"Carriage Return","1":"One",` +
		"\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\"," +
		"\"\U0001F600\":\"Emoji: Grinning Face\",\"\uFB33\":\"Hebrew Letter Dalet With Dagesh\"}"
	got, err := Transform([]byte(in))
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestCompareUTF16(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "a", -1},
		{"a", "ab", -1},
		{"b", "ab", 1},
		{"\U0001F600", "\uFB33", -1}, // D83D < FB33
		{"\uD7FF", "\U00010000", -1}, // D7FF < D800
		{"\U0010FFFF", "\uE000", -1}, // DBFF < E000
		{"\U0001F600", "\U0001F601", -1},
		{"\uFFFF", "\U0010FFFF", 1},
	}
	for _, tt := range tests {
		if got := compareUTF16(tt.a, tt.b); got != tt.want {
			t.Errorf("compareUTF16(%+q, %+q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := compareUTF16(tt.b, tt.a); got != -tt.want {
			t.Errorf("compareUTF16(%+q, %+q) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}

// TestNumbers is the number table of RFC 8785 appendix B, given as the bit
// patterns of the doubles, plus cases around the exponent thresholds.
func TestNumbers(t *testing.T) {
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"}, // -0
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		f := math.Float64frombits(tt.bits)
		if got := string(appendNumber(nil, f)); got != tt.want {
			t.Errorf("appendNumber(%016x) = %s, want %s", tt.bits, got, tt.want)
		}
		// The same double written in Go's own notation must canonicalise
		// identically through Transform.
		in := strconv.FormatFloat(f, 'g', -1, 64)
		if got, err := Transform([]byte(in)); err != nil || string(got) != tt.want {
			t.Errorf("Transform(%s) = %s, %v, want %s", in, got, err, tt.want)
		}
	}
}

func TestTransformNumberText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"1e21", "1e+21"},
		{"1E+21", "1e+21"},
		{"1e20", "100000000000000000000"},
		{"1e-7", "1e-7"},
		{"1e-6", "0.000001"},
		{"0.0000001", "1e-7"},
		{"-0", "0"},
		{"-0.0e5", "0"},
		{"1.0", "1"},
		{"100", "100"},
		{"123e-2", "1.23"},
		{"-1.5e300", "-1.5e+300"},
		{"1e-400", "0"}, // underflows to zero, as in ECMAScript
		{"9007199254740993", "9007199254740992"},
		{"0.1", "0.1"},
		{"1.7976931348623157e308", "1.7976931348623157e+308"},
		{"  42  ", "42"},
	}
	for _, tt := range tests {
		got, err := Transform([]byte(tt.in))
		if err != nil {
			t.Errorf("Transform(%s): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Transform(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestTransformStrings(t *testing.T) {
	tests := []struct{ in, want string }{
		{`"\/"`, `"/"`},
		{`"/"`, `"/"`},
		{`"\u0000\u0001\u001f"`, `"\u0000\u0001\u001f"`},
		{`"\u001F"`, `"\u001f"`},
		{`"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
		{`"\u0008\u000C\u000A\u000D\u0009"`, `"\b\f\n\r\t"`},
		{`"\"\\"`, `"\"\\"`},
		{`"\u2028\u2029"`, "\"\u2028\u2029\""},
		{`"\u007f"`, "\"\x7f\""},
		{`"\u00e9"`, `"é"`},
		{`"é"`, `"é"`},
		{`"\uD83D\uDE00"`, `"😀"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"<>&"`, `"<>&"`},
		{`"\u003c\u003e\u0026"`, `"<>&"`},
		{`"\ufffd"`, "\"\ufffd\""},
		{`""`, `""`},
	}
	for _, tt := range tests {
		got, err := Transform([]byte(tt.in))
		if err != nil {
			t.Errorf("Transform(%s): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Transform(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestTransformStructure(t *testing.T) {
	tests := []struct{ in, want string }{
		{"null", "null"},
		{" true ", "true"},
		{"false", "false"},
		{"[]", "[]"},
		{"{}", "{}"},
		{"[ ]", "[]"},
		{"{ }", "{}"},
		{"[1, [2, [3]], {}]", "[1,[2,[3]],{}]"},
		{`{"b": 1, "a": {"d": [], "c": null}}`, `{"a":{"c":null,"d":[]},"b":1}`},
		{`{"aa":1,"a":2,"":3}`, `{"":3,"a":2,"aa":1}`},
		{"\t\r\n{\"a\"\n:\r1\t}\n", `{"a":1}`},
		// Names are compared after unescaping.
		{`{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
	}
	for _, tt := range tests {
		got, err := Transform([]byte(tt.in))
		if err != nil {
			t.Errorf("Transform(%q): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("Transform(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestTransformErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		kind errKind
		msg  string // substring of the error
	}{
		{"empty", "", kindSyntax, "end of input"},
		{"space only", "  ", kindSyntax, "end of input"},
		{"trailing", "1 2", kindSyntax, "after top-level value"},
		{"trailing comma array", "[1,]", kindSyntax, "want a value"},
		{"trailing comma object", `{"a":1,}`, kindSyntax, "member name"},
		{"unquoted name", `{a:1}`, kindSyntax, "member name"},
		{"missing colon", `{"a" 1}`, kindSyntax, "':'"},
		{"unclosed array", "[1", kindSyntax, "end of input"},
		{"unclosed object", `{"a":1`, kindSyntax, "end of input"},
		{"unclosed string", `"abc`, kindSyntax, "end of input"},
		{"bad literal", "tru", kindSyntax, "literal"},
		{"bad literal case", "True", kindSyntax, "want a value"},
		{"leading zero", "01", kindSyntax, "after top-level value"},
		{"plus sign", "+1", kindSyntax, "want a value"},
		{"bare dot", "1.", kindSyntax, "after '.'"},
		{"bare exponent", "1e", kindSyntax, "exponent"},
		{"minus alone", "-", kindSyntax, "digit"},
		{"hex number", "0x10", kindSyntax, "after top-level value"},
		{"NaN", "NaN", kindSyntax, "want a value"},
		{"Infinity", "Infinity", kindSyntax, "want a value"},
		{"control char", "\"a\x01\"", kindSyntax, "control character"},
		{"bad escape", `"\x"`, kindSyntax, "invalid escape"},
		{"short unicode escape", `"\u12"`, kindSyntax, "\\u escape"},
		{"bad hex", `"\u12g4"`, kindSyntax, "hex digit"},
		{"single quotes", `'a'`, kindSyntax, "want a value"},
		{"comment", `[1 /* x */]`, kindSyntax, "want ',' or ']'"},
		{"invalid utf8", "\"\xff\"", kindUTF8, "UTF-8"},
		{"encoded surrogate", "\"\xed\xa0\x80\"", kindUTF8, "UTF-8"},
		{"overlong", "\"\xc0\xaf\"", kindUTF8, "UTF-8"},
		{"invalid utf8 name", "{\"\xfe\":1}", kindUTF8, "UTF-8"},
		{"lone high", `"\ud800"`, kindSurrogate, "unpaired high surrogate"},
		{"lone high then text", `"\ud800abc"`, kindSurrogate, "unpaired high surrogate"},
		{"lone low", `"\udc00"`, kindSurrogate, "unpaired low surrogate"},
		{"high high", `"\ud800\ud800"`, kindSurrogate, "not a low surrogate"},
		{"reversed pair", `"\ude00\ud83d"`, kindSurrogate, "unpaired low surrogate"},
		{"duplicate", `{"a":1,"a":2}`, kindDuplicate, `duplicate member name "a"`},
		{"duplicate after unescape", `{"a":1,"\u0061":2}`, kindDuplicate, "duplicate"},
		{"nested duplicate", `[{"x":{"b":1,"b":1}}]`, kindDuplicate, "duplicate"},
		{"overflow", "1e309", kindNumber, "not a finite"},
		{"negative overflow", "-1e400", kindNumber, "not a finite"},
		{"deep array", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), kindDepth, "nesting"},
		{"deep object", strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), kindDepth, "nesting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Transform([]byte(tt.in))
			if err == nil {
				t.Fatalf("Transform(%q) = %s, want error", tt.in, got)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got error %T %v, want *Error", err, err)
			}
			if e.kind != tt.kind {
				t.Errorf("got kind %d (%v), want %d", e.kind, err, tt.kind)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got error %q, want it to contain %q", err, tt.msg)
			}
		})
	}
}

func TestMaxDepthAccepted(t *testing.T) {
	in := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	got, err := Transform([]byte(in))
	if err != nil {
		t.Fatalf("Transform(depth %d): %v", MaxDepth, err)
	}
	if string(got) != in {
		t.Errorf("got %d bytes, want the input back", len(got))
	}
}

func TestMarshal(t *testing.T) {
	v := struct {
		Z    string         `json:"z"`
		A    float64        `json:"a"`
		M    map[string]int `json:"m"`
		HTML string         `json:"html"`
	}{Z: "é\u2028", A: 1e21, M: map[string]int{"y": 2, "x": 1}, HTML: "<a&b>"}
	got, err := Marshal(v)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	// encoding/json escapes <, >, & and U+2028; the canonical form does not.
	want := `{"a":1e+21,"html":"<a&b>","m":{"x":1,"y":2},"z":"é` + "\u2028" + `"}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}

	if _, err := Marshal(math.NaN()); err == nil {
		t.Errorf("Marshal(NaN) succeeded, want error")
	}
}

// TestIdempotent checks that canonical output is a fixed point and valid
// JSON for every success case of the other tables.
func TestIdempotent(t *testing.T) {
	for _, in := range []string{
		`{"b":[1e21,1e-7,-0,0.1],"a":"\u0001\"\\😀","":{"\ufb33":1,"\ud83d\ude00":2}}`,
		`[[[]],{},"",0,-1,true,false,null]`,
	} {
		once, err := Transform([]byte(in))
		if err != nil {
			t.Fatalf("Transform(%s): %v", in, err)
		}
		if !json.Valid(once) {
			t.Errorf("Transform(%s) = %s, not valid JSON", in, once)
		}
		twice, err := Transform(once)
		if err != nil || string(twice) != string(once) {
			t.Errorf("Transform(%s) = %s, %v, want %s", once, twice, err, once)
		}
	}
}

func BenchmarkTransform(b *testing.B) {
	in := []byte(`{
  "version": "1.0",
  "capabilities": [
    {"name": "compose", "tier": 1, "trust_level": "confirm", "description": "Compose a message \u2014 with \"quotes\"",
     "parameters": [{"name": "recipient", "type": "string"}, {"name": "subject", "type": "string"}, {"name": "body", "type": "string"}]},
    {"name": "search", "tier": 2, "trust_level": "auto", "timeout_ms": 5000, "undo_window_ms": 0,
     "parameters": [{"name": "query", "type": "string"}, {"name": "limit", "type": "integer", "required": false}]}
  ],
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "signature": ""
}`)
	b.Run("Transform", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			if _, err := Transform(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Baseline in the same run: encoding/json's compaction, which does no
	// decoding, sorting or number formatting.
	b.Run("json.Compact", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(in)))
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := json.Compact(&buf, in); err != nil {
				b.Fatal(err)
			}
		}
	})
}
