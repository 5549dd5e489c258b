package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// TestPlatformX11 runs pcpd with the X11 platform adapter on a headless
// desktop under openbox: health lists it, an xterm opening and closing
// is surface.created and surface.destroyed to a subscribed agent,
// query.surface and the session context know its window,
// compositor.focus_surface runs, and system.capture is a confirm-level
// capability.
func TestPlatformX11(t *testing.T) {
	desk, err := testkit.StartDesktop(false)
	if err != nil {
		t.Fatalf("the test needs the headless desktop: %v", err)
	}
	t.Cleanup(desk.Stop)
	r := serve(t, Config{X11: true, X11Display: desk.Vars["DISPLAY"]})
	ctx := context.Background()
	agent, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	h, err := agent.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range h.Adapters {
		found = found || a.AdapterID == "x11" && a.SurfaceType == "x11" && a.Status == api.HealthOK
	}
	if !found {
		t.Fatalf("health adapters: got %+v, want x11 ok", h.Adapters)
	}
	if _, err := agent.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventSurfaceCreated, api.EventSurfaceDestroyed, api.EventSurfaceFocusChanged}}); err != nil {
		t.Fatal(err)
	}
	app, err := desk.StartApp("xterm", "-title", "pcpd-x11")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Stop)
	next := func(method string, match func(map[string]any) bool) map[string]any {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case n := <-agent.Notifications():
				var m map[string]any
				if err := json.Unmarshal(n.Params, &m); err != nil {
					t.Fatal(err)
				}
				if n.Method == method && match(m) {
					return m
				}
			case <-deadline:
				t.Fatalf("no %s within 20s", method)
			}
		}
	}
	created := next(api.EventSurfaceCreated, func(m map[string]any) bool { return m["pid"] == float64(app.Cmd.Process.Pid) })
	sid, _ := created["surface_id"].(string)
	if created["title"] != "pcpd-x11" || created["app_id"] != "xterm" {
		t.Errorf("surface.created: got %v, want title pcpd-x11, app xterm", created)
	}
	s, err := agent.QuerySurface(ctx, &api.QuerySurfaceParams{SurfaceID: sid})
	if err != nil {
		t.Fatal(err)
	}
	if s.Tier != 3 || s.Title != "pcpd-x11" || s.Geometry == nil || s.Geometry.W < 100 {
		t.Errorf("query.surface: got %+v", s)
	}
	res, err := agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "compositor.focus_surface", AppID: "compositor",
		Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"surface_id":"` + sid + `"}`)})
	if err != nil || res.Status != api.StatusSuccess {
		t.Fatalf("compositor.focus_surface: %+v, %v", res, err)
	}
	sc, err := agent.SessionContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sc.FocusedSurface == nil || *sc.FocusedSurface != sid || sc.SystemState["display_server"] != "x11" {
		t.Errorf("session context: got focused %v, state %v; want %s, x11", sc.FocusedSurface, sc.SystemState, sid)
	}
	_, err = agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "system.capture", AppID: "system", Source: api.SourceSystemIntelligence})
	if !errors.Is(err, api.ErrConfirmationRequired) {
		t.Errorf("system.capture: got %v, want CONFIRMATION_REQUIRED", err)
	}
	app.Stop()
	next(api.EventSurfaceDestroyed, func(m map[string]any) bool { return m["surface_id"] == sid })
}

// TestPlatformNoDisplay: a display that cannot be opened leaves the
// daemon running without a platform adapter.
func TestPlatformNoDisplay(t *testing.T) {
	r := serve(t, Config{X11: true, X11Display: ":987"})
	ctx := context.Background()
	agent, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	h, err := agent.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range h.Adapters {
		if a.AdapterID == "x11" {
			t.Errorf("health lists an x11 adapter without a display: %+v", a)
		}
	}
	_, err = agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "system.capture", AppID: "system", Source: api.SourceSystemIntelligence})
	if !errors.Is(err, api.ErrActionNotSupported) && !errors.Is(err, api.ErrCapabilityNotFound) {
		t.Errorf("system.capture without a display: got %v, want ACTION_NOT_SUPPORTED or CAPABILITY_NOT_FOUND", err)
	}
}
