package wireframe

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

// parse checks that b is well-formed XML and counts its rect and text
// elements and the text they carry.
func parse(t *testing.T, b []byte) (rects int, texts []string) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	inText := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, b)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			switch v.Name.Local {
			case "rect":
				rects++
			case "text":
				inText = true
			case "script", "image", "use", "foreignObject":
				t.Fatalf("element <%s> in a self-contained picture", v.Name.Local)
			}
			for _, a := range v.Attr {
				if a.Name.Local == "href" || strings.HasPrefix(a.Name.Local, "on") {
					t.Fatalf("attribute %s in a self-contained picture", a.Name.Local)
				}
			}
		case xml.EndElement:
			if v.Name.Local == "text" {
				inText = false
			}
		case xml.CharData:
			if inText {
				texts = append(texts, string(v))
			}
		}
	}
}

func TestSVG(t *testing.T) {
	root := api.Element{ID: "w", Role: "frame", Label: "Calculator", Bounds: &api.Bounds{X: 100, Y: 50, W: 300, H: 200}, Children: []api.Element{
		{ID: "b1", Role: "push button", Label: "2", Bounds: &api.Bounds{X: 110, Y: 60, W: 90, H: 30}},
		{ID: "b2", Role: "push button", Label: `<script>alert("x")</script> & more`, Bounds: &api.Bounds{X: 210, Y: 60, W: 180, H: 30}},
		{ID: "b3", Role: "push button", Label: "narrow", Bounds: &api.Bounds{X: 110, Y: 130, W: 40, H: 30}},
		{ID: "hidden", Role: "label", Label: "no bounds", Children: []api.Element{
			{ID: "deep", Role: "label", Label: "inside", Bounds: &api.Bounds{X: 110, Y: 100, W: 100, H: 20}},
		}},
		{ID: "zero", Role: "filler", Bounds: &api.Bounds{X: 0, Y: 0, W: 0, H: 10}},
	}}
	out := SVG(&root)
	rects, texts := parse(t, out)
	// The background, and the four elements with an area.
	if rects != 6 {
		t.Errorf("rects = %d, want 6 (background + 5 elements)\n%s", rects, out)
	}
	joined := strings.Join(texts, "|")
	for _, want := range []string{"frame Calculator", "push button 2", "label inside", `push button <script>alert(`, "push …"} {
		if !strings.Contains(joined, want) {
			t.Errorf("texts %q lack %q", joined, want)
		}
	}
	if bytes.Contains(out, []byte("<script>")) {
		t.Error("a label's markup reached the picture unescaped")
	}
	// Moved to the origin with an 8 px margin: the frame at (8, 8).
	if !bytes.Contains(out, []byte(`<rect x="8" y="8" width="300" height="200"`)) {
		t.Errorf("the frame is not drawn at the margin:\n%s", out)
	}
}

func TestSVGHostile(t *testing.T) {
	root := api.Element{ID: "r", Role: "frame", Label: "bad \x00\x01\xff\ufffe bytes " + strings.Repeat("é", 1000), Bounds: &api.Bounds{W: 500, H: 100}}
	for range MaxElements + 10 {
		root.Children = append(root.Children, api.Element{ID: "c", Role: "cell", Bounds: &api.Bounds{W: 1, H: 1}})
	}
	out := SVG(&root)
	_, texts := parse(t, out)
	if !strings.Contains(strings.Join(texts, "|"), "11 more elements not drawn") {
		t.Errorf("the note of elements left out is missing: %q", texts[len(texts)-1])
	}
	empty := SVG(&api.Element{ID: "e", Role: "frame"})
	if _, texts := parse(t, empty); len(texts) != 1 || texts[0] != "no element has bounds" {
		t.Errorf("empty tree: texts %q", texts)
	}
}

