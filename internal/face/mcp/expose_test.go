package mcp

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/rpc"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// TestExposeCapabilities: with ExposeCapabilities every capability the
// agent may call is a tool of its own, with its manifest's parameters as
// input schema, and the client hears tools/list_changed as an app
// registers and is revoked.
func TestExposeCapabilities(t *testing.T) {
	testkit.CheckGoroutines(t)
	b := newBroker(t, nil)
	face := New(b, Options{ExposeCapabilities: true})
	defer face.Close()
	c := serveFace(t, face)
	changed := make(chan struct{}, 8)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(context.Background(), &sdk.IOTransport{Reader: c, Writer: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	names := func() []string {
		lt, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tl := range lt.Tools {
			out = append(out, tl.Name)
		}
		return out
	}
	if got := names(); !slices.Contains(got, "pcp_inspection_ping") || !slices.Contains(got, "pcp_search") {
		t.Fatalf("tools: %v, want the fixed set and pcp.inspection's", got)
	}

	// An app registers on the JSON-RPC face and serves its capability.
	appC, appS := testkit.SocketPair(t)
	rpcFace := rpc.NewServer(b, rpc.Options{})
	done := make(chan struct{})
	go func() { defer close(done); rpcFace.ServeConn(appS, agentInfo) }()
	app := client.New(appC, client.Options{Handler: func(_ context.Context, method string, _ json.RawMessage) (any, error) {
		return &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"note_id":"n-1"}`)}, nil
	}})
	defer func() { app.Close(); <-done }()
	manifest := `{"version":"1.0","signature":"","capabilities":[{"name":"create","tier":1,"trust_level":"auto","description":"Create a note","parameters":[{"name":"title","type":"string"}]}]}`
	if _, err := app.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: "org.example.notes", Manifest: json.RawMessage(manifest)}); err != nil {
		t.Fatal(err)
	}
	waitChanged := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no tools/list_changed after %s", what)
		}
	}
	waitChanged("the registration")
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var create *sdk.Tool
	for _, tl := range lt.Tools {
		if tl.Name == "org_example_notes_create" {
			create = tl
		}
	}
	if create == nil {
		t.Fatalf("no tool for org.example.notes.create in %v", names())
	}
	schema, _ := json.Marshal(create.InputSchema)
	if want := `{"properties":{"title":{"type":"string"}},"required":["title"],"type":"object"}`; string(schema) != want {
		t.Errorf("input schema %s, want %s", schema, want)
	}
	if create.Annotations == nil || create.Annotations.DestructiveHint == nil || *create.Annotations.DestructiveHint {
		t.Errorf("an auto capability's annotations: %+v, want destructiveHint false", create.Annotations)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "org_example_notes_create", Arguments: map[string]any{"title": "x"}})
	if err != nil || res.IsError {
		t.Fatalf("calling the capability's tool: %+v, %v", res, err)
	}
	if out, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(out), `"note_id":"n-1"`) {
		t.Errorf("result %s", out)
	}
	res, _ = cs.CallTool(ctx, &sdk.CallToolParams{Name: "org_example_notes_create", Arguments: map[string]any{}})
	if out, _ := json.Marshal(res.StructuredContent); !res.IsError || !strings.Contains(string(out), "INVALID_PARAMS") {
		t.Errorf("missing parameter: %s, want INVALID_PARAMS", out)
	}

	// The user revokes the app: its tool goes.
	user := b.OpenSession(core.SessionInfo{Role: core.RoleUser, Transport: "inproc", UID: -1, PID: -1}, core.Endpoint{})
	defer user.Close()
	if _, err := b.RevokeApp(core.WithSession(ctx, user), &api.RevokeAppParams{AppID: "org.example.notes"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); slices.Contains(names(), "org_example_notes_create"); {
		if time.Now().After(deadline) {
			t.Fatal("the revoked app's tool is still listed")
		}
		waitChanged("the revocation")
	}
}
