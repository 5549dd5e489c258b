package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
)

func TestParsePair(t *testing.T) {
	files := map[string]string{"note.txt": "line one\nline \"two\"\n"}
	readFile := func(name string) ([]byte, error) {
		s, ok := files[name]
		if !ok {
			return nil, fmt.Errorf("open %s: %w", name, fs.ErrNotExist)
		}
		return []byte(s), nil
	}
	tests := []struct {
		arg       string
		wantKey   string
		wantValue string
		wantUsage bool // the argument is malformed
		wantErr   bool // some other error
	}{
		{arg: "n=42", wantKey: "n", wantValue: `42`},
		{arg: "f=-1.5e3", wantKey: "f", wantValue: `-1.5e3`},
		{arg: "b=true", wantKey: "b", wantValue: `true`},
		{arg: "z=null", wantKey: "z", wantValue: `null`},
		{arg: `o={"a": 1}`, wantKey: "o", wantValue: `{"a":1}`},
		{arg: `l=[1, 2]`, wantKey: "l", wantValue: `[1,2]`},
		{arg: `q="quoted"`, wantKey: "q", wantValue: `"quoted"`},
		{arg: "s=hello", wantKey: "s", wantValue: `"hello"`},
		{arg: "s=hello world", wantKey: "s", wantValue: `"hello world"`},
		{arg: "s=", wantKey: "s", wantValue: `""`},
		{arg: "s=a=b", wantKey: "s", wantValue: `"a=b"`},
		{arg: "s={not json", wantKey: "s", wantValue: `"{not json"`},
		{arg: "s=1.0.0", wantKey: "s", wantValue: `"1.0.0"`},
		{arg: "s=<&>", wantKey: "s", wantValue: `"<&>"`},
		{arg: `j:={"a": [true]}`, wantKey: "j", wantValue: `{"a":[true]}`},
		{arg: "j:=7", wantKey: "j", wantValue: `7`},
		{arg: "j:=oops", wantUsage: true},
		{arg: "body=@note.txt", wantKey: "body", wantValue: `"line one\nline \"two\"\n"`},
		{arg: "body=@missing.txt", wantErr: true},
		{arg: "novalue", wantUsage: true},
		{arg: "=1", wantUsage: true},
		{arg: ":=1", wantUsage: true},
	}
	for _, tt := range tests {
		key, val, err := parsePair(tt.arg, readFile)
		switch {
		case tt.wantUsage:
			if !IsUsage(err) {
				t.Errorf("parsePair(%q): got error %v, want a usage error", tt.arg, err)
			}
			continue
		case tt.wantErr:
			if err == nil || IsUsage(err) {
				t.Errorf("parsePair(%q): got error %v, want a non-usage error", tt.arg, err)
			}
			continue
		case err != nil:
			t.Errorf("parsePair(%q): %v", tt.arg, err)
			continue
		}
		if key != tt.wantKey || string(val) != tt.wantValue {
			t.Errorf("parsePair(%q): got %s=%s, want %s=%s", tt.arg, key, val, tt.wantKey, tt.wantValue)
		}
	}
}

