package mcp

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/pcp-dev/pcp/api"
)

// maxTextNodes bounds the elements of one compact tree; the rest is
// counted, not written.
const maxTextNodes = 2000

type elementsArgs struct {
	SurfaceID string `json:"surface_id"`
	FocusID   string `json:"focus_id,omitempty"`
	MaxDepth  int    `json:"max_depth,omitempty"`
	Format    string `json:"format,omitempty"`
}

type elementsText struct {
	SurfaceID string `json:"surface_id"`
	Tree      string `json:"tree"`
	Elements  int    `json:"elements"`
	Omitted   int    `json:"omitted,omitempty"`
}

// elements is query.elements, cut to max_depth, as compact text or JSON.
func elements(ctx context.Context, c *call) (any, error) {
	p, err := decode[elementsArgs](c)
	if err != nil {
		return nil, err
	}
	if p.MaxDepth == 0 {
		p.MaxDepth = 8
	}
	res, err := c.s.b.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: p.SurfaceID, FocusID: p.FocusID})
	if err != nil {
		return nil, err
	}
	omitted := prune(&res.Root, p.MaxDepth)
	if p.Format == "json" {
		return struct {
			*api.QueryElementsResult
			Omitted int `json:"omitted,omitempty"`
		}{res, omitted}, nil
	}
	var sb strings.Builder
	n, cut := 0, 0
	writeTree(&sb, &res.Root, 0, &n, &cut)
	out := &elementsText{SurfaceID: p.SurfaceID, Tree: sb.String(), Elements: n, Omitted: omitted + cut}
	text := out.Tree
	if out.Omitted > 0 {
		text += fmt.Sprintf("(%d elements below max_depth or past %d not shown)\n", out.Omitted, maxTextNodes)
	}
	return &textResult{text: text, structured: out}, nil
}

// prune cuts the tree below depth and returns how many elements it cut.
func prune(e *api.Element, depth int) int {
	if depth <= 1 {
		n := count(e) - 1
		e.Children = nil
		return n
	}
	cut := 0
	for i := range e.Children {
		cut += prune(&e.Children[i], depth-1)
	}
	return cut
}

func count(e *api.Element) int {
	n := 1
	for i := range e.Children {
		n += count(&e.Children[i])
	}
	return n
}

// writeTree writes one element a line, indented by depth:
//
//	push button "7" [:1.4|/org/a11y/atspi/accessible/152] {sensitive} actions=activate
func writeTree(sb *strings.Builder, e *api.Element, depth int, n, cut *int) {
	if *n >= maxTextNodes {
		*cut += count(e)
		return
	}
	*n++
	sb.WriteString(strings.Repeat("  ", depth))
	sb.WriteString(oneLine(e.Role))
	if e.Label != "" {
		sb.WriteByte(' ')
		sb.WriteString(strconv.Quote(oneLine(e.Label)))
	}
	sb.WriteString(" [")
	sb.WriteString(e.ID)
	sb.WriteByte(']')
	if len(e.States) > 0 {
		sb.WriteString(" {")
		sb.WriteString(strings.Join(e.States, ","))
		sb.WriteByte('}')
	}
	if len(e.Actions) > 0 {
		sb.WriteString(" actions=")
		sb.WriteString(strings.Join(e.Actions, ","))
	}
	if len(e.Value) > 0 && string(e.Value) != "null" {
		v := string(e.Value)
		if len(v) > 200 {
			v = v[:200] + "…"
		}
		sb.WriteString(" value=")
		sb.WriteString(oneLine(v))
	}
	sb.WriteByte('\n')
	for i := range e.Children {
		writeTree(sb, &e.Children[i], depth+1, n, cut)
	}
}

// oneLine keeps untrusted text on one line.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r < 0x20 {
			return ' '
		}
		return r
	}, s)
}
