package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// exposer keeps one MCP tool per registered capability (Options.
// ExposeCapabilities) in step with the registry: it subscribes, on a
// session of its own, to the events that change the registry, and
// resyncs the tool list on each; the SDK sends
// notifications/tools/list_changed to every session when it changes.
//
// Concurrency: mu guards byName and serialises resyncs; Event is called
// by the subscription's pump, one event at a time.
type exposer struct {
	s    *Server
	sess *core.Session

	mu     sync.Mutex
	byName map[string]exposed // tool name -> what it exposes
}

type exposed struct {
	capID, appID, trust, desc string
	schema                    string
}

// registryEvents change which capabilities exist or may run.
var registryEvents = []string{api.EventCapabilityRegistered, api.EventCapabilityUnregistered, api.EventAppRevoked, api.EventAppAllowed}

func (s *Server) startExposer() error {
	x := &exposer{s: s, byName: map[string]exposed{}}
	x.sess = s.b.OpenSession(core.SessionInfo{Role: core.RoleAgent, Transport: "inproc", UID: -1, PID: -1}, core.Endpoint{Events: x})
	ctx := core.WithSession(context.Background(), x.sess)
	if _, err := s.b.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: registryEvents}); err != nil {
		x.sess.Close()
		return err
	}
	s.exposer = x
	x.resync()
	return nil
}

func (x *exposer) close() { x.sess.Close() }

func (x *exposer) Event(string, *api.Event) error                 { x.resync(); return nil }
func (x *exposer) EventsLost(*api.EventsLost) error               { x.resync(); return nil }
func (x *exposer) SubscriptionEnded(*api.SubscriptionEnded) error { return nil }

// toolName is a capability id as an MCP tool name: the characters every
// host accepts (letters, digits, _ and -), dots as _, at most 64.
func toolName(id string) string {
	n := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, id)
	if len(n) > 64 {
		n = n[:64]
	}
	return n
}

// resync makes the exposed tools those of the registry now: a tool per
// capability the agent may call (not deny), whose schema, trust level
// and description are the current ones. The registry's alone: an app
// reached only through accessibility is acted on with pcp_act, and its
// listing changes with no registry event to resync on.
func (x *exposer) resync() {
	caps, err := x.s.b.QueryCapabilities(core.WithSession(context.Background(), x.sess), &api.QueryCapabilitiesParams{Registered: true})
	if err != nil {
		return
	}
	want := map[string]exposed{}
	for _, c := range caps.Capabilities {
		name := toolName(c.ID)
		if c.TrustLevel == api.TrustDeny || strings.HasPrefix(name, "pcp_") && lookupTool(name) != nil {
			continue
		}
		if _, taken := want[name]; taken {
			continue // two ids that map to one name: the first (by id) wins
		}
		want[name] = exposed{capID: c.ID, appID: c.AppID, trust: c.TrustLevel, desc: c.Description, schema: string(api.ParamsSchema(c.Parameters))}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var gone []string
	for name, old := range x.byName {
		if now, ok := want[name]; !ok || now != old {
			gone = append(gone, name)
			delete(x.byName, name)
		}
	}
	if len(gone) > 0 {
		x.s.srv.RemoveTools(gone...)
	}
	for name, e := range want {
		if _, ok := x.byName[name]; ok {
			continue
		}
		x.byName[name] = e
		x.s.srv.AddTool(e.tool(name), x.s.exposedHandler(e))
	}
}

func (e exposed) tool(name string) *sdk.Tool {
	destructive := e.trust != api.TrustAuto
	f := false
	desc := e.desc
	if desc == "" {
		desc = e.capID
	}
	desc += " (PCP capability " + e.capID + ", trust level " + e.trust
	if e.trust == api.TrustConfirm {
		desc += ": the call waits for the user's approval"
	}
	desc += ")"
	return &sdk.Tool{Name: name, Title: e.capID, Description: desc, InputSchema: json.RawMessage(e.schema),
		Annotations: &sdk.ToolAnnotations{Title: e.capID, DestructiveHint: &destructive, OpenWorldHint: &f}}
}

// exposedHandler invokes the capability with the call's arguments as its
// parameters; the core checks them against the manifest.
func (s *Server) exposedHandler(e exposed) sdk.ToolHandler {
	t := &tool{name: e.capID, call: func(ctx context.Context, c *call) (any, error) {
		return c.invokeWaiting(ctx, &api.InvokeCapabilityParams{CapabilityID: e.capID, AppID: e.appID, Source: api.SourceSystemIntelligence, Params: c.args})
	}}
	return s.handler(t) // no schema: the core checks the parameters

}

// lookupTool finds a tool of the fixed table by name.
func lookupTool(name string) *tool {
	for _, t := range tools {
		if t.name == name {
			return t
		}
	}
	return nil
}
