package pavo

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/wireframe"
)

// Render formats a host may ask for.
const (
	formatSVG  = "svg"
	formatText = "text"
)

// maxOutline bounds the lines of an element tree drawn as text.
const maxOutline = 2000

// defaultBinding is the binding a node of a kind reads when the node does
// not name one.
var defaultBinding = map[string]string{
	KindElementTree: "elements",
	KindAuditLog:    "audit",
	KindAuditChain:  "audit_chain",
}

// renderOp renders one of this driver's nodes from a view's data. It
// needs no daemon: everything comes in the request.
func (d *Driver) renderOp(_ context.Context, r *Request) (any, error) {
	if !slices.Contains(surfaces, r.Surface) || !slices.Contains(renderKinds, r.Kind) {
		return nil, fmt.Errorf("render: kind %s is not claimed on surface %s (claimed on cli, tui and web: %s)",
			quote(r.Kind), quote(r.Surface), strings.Join(renderKinds, ", "))
	}
	var node struct {
		Query json.RawMessage `json:"query"`
	}
	json.Unmarshal(r.Node, &node) // r.Node is an object; members of other types are checked below
	name := defaultBinding[r.Kind]
	if node.Query != nil && !isNull(node.Query) {
		if err := stringMember(node.Query, "query", &name); err != nil {
			return nil, fmt.Errorf("render: node: %v", err)
		}
	}
	raw, ok := r.Data[name]
	if !ok || isNull(raw) {
		return placeholder(r.Kind, name, fmt.Sprintf("no data for binding %s", quote(name))), nil
	}
	var be struct {
		Error *string `json:"error"`
	}
	if kindOf(raw) == "object" && json.Unmarshal(raw, &be) == nil && be.Error != nil {
		return placeholder(r.Kind, name, *be.Error), nil
	}
	switch r.Kind {
	case KindElementTree:
		return renderElements(raw, name, r.Surface, r.Format)
	case KindAuditLog:
		return renderAuditLog(raw, name)
	default:
		return renderAuditChain(raw, name)
	}
}

func placeholder(kind, binding, msg string) *PlaceholderModel {
	return &PlaceholderModel{Type: RenderPlaceholder, Component: kind, Props: map[string]any{"query": binding, "error": msg}}
}

// renderElements draws an element tree: SVG on the web (or when asked
// with format "svg"), an indented outline on the terminal surfaces (or
// with format "text"). Other formats are hints it does not serve, and get
// the surface's default.
func renderElements(raw json.RawMessage, name, surface, format string) (any, error) {
	var res api.QueryElementsResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("render: data %s is not an element tree: %v", quote(name), err)
	}
	svg := surface == "web"
	switch format {
	case formatSVG:
		svg = true
	case formatText:
		svg = false
	}
	if svg {
		return &SVGModel{Type: RenderSVG, Markup: string(wireframe.SVG(&res.Root))}, nil
	}
	lines := []string{}
	skipped := 0
	var walk func(el *api.Element, depth int)
	walk = func(el *api.Element, depth int) {
		if len(lines) < maxOutline {
			lines = append(lines, outlineLine(el, depth))
		} else {
			skipped++
		}
		for i := range el.Children {
			walk(&el.Children[i], depth+1)
		}
	}
	walk(&res.Root, 0)
	if skipped > 0 {
		lines = append(lines, fmt.Sprintf("… %d more elements", skipped))
	}
	return &TextModel{Type: RenderText, Lines: lines}, nil
}

// outlineLine is one element of the outline: role "label" (id), its
// actions, states and bounds.
func outlineLine(el *api.Element, depth int) string {
	var b strings.Builder
	b.WriteString(strings.Repeat("  ", depth))
	role := el.Role
	if role == "" {
		role = "-"
	}
	b.WriteString(printable(role))
	if el.Label != "" {
		b.WriteString(" " + strconv.Quote(cut(el.Label, 80)))
	}
	b.WriteString(" (" + printable(el.ID) + ")")
	if len(el.Actions) > 0 {
		b.WriteString(" actions=" + printable(strings.Join(el.Actions, ",")))
	}
	if len(el.States) > 0 {
		b.WriteString(" states=" + printable(strings.Join(el.States, ",")))
	}
	if bb := el.Bounds; bb != nil {
		fmt.Fprintf(&b, " %dx%d@%d,%d", bb.W, bb.H, bb.X, bb.Y)
	}
	return b.String()
}

// printable drops control characters, so an app's strings cannot move a
// terminal's cursor.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return -1
		}
		return r
	}, cut(s, 200))
}

// renderAuditLog is the audit entries as rows, newest first as bound.
func renderAuditLog(raw json.RawMessage, name string) (any, error) {
	var entries []api.AuditEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("render: data %s is not a list of audit entries: %v", quote(name), err)
	}
	rows := make([][]string, 0, len(entries))
	for _, e := range entries {
		rows = append(rows, []string{itoa(e.Seq), e.Time, e.Kind, printable(e.Actor), printable(e.AppID),
			printable(e.CapabilityID), printable(e.Outcome)})
	}
	return &RowsModel{
		Type:    RenderRows,
		Headers: []string{"SEQ", "TIME", "KIND", "ACTOR", "APP", "CAPABILITY", "OUTCOME"},
		Aligns:  []string{"right", "left", "left", "left", "left", "left", "left"},
		Rows:    rows,
	}, nil
}

// renderAuditChain says whether the chain verifies.
func renderAuditChain(raw json.RawMessage, name string) (any, error) {
	var v api.AuditVerifyResult
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("render: data %s is not an audit chain status: %v", quote(name), err)
	}
	var lines []string
	if v.OK {
		lines = append(lines, fmt.Sprintf("audit chain intact: %d entries", v.Entries))
		if v.Head != "" {
			lines = append(lines, "head: "+printable(v.Head))
		}
	} else {
		lines = append(lines, fmt.Sprintf("audit chain BROKEN at entry %d", v.BrokenSeq),
			"problem: "+printable(v.Problem), fmt.Sprintf("entries before it that verify: %d", v.Entries))
	}
	return &TextModel{Type: RenderText, Lines: lines}, nil
}
