package scomp

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/internal/core"
)

// FuzzHandle feeds one arbitrary text frame to a connection before its
// handshake and then to the same connection once live (the decoder, the
// handshake and, after it, eval). It must never panic, and every answer
// must be one JSON-RPC 2.0 response.
func FuzzHandle(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"handshake","params":{"protocol":"0.1","bindings":[{"name":"notify","input":{"type":"object"},"output":{"type":"null"}}]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"handshake","params":{"protocol":"0.1","bindings":[{"name":"x","input":{"$ref":"http://example.com/s"}}]}}`,
		`{"jsonrpc":"2.0","id":"a","method":"eval","params":{"code":"1 + 1"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"eval","params":{"code":"await pcp_inspection_ping({payload: [1, 'x']})"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"eval"}]`,
		`{"jsonrpc":"2.0","method":"release_ref","params":{}}`,
		`{"jsonrpc":"2.0","id":3,"method":"invoke","params":{"ref":"f1","input":1}}`,
		`{"jsonrpc":"2.0","method":"release_ref","params":{"ref":"f1"}}`,
		`{"jsonrpc":"2.0","id":null,"result":1}`,
		`not json`,
	} {
		f.Add(seed)
	}
	b := newBroker(f)
	s := New(b, Options{EvalTimeout: 200 * time.Millisecond, MemoryLimit: 16 << 20})
	f.Fuzz(func(t *testing.T, frame string) {
		c := &conn{s: s, transport: map[string]any{"kind": "test"}, events: newEventBuffer()}
		c.sess = b.OpenSession(core.SessionInfo{Role: core.RoleAgent, Transport: "inproc", UID: -1, PID: -1}, core.Endpoint{Events: c.events})
		defer func() {
			if c.box != nil {
				c.box.close()
			}
			c.sess.Close()
		}()
		live := `{"jsonrpc":"2.0","id":0,"method":"handshake","params":{"protocol":"0.1","bindings":[]}}`
		for _, in := range []string{frame, live, frame} {
			out := c.handle(context.Background(), []byte(in))
			if out == nil {
				continue
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(out, &m); err != nil || string(m["jsonrpc"]) != `"2.0"` || m["id"] == nil || (m["result"] == nil) == (m["error"] == nil) {
				t.Fatalf("answer to %q is no JSON-RPC response: %s", in, out)
			}
		}
	})
}

// FuzzBindingName: every capability id has a name that is a JavaScript
// identifier, and the name gives the id back (no two ids share one).
func FuzzBindingName(f *testing.F) {
	for _, id := range []string{"pcp.inspection.ping", "org.example.notes.create", "a_b", "a.b", "a._b", "a_.b", "9lives", "Object", "delete", "x$41", "é.x"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		n := BindingName(id)
		if !isIdentifier(n) {
			t.Fatalf("%q -> %q is not an identifier", id, n)
		}
		if back, ok := unBindingName(n); !ok || back != id {
			t.Fatalf("%q -> %q -> %q, %v", id, n, back, ok)
		}
	})
}

// unBindingName inverts BindingName.
func unBindingName(n string) (string, bool) {
	n = strings.TrimPrefix(n, "$$")
	var b strings.Builder
	for i := 0; i < len(n); i++ {
		switch c := n[i]; c {
		case '_':
			b.WriteByte('.')
		case '$':
			if i+2 >= len(n) {
				return "", false
			}
			v, err := strconv.ParseUint(n[i+1:i+3], 16, 8)
			if err != nil || strings.ToUpper(n[i+1:i+3]) != n[i+1:i+3] {
				return "", false
			}
			b.WriteByte(byte(v))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
