package frame

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/internal/golden"
)

const docFile = "../../docs/framed.md"

// registryTable renders Registry() as the Markdown table of docs/framed.md.
func registryTable() string {
	var sb strings.Builder
	sb.WriteString("| # | type | direction | live | payload |\n|---:|---|---|---|---|\n")
	for _, in := range Registry() {
		live := "yes"
		if !in.Live {
			live = "no"
		}
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | `%s` |\n", in.Type, in.Name, in.Direction, live, in.Payload)
	}
	return sb.String()
}

// TestDoc keeps docs/framed.md's registry table generated from Registry()
// and its hex examples equal to the golden frames.
func TestDoc(t *testing.T) {
	doc, err := os.ReadFile(docFile)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- registry:begin -->\n", "<!-- registry:end -->"
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("%s: registry markers missing", docFile)
	}
	want := registryTable()
	if got := string(doc[i+len(begin) : j]); got != want {
		if !*golden.Update {
			t.Errorf("%s: registry table is stale; run go test ./internal/frame -update", docFile)
		} else {
			doc = append(append(append([]byte(nil), doc[:i+len(begin)]...), want...), doc[j:]...)
			if err := os.WriteFile(docFile, doc, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, g := range goldenFrames[:2] { // ping, execute_request
		block := "```\n" + hexDump(Append(nil, g.f)) + "```\n"
		if !bytes.Contains(doc, []byte(block)) {
			t.Errorf("%s: no hex example of the %s golden frame:\n%s", docFile, g.name, block)
		}
	}
}