func TestInvokeParams(t *testing.T) {
	e := &env{}
	tests := []struct {
		base  string
		pairs []string
		want  string // "" for no params
	}{
		{"", nil, ""},
		{`{"a": 1, "b": "x"}`, nil, `{"a":1,"b":"x"}`},
		{`{"a": 1}`, []string{"a=2", "c=three"}, `{"a":2,"c":"three"}`},
		{"", []string{"limit=5"}, `{"limit":5}`},
	}
	for _, tt := range tests {
		got, err := e.invokeParams(tt.base, tt.pairs)
		if err != nil {
			t.Errorf("invokeParams(%q, %q): %v", tt.base, tt.pairs, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("invokeParams(%q, %q): got %s, want %s", tt.base, tt.pairs, got, tt.want)
		}
	}
}

func TestFormatError(t *testing.T) {
	notFound := &api.Error{Code: api.CodeCapabilityNotFound, Message: "app a.b has no capability a.b.c",
		Data: json.RawMessage(`{ "capability_id": "a.b.c" }`)}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain", errors.New("something failed"), "pcpctl: something failed\n"},
		{"api error with data", notFound,
			"pcpctl: CAPABILITY_NOT_FOUND: app a.b has no capability a.b.c\n{\"capability_id\":\"a.b.c\"}\n"},
		{"api error with map data", &api.Error{Code: api.CodePermissionDenied, Message: "no", Data: map[string]any{"uid": 7}},
			"pcpctl: PERMISSION_DENIED: no\n{\"uid\":7}\n"},
		{"api error without message or data", &api.Error{Code: api.CodeRateLimited},
			"pcpctl: RATE_LIMITED: Rate limited\n"},
		{"null data", &api.Error{Code: api.CodeInternalError, Message: "x", Data: json.RawMessage("null")},
			"pcpctl: INTERNAL_ERROR: x\n"},
		{"wrapped api error", fmt.Errorf("m.json: %w", &api.Error{Code: api.CodeManifestInvalid, Message: "manifest: expected object"}),
			"pcpctl: MANIFEST_INVALID: m.json: manifest: expected object\n"},
		{"unknown code", &api.Error{Code: -32050, Message: "odd"}, "pcpctl: ERROR_-32050: odd\n"},
		{"with the next step", &api.Error{Code: api.CodeSurfaceNotFound, Message: "surface x/1 does not exist"},
			"pcpctl: SURFACE_NOT_FOUND: surface x/1 does not exist\nnext: pcpctl context lists the surfaces pcpd sees (none without a desktop; pcpctl health lists the adapters)\n"},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, FormatError(tt.err)); diff != "" {
			t.Errorf("%s: FormatError (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("x"), ExitFailure},
		{&api.Error{Code: api.CodeAppNotFound}, ExitFailure},
		{usagef("bad"), ExitUsage},
		{fmt.Errorf("wrapped: %w", usagef("bad")), ExitUsage},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v): got %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestClean(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text", "plain text"},
		{"héllo wörld ✓", "héllo wörld ✓"},
		{"tab\there", `tab\there`},
		{"new\nline", `new\nline`},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"rtl\u202eoverride", `rtl\u202eoverride`},
		{"bad\xffbyte", `bad\xffbyte`},
		{"real \ufffd stays", "real \ufffd stays"},
	}
	for _, tt := range tests {
		if got := clean(tt.in); got != tt.want {
			t.Errorf("clean(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"longer than ten", 10, "longer th…"},
		{"ünïcödé ünïcödé", 8, "ünïcödé…"},
	}
	for _, tt := range tests {
		if got := truncate(tt.in, tt.n); got != tt.want {
			t.Errorf("truncate(%q, %d): got %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestEventLine(t *testing.T) {
	members := map[string]json.RawMessage{
		"capability_id": json.RawMessage(`"org.example.mail.compose"`),
		"duration_ms":   json.RawMessage(`12`),
		"reason":        json.RawMessage(`"too many requests"`),
		"ok":            json.RawMessage(`true`),
		"bounds":        json.RawMessage(`{"x": 1, "y": 2}`),
		"empty":         json.RawMessage(`""`),
		"evil":          json.RawMessage(`"\u001b[2J"`),
	}
	got := eventLine(7, 0, "capability.invoked", members)
	want := `7 - capability.invoked bounds={"x":1,"y":2} capability_id=org.example.mail.compose duration_ms=12 empty="" evil="\x1b[2J" ok=true reason="too many requests"`
	if got != want {
		t.Errorf("eventLine:\ngot  %s\nwant %s", got, want)
	}
	if got, want := eventLine(1, 0, "app.connected", nil), "1 - app.connected"; got != want {
		t.Errorf("eventLine without members: got %q, want %q", got, want)
	}
}