// Labels never overlap: nested boxes that share a corner (a window, its
// panel, its first button) get their labels on different lines or none,
// each label is drawn once, inside its box (a nested viewport of the
// box's size clips it), and the tooltip carries the whole text.
func TestSVGLabelsDoNotOverlap(t *testing.T) {
	long := strings.Repeat("a very long label ", 20)
	root := api.Element{ID: "w", Role: "frame", Label: "Window", Bounds: &api.Bounds{X: 0, Y: 0, W: 400, H: 300}, Children: []api.Element{
		{ID: "p", Role: "panel", Label: "Panel", Bounds: &api.Bounds{X: 0, Y: 0, W: 400, H: 40}, Children: []api.Element{
			{ID: "b1", Role: "push button", Label: "1", Bounds: &api.Bounds{X: 0, Y: 0, W: 60, H: 40}},
			{ID: "b2", Role: "push button", Label: long, Bounds: &api.Bounds{X: 60, Y: 0, W: 100, H: 40}},
			{ID: "b3", Role: "push button", Label: "tiny", Bounds: &api.Bounds{X: 160, Y: 0, W: 60, H: 10}},
		}},
	}}
	out := SVG(&root)
	type placed struct {
		box  [4]int
		line [4]int
		text string
	}
	var labels []placed
	d := xml.NewDecoder(bytes.NewReader(out))
	var cur *placed
	depth := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if v.Name.Local == "svg" {
				depth++
				if depth == 2 {
					cur = &placed{}
					for _, a := range v.Attr {
						var n int
						fmt.Sscan(a.Value, &n)
						switch a.Name.Local {
						case "x":
							cur.box[0] = n
						case "y":
							cur.box[1] = n
						case "width":
							cur.box[2] = n
						case "height":
							cur.box[3] = n
						}
					}
				}
			}
			if v.Name.Local == "text" && cur != nil {
				for _, a := range v.Attr {
					if a.Name.Local == "y" {
						var n int
						fmt.Sscan(a.Value, &n)
						cur.line[1] = cur.box[1] + n - fontSize + 1
					}
				}
			}
		case xml.CharData:
			if cur != nil {
				cur.text += string(v)
			}
		case xml.EndElement:
			if v.Name.Local == "svg" {
				if depth == 2 && cur != nil {
					labels = append(labels, *cur)
					cur = nil
				}
				depth--
			}
		}
	}
	if len(labels) < 3 {
		t.Fatalf("%d labels drawn, want at least the three that fit:\n%s", len(labels), out)
	}
	for i, a := range labels {
		w := min(len([]rune(a.text))*charW+4, a.box[2])
		ra := rect{a.box[0], a.line[1], a.box[0] + w, a.line[1] + lineH}
		if ra.y0 < a.box[1] || ra.y1 > a.box[1]+a.box[3] {
			t.Errorf("label %q leaves its box %v", a.text, a.box)
		}
		if len([]rune(a.text))*charW > a.box[2] {
			t.Errorf("label %q is wider than its box %v", a.text, a.box)
		}
		for _, b := range labels[i+1:] {
			wb := min(len([]rune(b.text))*charW+4, b.box[2])
			if ra.overlaps(rect{b.box[0], b.line[1], b.box[0] + wb, b.line[1] + lineH}) {
				t.Errorf("labels %q and %q overlap", a.text, b.text)
			}
		}
	}
	if strings.Contains(string(out), ">push button tiny<") {
		t.Error("a box 10 px high got a label")
	}
	if !strings.Contains(string(out), "<title>push button "+strings.TrimSpace(long)) {
		t.Error("the tooltip lacks the whole label")
	}
}

// An element wholly outside the window (a hidden page of a notebook,
// which GTK puts at -2^31) is not drawn, and does not shrink the
// picture; a note counts it.
func TestSVGOutsideTheWindow(t *testing.T) {
	root := api.Element{ID: "w", Role: "frame", Label: "Window", Bounds: &api.Bounds{X: 0, Y: 0, W: 400, H: 300}, Children: []api.Element{
		{ID: "in", Role: "push button", Label: "OK", Bounds: &api.Bounds{X: 10, Y: 10, W: 80, H: 30}},
		{ID: "off", Role: "push button", Label: "Hidden", Bounds: &api.Bounds{X: -2147483648, Y: -2147483648, W: 80, H: 30}},
	}}
	out := SVG(&root)
	if !bytes.HasPrefix(out, []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="416" height="336"`)) {
		t.Errorf("the picture is not the window's size:\n%s", out)
	}
	_, texts := parse(t, out)
	joined := strings.Join(texts, "|")
	if strings.Contains(joined, "Hidden") || !strings.Contains(joined, "1 elements outside the window not drawn") {
		t.Errorf("texts %q: want the hidden button left out and counted", joined)
	}
}
