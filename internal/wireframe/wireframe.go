// Package wireframe draws a surface's semantic element tree as an SVG
// picture: one outlined box per element at its bounds, deeper elements
// drawn over their ancestors, each labelled at most once with its role
// and label, inside its box, cut to fit and never over another label;
// the whole text is the box's tooltip (<title>). The markup
// is self-contained (no scripts, no external references, no fonts to
// fetch), so it can be written to a file or embedded in a page as it is.
// Labels come from applications and are untrusted: they are escaped, and
// cut to a bounded length.
package wireframe

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/pcp-dev/pcp/api"
)

// MaxElements bounds how many elements one picture draws; the rest are
// counted in a note at the bottom.
const MaxElements = 5000

// maxLabel bounds a drawn label, in runes; maxTooltip the label in the
// tooltip, which shows it whole short of that.
const (
	maxLabel   = 40
	maxTooltip = 2000
)

// SVG returns the picture of root's tree. Elements without bounds, or of
// zero size, are not drawn but their children are. Coordinates are moved
// so that the top-left corner of everything drawn is at (0, 0), with a
// margin.
func SVG(root *api.Element) []byte {
	var boxes []box
	skipped, outside := 0, 0
	// frame is the outermost box drawn (the window, usually): an element
	// wholly outside it is off the screen or hidden (toolkits put those
	// at coordinates such as -2^31), and drawing it would shrink
	// everything else to nothing.
	var frame *api.Bounds
	var walk func(el *api.Element, depth int)
	walk = func(el *api.Element, depth int) {
		if b := el.Bounds; b != nil && b.W > 0 && b.H > 0 {
			if frame == nil {
				frame = b
			}
			switch {
			case !intersects(*b, *frame):
				outside++
			case len(boxes) < MaxElements:
				boxes = append(boxes, box{el: el, depth: depth})
			default:
				skipped++
			}
		}
		for i := range el.Children {
			walk(&el.Children[i], depth+1)
		}
	}
	walk(root, 0)

	const margin = 8
	minX, minY, maxX, maxY := 0, 0, 1, 1
	for i, bx := range boxes {
		b := bx.el.Bounds
		if i == 0 || b.X < minX {
			minX = b.X
		}
		if i == 0 || b.Y < minY {
			minY = b.Y
		}
		if i == 0 || b.X+b.W > maxX {
			maxX = b.X + b.W
		}
		if i == 0 || b.Y+b.H > maxY {
			maxY = b.Y + b.H
		}
	}
	w, h := maxX-minX+2*margin, maxY-minY+2*margin
	noteH := 0
	if skipped > 0 || outside > 0 || len(boxes) == 0 {
		noteH = 20
	}

	labels := placeLabels(boxes, minX-margin, minY-margin)

	var out bytes.Buffer
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="%d">`+"\n", w, h+noteH, w, h+noteH, fontSize)
	fmt.Fprintf(&out, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h+noteH)
	for i, bx := range boxes {
		b := bx.el.Bounds
		x, y := b.X-minX+margin, b.Y-minY+margin
		stroke := palette[bx.depth%len(palette)]
		// The box is filled (invisibly) so that hovering anywhere in it
		// shows its tooltip: the deepest element under the pointer wins,
		// being drawn last.
		fmt.Fprintf(&out, `<g><title>%s</title>`, esc(tooltip(bx.el)))
		fmt.Fprintf(&out, `<rect x="%d" y="%d" width="%d" height="%d" fill="#ffffff" fill-opacity="0" stroke="%s" stroke-width="1"/>`, x, y, b.W, b.H, stroke)
		if l := labels[i]; l.text != "" {
			// A nested viewport clips the label to its box, whatever
			// the font's real widths.
			fmt.Fprintf(&out, `<svg x="%d" y="%d" width="%d" height="%d"><text x="2" y="%d" fill="%s">%s</text></svg>`,
				x, y, b.W, b.H, l.dy+fontSize-1, stroke, esc(l.text))
		}
		out.WriteString("</g>\n")
	}
	switch {
	case len(boxes) == 0:
		fmt.Fprintf(&out, `<text x="%d" y="%d" fill="#555555">no element has bounds</text>`+"\n", margin, h+14)
	case skipped > 0 || outside > 0:
		var notes []string
		if skipped > 0 {
			notes = append(notes, fmt.Sprintf("%d more elements not drawn", skipped))
		}
		if outside > 0 {
			notes = append(notes, fmt.Sprintf("%d elements outside the window not drawn", outside))
		}
		fmt.Fprintf(&out, `<text x="%d" y="%d" fill="#555555">%s</text>`+"\n", margin, h+14, strings.Join(notes, "; "))
	}
	out.WriteString("</svg>\n")
	return out.Bytes()
}

// Label geometry, at fontSize: a line is lineH pixels tall, and a
// character at most charW wide on average (a conservative figure for
// sans-serif, so that a cut label fits before the clip does its work).
const (
	fontSize = 10
	lineH    = 12
	charW    = 6
)

// label is where a box's caption goes: its text (empty: none) and its
// line's offset from the box's top.
type label struct {
	text string
	dy   int
}

type rect struct{ x0, y0, x1, y1 int }

func (a rect) overlaps(b rect) bool { return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1 }

// placeLabels gives each box at most one label, inside the box, cut to
// its width, where it overlaps no label already placed: the smallest
// boxes (the most specific elements: buttons, fields) choose first,
// each trying its top line, then its bottom line. A box with no room
// keeps its text in its tooltip only. (ox, oy) is the drawing's origin.
func placeLabels(boxes []box, ox, oy int) []label {
	out := make([]label, len(boxes))
	order := make([]int, len(boxes))
	for i := range order {
		order[i] = i
	}
	area := func(i int) int { b := boxes[i].el.Bounds; return b.W * b.H }
	sort.SliceStable(order, func(a, b int) bool { return area(order[a]) < area(order[b]) })
	var placed []rect
	for _, i := range order {
		b := boxes[i].el.Bounds
		if b.W < 4*charW || b.H < lineH {
			continue
		}
		text := caption(boxes[i].el, b.W)
		tw := min(utf8.RuneCountInString(text)*charW+4, b.W)
		x, y := b.X-ox, b.Y-oy
		for _, dy := range []int{0, b.H - lineH} {
			r := rect{x, y + dy, x + tw, y + dy + lineH}
			free := true
			for _, p := range placed {
				if p.overlaps(r) {
					free = false
					break
				}
			}
			if free {
				placed = append(placed, r)
				out[i] = label{text: text, dy: dy}
				break
			}
			if b.H < 2*lineH {
				break // one line: no other place
			}
		}
	}
	return out
}

func intersects(a, b api.Bounds) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

type box struct {
	el    *api.Element
	depth int
}

// palette colours boxes by depth, so nesting reads at a glance.
var palette = []string{"#1f4e79", "#2e7d32", "#b35900", "#6a1b9a", "#c62828", "#00838f"}

// caption is what is written in a box: role and label, cut to fit.
func caption(el *api.Element, width int) string {
	s := el.Role
	if el.Label != "" {
		s += " " + cut(el.Label, maxLabel)
	}
	return cut(s, max((width-4)/charW, 3))
}

// tooltip is the hover text: everything known of the element.
func tooltip(el *api.Element) string {
	var b strings.Builder
	b.WriteString(el.Role)
	if el.Label != "" {
		b.WriteString(" " + cut(el.Label, maxTooltip))
	}
	b.WriteString("\nid: " + cut(el.ID, 200))
	if len(el.Actions) > 0 {
		b.WriteString("\nactions: " + cut(strings.Join(el.Actions, ", "), 200))
	}
	if len(el.States) > 0 {
		b.WriteString("\nstates: " + cut(strings.Join(el.States, ", "), 400))
	}
	if bb := el.Bounds; bb != nil {
		fmt.Fprintf(&b, "\nbounds: %dx%d at (%d,%d)", bb.W, bb.H, bb.X, bb.Y)
	}
	return b.String()
}

// cut shortens s to n runes, marking the cut, and drops what is not
// valid UTF-8 or not allowed in XML.
func cut(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !xmlChar(r) {
			return -1
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// xmlChar reports whether r may appear in XML 1.0 text.
func xmlChar(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' ||
		(r >= 0x20 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
}

func esc(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
