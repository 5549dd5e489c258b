package wireframe

import (
	"bytes"
	"encoding/xml"
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
	for _, want := range []string{"frame Calculator", "push button 2", "label inside", `<script>alert("x"`, "push …"} {
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
