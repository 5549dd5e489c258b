package pavo

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

const treeData = `{"root":{"id":"w","role":"frame","label":"Inbox <b>","bounds":{"x":0,"y":0,"w":100,"h":50},` +
	`"children":[{"id":"s","role":"push button","label":"Send\u001b[2J","bounds":{"x":5,"y":5,"w":40,"h":20},"actions":["click"]}]}}`

// TestRenderKinds renders every claimed kind on every surface, with the
// formats a host may ask for, and checks the model type each gives.
func TestRenderKinds(t *testing.T) {
	t.Parallel()
	data := map[string]string{
		KindElementTree: `{"elements":` + treeData + `}`,
		KindAuditLog:    `{"audit":[{"seq":3,"time":"` + t0 + `","kind":"invoke","actor":"agent:uid=1,pid=2","app_id":"a","capability_id":"a.b","outcome":"success","duration_us":1,"prev_hash":"` + hashA + `","hash":"` + hashB + `"}]}`,
		KindAuditChain:  `{"audit_chain":{"ok":true,"entries":3,"head":"` + hashB + `"}}`,
	}
	want := map[string]map[string]string{ // kind → surface/format → model type
		KindElementTree: {"cli": "text", "tui": "text", "web": "svg", "cli/svg": "svg", "web/text": "text", "web/png": "svg", "tui/png": "text"},
		KindAuditLog:    {"cli": "rows", "tui": "rows", "web": "rows", "web/svg": "rows"},
		KindAuditChain:  {"cli": "text", "tui": "text", "web": "text"},
	}
	d := &Driver{}
	for kind, cases := range want {
		for sf, wantType := range cases {
			surface, format, _ := strings.Cut(sf, "/")
			line := fmt.Sprintf(`{"op":"render","kind":%q,"node":{"kind":%q},"data":%s,"surface":%q,"format":%q}`, kind, kind, data[kind], surface, format)
			reply := d.Handle(t.Context(), []byte(line))
			validate(t, "RenderReply", reply)
			var r struct {
				Result struct {
					Type   string     `json:"type"`
					Markup string     `json:"markup"`
					Lines  []string   `json:"lines"`
					Rows   [][]string `json:"rows"`
				} `json:"result"`
			}
			json.Unmarshal(reply, &r)
			if r.Result.Type != wantType {
				t.Errorf("%s on %s: got %s, want type %s", kind, sf, reply, wantType)
				continue
			}
			checkNoMarkup(t, kind+" on "+sf, r.Result.Type, r.Result.Markup, r.Result.Lines, r.Result.Rows)
		}
	}
}

var tagRe = regexp.MustCompile(`<[a-zA-Z/!]`)

// checkNoMarkup: no HTML outside svg, and the svg is one well-formed,
// self-contained element.
func checkNoMarkup(t *testing.T, what, typ, markup string, lines []string, rows [][]string) {
	t.Helper()
	for _, l := range lines {
		if strings.ContainsRune(l, 0x1b) {
			t.Errorf("%s: a line carries an escape sequence: %q", what, l)
		}
	}
	for _, r := range rows {
		for _, c := range r {
			if tagRe.MatchString(c) {
				t.Errorf("%s: a cell carries markup: %q", what, c)
			}
		}
	}
	if typ != "svg" {
		return
	}
	if !strings.HasPrefix(markup, "<svg ") || strings.Contains(markup, "<script") || strings.Contains(markup, "href") {
		t.Errorf("%s: markup is not a self-contained svg: %.200s", what, markup)
	}
	dec := xml.NewDecoder(strings.NewReader(markup))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Errorf("%s: markup is not well-formed XML: %v", what, err)
			break
		}
	}
}

func TestRenderDegrades(t *testing.T) {
	t.Parallel()
	d := &Driver{}
	tests := []struct{ line, want string }{
		{`{"op":"render","kind":"pcp.element-tree","node":{"query":"tree"},"data":{"tree":{"error":"SURFACE_NOT_FOUND"}},"surface":"web"}`,
			`{"ok":true,"result":{"type":"placeholder","component":"pcp.element-tree","props":{"error":"SURFACE_NOT_FOUND","query":"tree"}}}`},
		{`{"op":"render","kind":"pcp.audit-log","node":{},"surface":"web"}`,
			`{"ok":true,"result":{"type":"placeholder","component":"pcp.audit-log","props":{"error":"no data for binding \"audit\"","query":"audit"}}}`},
		{`{"op":"render","kind":"pcp.audit-log","node":{},"data":{"audit":null},"surface":"web"}`,
			`{"ok":true,"result":{"type":"placeholder","component":"pcp.audit-log","props":{"error":"no data for binding \"audit\"","query":"audit"}}}`},
		{`{"op":"render","kind":"pcp.audit-chain","node":{},"data":{"audit_chain":{"ok":false,"entries":2,"broken_seq":3,"problem":"link"}},"surface":"cli"}`,
			`{"ok":true,"result":{"type":"text","lines":["audit chain BROKEN at entry 3","problem: link","entries before it that verify: 2"]}}`},
		{`{"op":"render","kind":"stack","node":{},"surface":"cli"}`,
			`{"ok":false,"error":"render: kind \"stack\" is not claimed on surface \"cli\" (claimed on cli, tui and web: pcp.audit-chain, pcp.audit-log, pcp.element-tree)"}`},
		{`{"op":"render","kind":"pcp.element-tree","node":{},"data":{"elements":[1]},"surface":"cli"}`,
			`{"ok":false,"error":"render: data \"elements\" is not an element tree: json: cannot unmarshal array into Go value of type api.QueryElementsResult"}`},
	}
	for _, tt := range tests {
		got := string(d.Handle(t.Context(), []byte(tt.line)))
		if got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.line, got, tt.want)
		}
		validate(t, "RenderReply", []byte(got))
	}
}

// TestRenderOutlineBounded: a huge tree is cut to maxOutline lines.
func TestRenderOutlineBounded(t *testing.T) {
	t.Parallel()
	root := api.Element{ID: "r", Role: "frame"}
	for i := range maxOutline + 10 {
		root.Children = append(root.Children, api.Element{ID: fmt.Sprint(i), Role: "label"})
	}
	raw, _ := json.Marshal(api.QueryElementsResult{Root: root})
	m, err := renderElements(raw, "elements", "cli", "")
	if err != nil {
		t.Fatal(err)
	}
	lines := m.(*TextModel).Lines
	if len(lines) != maxOutline+1 || lines[len(lines)-1] != "… 11 more elements" {
		t.Errorf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
}
