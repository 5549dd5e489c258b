package tier1

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/internal/golden"

	"golang.org/x/tools/txtar"

	"github.com/pcp-dev/pcp/internal/frame"
)

const goldenFile = "testdata/payloads.txtar"

const goldenComment = `Golden Tier 1 payloads: each section is the exact CBOR payload of one
message, in hex, 16 bytes a line, named after a sample in codec_test.go
(an empty section is the empty payload). Run go test ./internal/tier1
-update to rewrite them after an intended schema change.
`

// hexDump formats b as space-separated hex bytes, 16 a line.
func hexDump(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		switch {
		case i == 0:
		case i%16 == 0:
			sb.WriteByte('\n')
		default:
			sb.WriteByte(' ')
		}
		sb.WriteString(hex.EncodeToString([]byte{c}))
	}
	if len(b) > 0 {
		sb.WriteByte('\n')
	}
	return sb.String()
}

func mustEncode(t testing.TB, m Message) []byte {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatalf("Encode(%s) error = %v", m.Type(), err)
	}
	return b
}

// TestGolden pins the bytes of every sample, so a change of key numbers,
// types or options cannot slip through without a reviewed diff.
func TestGolden(t *testing.T) {
	if *golden.Update {
		ar := &txtar.Archive{Comment: []byte(goldenComment)}
		for _, s := range samples {
			ar.Files = append(ar.Files, txtar.File{Name: s.name, Data: []byte(hexDump(mustEncode(t, s.m)))})
		}
		golden.Write(t, goldenFile, ar)
		writeSeeds(t)
	}
	ar := golden.Load(t, goldenFile)
	if got, want := len(ar.Files), len(samples); got != want {
		t.Fatalf("%s has %d sections, want %d", goldenFile, got, want)
	}
	for i, s := range samples {
		t.Run(s.name, func(t *testing.T) {
			sec := ar.Files[i]
			if sec.Name != s.name {
				t.Fatalf("section %d is %q, want %q", i, sec.Name, s.name)
			}
			want, err := hex.DecodeString(strings.Join(strings.Fields(string(sec.Data)), ""))
			if err != nil {
				t.Fatal(err)
			}
			if got := mustEncode(t, s.m); !bytes.Equal(got, want) {
				t.Errorf("Encode(%s) =\n%swant\n%s", s.name, hexDump(got), hexDump(want))
			}
		})
	}
}

// TestDocExample keeps the worked example of docs/tier1.md equal to the
// golden bytes.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/tier1.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		if s.name != "invoke_capability" {
			continue
		}
		block := "```\n" + hexDump(mustEncode(t, s.m)) + "```\n"
		if !bytes.Contains(doc, []byte(block)) {
			t.Errorf("docs/tier1.md: no hex example of the %s sample:\n%s", s.name, block)
		}
	}
}

// hostileSeeds are malformed payloads added to every fuzz target's seed
// corpus, so the fuzzer starts from the edges as well as from valid
// messages.
var hostileSeeds = map[string]string{
	"indefinite": "bf0107ff",
	"duplicate":  "a201070108",
	"trailing":   "a0a0",
	"tagged":     "c1a0",
	"nested":     "a2010102818181818181818181818181818181818181616b",
	"unknown":    "a11863f6",
	"truncated":  "a3010702",
}

// fuzzTarget names the fuzz target of each type.
func fuzzTarget(t frame.Type) string { return "FuzzDecode" + t.String() }

// writeSeeds writes the seed corpus of each fuzz target: the samples of its
// type and the hostile seeds.
func writeSeeds(t *testing.T) {
	for _, ty := range fuzzTypes {
		dir := filepath.Join("testdata", "fuzz", fuzzTarget(ty))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		seeds := map[string][]byte{}
		for _, s := range samples {
			if s.m.Type() == ty {
				seeds[s.name] = mustEncode(t, s.m)
			}
		}
		for name, hx := range hostileSeeds {
			b, _ := hex.DecodeString(hx)
			seeds["hostile_"+name] = b
		}
		for name, b := range seeds {
			data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
