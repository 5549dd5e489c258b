package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// notesManifest is a notes-like app: create runs at once, delete asks
// the user.
const notesManifest = `{"version":"1.0","signature":"","capabilities":[
{"name":"create","tier":1,"trust_level":"auto","description":"Create a note","parameters":[{"name":"title","type":"string"},{"name":"body","type":"string","required":false}]},
{"name":"delete","tier":1,"trust_level":"confirm","confirmation_type":"delete","description":"Delete a note","parameters":[{"name":"note_id","type":"string"}]}]}`

// serveNotes registers the notes-like app on the agent socket and serves
// it until the test ends.
func serveNotes(t *testing.T, socket string) {
	t.Helper()
	serveApp(t, &client.App{AppID: "org.example.notes", Manifest: json.RawMessage(notesManifest), Socket: socket,
		Capabilities: map[string]client.CapabilityFunc{
			"create": func(_ context.Context, p json.RawMessage) (any, error) {
				var in struct{ Title string }
				json.Unmarshal(p, &in)
				return map[string]string{"note_id": "n-1", "title": in.Title}, nil
			},
			"delete": func(context.Context, json.RawMessage) (any, error) { return map[string]bool{"deleted": true}, nil },
		}})
}

// serveApp registers app (its OnRegistered is the helper's) and serves it
// until the test ends.
func serveApp(t *testing.T, app *client.App) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	registered := make(chan struct{}, 1)
	app.OnRegistered = func(*api.RegisterCapabilityResult) {
		select {
		case registered <- struct{}{}:
		default:
		}
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-registered:
	case err := <-done:
		t.Fatalf("registering %s: %v", app.AppID, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not register", app.AppID)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPGoSDKClient drives pcpd's MCP face with the official Go SDK
// client on both transports: mcp.sock and streamable HTTP.
func TestMCPGoSDKClient(t *testing.T) {
	testkit.CheckGoroutines(t)
	s := serve(t, Config{AllowUnsigned: true, MCP: MCPConfig{HTTPAddr: "127.0.0.1:0"}})
	serveNotes(t, s.cfg.Socket)
	ctx := context.Background()
	st, err := os.Stat(s.cfg.MCP.TokenFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v; want mode 0600", st, err)
	}
	tok, _ := os.ReadFile(s.cfg.MCP.TokenFile)
	transports := map[string]func(t *testing.T) sdk.Transport{
		"unix": func(t *testing.T) sdk.Transport {
			c, err := client.DialMCP(ctx, s.cfg.MCP.Socket)
			if err != nil {
				t.Fatal(err)
			}
			return &sdk.IOTransport{Reader: c, Writer: c}
		},
		"http": func(t *testing.T) sdk.Transport {
			return &sdk.StreamableClientTransport{Endpoint: "http://" + s.MCPHTTPAddr() + "/",
				HTTPClient: &http.Client{Transport: bearer{strings.TrimSpace(string(tok))}}, MaxRetries: -1}
		},
	}
	user, err := client.Dial(ctx, s.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	if _, err := user.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventConfirmationRequested}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"unix", "http"} {
		t.Run(name, func(t *testing.T) {
			cl := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
			cs, err := cl.Connect(ctx, transports[name](t), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			lt, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range lt.Tools {
				names = append(names, tl.Name)
			}
			if got, want := strings.Join(names, " "), "pcp_act pcp_context pcp_describe pcp_elements pcp_events pcp_invoke pcp_search"; got != want {
				t.Errorf("tools: got %s, want %s", got, want)
			}
			res := callTool(t, cs, "pcp_search", map[string]any{"query": "note create"}, false)
			if !strings.Contains(res, `"id":"org.example.notes.create"`) || !strings.Contains(res, `"id":"org.example.notes.delete"`) {
				t.Errorf("pcp_search did not find the notes capabilities: %s", res)
			}
			res = callTool(t, cs, "pcp_invoke", map[string]any{"capability_id": "org.example.notes.create", "params": map[string]any{"title": "groceries"}}, false)
			if !strings.Contains(res, `"title":"groceries"`) || !strings.Contains(res, `"status":"success"`) {
				t.Errorf("pcp_invoke create: %s", res)
			}
			// A confirm-level capability waits for the user, who approves
			// on the control socket, then runs; after a deny it is refused.
			for _, decide := range []string{"approve", "deny"} {
				got := make(chan string, 1)
				go func() {
					got <- callTool(t, cs, "pcp_invoke", map[string]any{"capability_id": "org.example.notes.delete", "params": map[string]any{"note_id": "n-1"}}, decide == "deny")
				}()
				id := awaitConfirmation(t, user)
				var err error
				if decide == "approve" {
					_, err = user.ConfirmApprove(ctx, id, "")
				} else {
					_, err = user.ConfirmDeny(ctx, id, "not that one")
				}
				if err != nil {
					t.Fatal(err)
				}
				res := <-got
				if decide == "approve" && !strings.Contains(res, `"deleted":true`) {
					t.Errorf("approved delete: %s", res)
				}
				if decide == "deny" && !strings.Contains(res, `"name":"CONFIRMATION_DENIED"`) {
					t.Errorf("denied delete: %s", res)
				}
			}
		})
	}
	// The invocations are the agent's in the audit log, with its
	// connection's identity.
	tail, err := user.AuditTail(ctx, 50)
	if err != nil {
		t.Fatal(err)
	}
	actors := map[string]bool{}
	for _, e := range tail.Entries {
		if e.CapabilityID == "org.example.notes.create" {
			actors[e.Actor] = true
		}
	}
	if !actors["agent:tcp=mcp-http"] || len(actors) != 2 {
		t.Errorf("audit actors of the creates: %v, want one unix agent and agent:tcp=mcp-http", actors)
	}
}

// callTool calls a tool and returns its structured content as JSON,
// failing the test unless IsError is wantError.
func callTool(t *testing.T, cs *sdk.ClientSession, name string, args any, wantError bool) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return ""
	}
	out, _ := json.Marshal(res.StructuredContent)
	if res.IsError != wantError {
		t.Errorf("%s: isError %v, want %v: %s", name, res.IsError, wantError, out)
	}
	return string(out)
}

