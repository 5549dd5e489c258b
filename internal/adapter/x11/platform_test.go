package x11

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image/png"
	"path/filepath"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

func execute(t *testing.T, p *Platform, id, params string) (map[string]any, error) {
	t.Helper()
	app, _ := api.CapabilityAppID(id)
	res, err := p.Execute(context.Background(), &core.Execution{Capability: api.Capability{ID: id, AppID: app}, Registered: true, Params: json.RawMessage(params)})
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(res.Data, &m); err != nil {
		t.Fatal(err)
	}
	return m, nil
}

func TestPlatformCapabilities(t *testing.T) {
	c := open(t)
	p := NewPlatform(c)
	ctx := context.Background()
	ms := p.Manifests()
	for _, id := range []string{AppInput, AppSystem, AppCompositor} {
		if ms[id] == nil {
			t.Errorf("no manifest for %s", id)
		}
	}

	// Typing into a surface focuses it first.
	file := filepath.Join(t.TempDir(), "typed")
	s, _ := startXterm(t, c, "pcp-platform", "exec cat > "+file)
	other := findClass(t, c, "Gtk3-widget-factory")
	if _, err := execute(t, p, "compositor.focus_surface", `{"surface_id":"`+other.ID()+`"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, p, "system.input.type", `{"surface_id":"`+s.ID()+`","text":"über\n"}`); err != nil {
		t.Fatal(err)
	}
	waitFile(t, file, func(s string) bool { return s == "über\n" })

	// query.surface, query.elements, the session context.
	got, err := p.Surface(ctx, s.ID())
	if err != nil || got.Title != "pcp-platform" || got.AppID != "xterm" || got.State != StateFocused || got.Tier != 3 {
		t.Errorf("Surface: got %+v, %v", got, err)
	}
	if _, err := p.Surface(ctx, "atspi.gedit/1"); !errors.Is(err, api.ErrSurfaceNotFound) {
		t.Errorf("another adapter's surface: got %v, want SURFACE_NOT_FOUND", err)
	}
	if _, err := p.Surface(ctx, "x11:0x7fffff0"); !errors.Is(err, api.ErrSurfaceNotFound) {
		t.Errorf("no such window: got %v, want SURFACE_NOT_FOUND", err)
	}
	el, err := p.Elements(ctx, &api.QueryElementsParams{SurfaceID: s.ID()})
	if err != nil || el.Root.ID != s.ID() || el.Root.Role != "window" {
		t.Errorf("Elements: got %+v, %v", el, err)
	}
	sc, err := p.Context(ctx)
	if err != nil || sc.FocusedSurface == nil || *sc.FocusedSurface != s.ID() || len(sc.ActiveSurfaces) < 2 {
		t.Errorf("Context: got %+v, %v", sc, err)
	}

	// A click inside the surface, off the surface, and a bad button.
	if _, err := execute(t, p, "system.input.click", `{"surface_id":"`+s.ID()+`","x":10,"y":10}`); err != nil {
		t.Error(err)
	}
	if _, err := execute(t, p, "system.input.click", `{"surface_id":"`+s.ID()+`","x":10,"y":100000}`); !errors.Is(err, api.ErrInputSimulationFailed) {
		t.Errorf("click off the surface: got %v, want INPUT_SIMULATION_FAILED", err)
	}
	if _, err := execute(t, p, "system.input.click", `{"x":1,"y":1,"button":"fourth"}`); !errors.Is(err, api.ErrInvalidParams) {
		t.Errorf("bad button: got %v, want INVALID_PARAMS", err)
	}

	// A capture scaled to a long edge of 800: the PNG is the result's
	// attachment, and with inline in the data too.
	res, err := p.Execute(ctx, &core.Execution{Capability: api.Capability{ID: "system.capture", AppID: AppSystem}, Registered: true,
		Params: json.RawMessage(`{"max_long_edge":800,"inline":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(res.Data, &m)
	if len(res.Attachments) != 1 || res.Attachments[0].Name != "image" || res.Attachments[0].MediaType != "image/png" {
		t.Fatalf("capture attachments: %+v", res.Attachments)
	}
	raw, err := base64.StdEncoding.DecodeString(m["png"].(string))
	if err != nil || !bytes.Equal(raw, res.Attachments[0].Data) {
		t.Fatalf("the inline PNG is not the attachment: %v", err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(raw))
	if err != nil || cfg.Width != 800 || cfg.Height != 640 || m["scale"] != 0.625 || m["width"] != 800.0 {
		t.Errorf("capture: got %dx%d (%v), data %v", cfg.Width, cfg.Height, err, m)
	}
	if m, err := execute(t, p, "system.capture", `{"max_long_edge":100}`); err != nil || m["png"] != nil {
		t.Errorf("a capture without inline: %v, %v; want no png in the data", m, err)
	}
	// The bytes, for a transport that passes them out of band.
	shot, err := p.Capture(ctx, s.ID(), CaptureOptions{NoScale: true})
	if err != nil || len(shot.PNG) == 0 || shot.Width != s.Width {
		t.Errorf("Capture: got %v, %v", shot, err)
	}
	if _, err := execute(t, p, "compositor.minimize_surface", `{"surface_id":"`+s.ID()+`"}`); err != nil {
		t.Fatal(err)
	}
}
