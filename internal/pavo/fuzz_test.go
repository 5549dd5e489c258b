package pavo

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

// FuzzDecode feeds arbitrary lines to the op decoder and to Handle. Decode
// must never panic and must give either a request of a known op with its
// required members, or a *RequestError; Handle must answer every line with
// exactly one reply line that is a valid envelope, ok:false carrying the
// decoder's error when the line did not decode. Seeds: testdata/fuzz, and
// every request line of the golden transcripts.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"op":"manifest"}`, `{"op":"views"}`, `{"op":"jobs"}`, `{"op":"notifications"}`,
		`{"op":"view","view":"apps","params":{"state":"running"}}`,
		`{"op":"query","query":"events","params":{"limit":"3"}}`,
		`{"op":"render","kind":"pcp.element-tree","node":{"query":"elements"},"data":{"elements":` + treeData + `},"surface":"web","format":"svg"}`,
		`{"op":"submit","view":"invoke","form":"org.example.mail.send","values":{"to":"a","count":2}}`,
		`{"op":"manifest","op":"views"}`, `[`, `{"op":null}`, "\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	files, _ := filepath.Glob(filepath.Join("..", "e2e", "testdata", "pavo", "*.txtar"))
	for _, file := range files {
		ar, err := txtar.ParseFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, af := range ar.Files {
			for _, line := range strings.Split(string(af.Data), "\n") {
				if req, ok := strings.CutPrefix(line, "> "); ok {
					f.Add([]byte(req))
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := Decode(line)
		if err != nil {
			if _, ok := err.(*RequestError); !ok || err.Error() == "" {
				t.Fatalf("Decode(%q): error %T %q, want a *RequestError with a message", line, err, err)
			}
		} else {
			checkRequest(t, line, r)
		}

		reply := (&Driver{Daemon: demoDaemon()}).Handle(t.Context(), line)
		if bytes.ContainsRune(reply, '\n') {
			t.Fatalf("Handle(%q): the reply holds a newline: %q", line, reply)
		}
		var env map[string]json.RawMessage
		if json.Unmarshal(reply, &env) != nil {
			t.Fatalf("Handle(%q): the reply is not a JSON object: %q", line, reply)
		}
		switch string(env["ok"]) {
		case "true":
			if err != nil || env["result"] == nil || env["error"] != nil || len(env) != 2 {
				t.Fatalf("Handle(%q) = %s; Decode said %v", line, reply, err)
			}
		case "false":
			var msg string
			if json.Unmarshal(env["error"], &msg) != nil || msg == "" || env["result"] != nil || len(env) != 2 {
				t.Fatalf("Handle(%q) = %s, not an ok:false envelope", line, reply)
			}
			if err != nil && msg != strings.ToValidUTF8(err.Error(), "\ufffd") {
				t.Fatalf("Handle(%q): error %q, want the decoder's %q", line, msg, err)
			}
		default:
			t.Fatalf("Handle(%q) = %s: ok is not a boolean", line, reply)
		}
	})
}

// checkRequest checks a decoded request has what its op requires.
func checkRequest(t *testing.T, line []byte, r *Request) {
	t.Helper()
	bad := ""
	switch r.Op {
	case OpManifest, OpViews, OpJobs, OpNotifications:
	case OpView:
		if r.View == "" {
			bad = "no view"
		}
	case OpQuery:
		if r.Query == "" {
			bad = "no query"
		}
	case OpRender:
		if r.Kind == "" || r.Surface == "" || kindOf(r.Node) != "object" {
			bad = "no kind, surface or node object"
		}
	case OpSubmit:
		if r.View == "" {
			bad = "no view"
		}
	default:
		bad = "unknown op"
	}
	if bad != "" {
		t.Fatalf("Decode(%q) = %+v: %s", line, r, bad)
	}
}

// TestFuzzCorpus keeps the checked-in corpus in the format go test reads.
func TestFuzzCorpus(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus in testdata/fuzz/FuzzDecode (%v)", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "go test fuzz v1\n[]byte(") {
			t.Errorf("%s is not a go test fuzz v1 file", f)
		}
	}
}