// awaitConfirmation waits for the next confirmation.requested event on
// the user's connection and returns its id.
func awaitConfirmation(t *testing.T, user *client.Client) string {
	t.Helper()
	select {
	case n := <-user.Notifications():
		var ev struct {
			ConfirmationID string `json:"confirmation_id"`
		}
		json.Unmarshal(n.Params, &ev)
		return ev.ConfirmationID
	case <-time.After(10 * time.Second):
		t.Fatal("no confirmation.requested within 10s")
	}
	return ""
}

// TestMCPBadInput: a 100 MB request line and malformed messages on
// mcp.sock get clear errors, the connection stays in sync, and another
// MCP client is served meanwhile.
func TestMCPBadInput(t *testing.T) {
	testkit.CheckGoroutines(t)
	s := serve(t, Config{})
	ctx := context.Background()
	other, err := client.DialMCP(ctx, s.cfg.MCP.Socket)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "other", Version: "1"}, nil).Connect(ctx, &sdk.IOTransport{Reader: other, Writer: other}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	c, err := client.DialMCP(ctx, s.cfg.MCP.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	sent := make(chan error, 1)
	go func() {
		head := []byte(`{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"pcp_search","arguments":{"query":"`)
		chunk := bytes.Repeat([]byte("x"), 1<<20)
		_, err := c.Write(head)
		for i := 0; i < 100 && err == nil; i++ {
			_, err = c.Write(chunk)
		}
		if err == nil {
			_, err = c.Write([]byte("\"}}}\n{oops\n" + `{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\n"))
		}
		sent <- err
	}()
	// While the big line streams in, the other client is served.
	res := callTool(t, cs, "pcp_invoke", map[string]any{"capability_id": "pcp.inspection.ping"}, false)
	if !strings.Contains(res, `"pong":true`) {
		t.Errorf("other client's ping: %s", res)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for _, want := range []string{
		`{"jsonrpc":"2.0","id":"big","error":{"code":-32600,"message":"line of 104857706 bytes exceeds the limit of 1048576 bytes","data":{"limit":1048576,"size":104857706}}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the line is not JSON"}}`,
		`{"jsonrpc":"2.0","id":2,"result":{}}`,
	} {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading: %v (want %s)", err, want)
		}
		if got := strings.TrimSuffix(line, "\n"); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if h, err := s.b.Health(ctx); err != nil || h.Status != api.HealthOK {
		t.Errorf("health after the bad input: %+v, %v", h, err)
	}
}

// TestMCPLimits: mcp.sock connections count against the daemon's
// connection limits, and the HTTP endpoint listens on loopback only.
func TestMCPLimits(t *testing.T) {
	testkit.CheckGoroutines(t)
	s := serve(t, Config{Limits: Limits{ConnectionsPerUID: 1}})
	ctx := context.Background()
	first, err := client.DialMCP(ctx, s.cfg.MCP.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	first.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"))
	r := bufio.NewReader(first)
	first.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, `"result":{}`) {
		t.Fatalf("first MCP connection: %q, %v", line, err)
	}
	second, err := client.DialMCP(ctx, s.cfg.MCP.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if got := waitEOF(t, second, 10*time.Second); !strings.Contains(got, `"scope":"connections_per_uid"`) {
		t.Errorf("second MCP connection over the per-uid limit: got %q, want a RATE_LIMITED refusal", got)
	}

	cfg := Config{StateDir: t.TempDir(), Socket: filepath.Join(t.TempDir(), "pcp.sock"), MCP: MCPConfig{HTTPAddr: "0.0.0.0:0"}}
	if srv, err := New(cfg); err == nil || !strings.Contains(err.Error(), "not loopback") {
		if srv != nil {
			srv.Close()
		}
		t.Errorf("--mcp-http on 0.0.0.0: %v, want a refusal", err)
	}
}
