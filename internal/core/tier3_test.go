package core

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/policy"
	"github.com/pcp-dev/pcp/internal/store"
)

// actionless is an adapter whose one surface holds one element with
// bounds and no action of its own.
type actionless struct{ acted int }

func (a *actionless) Surface(_ context.Context, id string) (*api.Surface, error) {
	if id != "atspi.app/1" {
		return nil, api.Errorf(api.CodeSurfaceNotFound, nil, "no %s", id)
	}
	return &api.Surface{SurfaceID: id, AppID: "atspi.app", Title: "Editor", Geometry: &api.Bounds{X: 100, Y: 50, W: 400, H: 300}, Tier: 2}, nil
}

func (a *actionless) Elements(context.Context, *api.QueryElementsParams) (*api.QueryElementsResult, error) {
	return &api.QueryElementsResult{Root: api.Element{ID: "e1", Role: "check box", Label: "Bold", Bounds: &api.Bounds{X: 10, Y: 20, W: 40, H: 10}}}, nil
}

func (a *actionless) Action(context.Context, *api.InvokeActionParams) (*api.InvokeActionResult, error) {
	a.acted++
	return nil, api.Errorf(api.CodeActionNotSupported, map[string]any{"element_id": "e1"}, "it has no actions")
}

func (a *actionless) Context(context.Context) (*api.SessionContext, error) {
	return &api.SessionContext{ActiveSurfaces: []string{"atspi.app/1"}}, nil
}

// clicker is a platform adapter offering system.input.click.
type clicker struct{ params []string }

func (c *clicker) Manifests() map[string]*api.Manifest {
	return map[string]*api.Manifest{"system.input": {Version: "1.0", Capabilities: []api.CapabilityDecl{
		{Name: "click", Tier: 3, TrustLevel: api.TrustConfirm, Parameters: []api.ParamDecl{{Name: "x", Type: "integer"}, {Name: "y", Type: "integer"}}}}}}
}

func (c *clicker) Execute(_ context.Context, ex *Execution) (*api.CapabilityResult, error) {
	c.params = append(c.params, string(ex.Params))
	return &api.CapabilityResult{Status: api.StatusSuccess}, nil
}

// The Tier 3 fallback of invoke.action clicks at the element's centre
// on the screen (its bounds plus its surface's origin) under the trust
// level the policy gives Tier 3 for the app: auto runs, deny keeps the
// adapter's refusal, and the default asks the user.
func TestTier3Fallback(t *testing.T) {
	for _, c := range []struct {
		name, policy, agent string
		want                string // "run", "deny" or "confirm"
	}{
		{"auto", "[apps.\"atspi.app\"]\ntier3 = \"auto\"\ntrust_level = \"auto\"\n", "", "run"},
		{"deny", "[defaults]\ntier3 = \"deny\"\n[apps.\"atspi.app\"]\ntrust_level = \"auto\"\n", "", "deny"},
		{"default", "[apps.\"atspi.app\"]\ntrust_level = \"auto\"\n", "", "confirm"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := store.OpenMemory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			pol, err := policy.Parse("policy.toml", []byte(c.policy))
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(context.Background(), Config{Apps: st, Audit: st, Journal: st, Jobs: st, LivenessInterval: -1, Policy: pol, RateLimits: &RateLimits{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Close)
			ad, plat := &actionless{}, &clicker{}
			if err := b.AddAdapter(api.RegisterAdapterParams{AdapterID: "atspi", SurfaceType: "atspi", SupportedTiers: []int{2}}, ad); err != nil {
				t.Fatal(err)
			}
			if err := b.SetPlatformAdapter(plat); err != nil {
				t.Fatal(err)
			}
			ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix", UID: 1000, PID: 1, Agent: c.agent}, (&recPeer{}).endpoint()))
			res, err := b.InvokeAction(ctx, &api.InvokeActionParams{SurfaceID: "atspi.app/1", ElementID: "e1", Action: "click"})
			switch c.want {
			case "run":
				if err != nil || !res.Executed || !strings.Contains(string(res.Result), `"route":"platform"`) {
					t.Fatalf("got %+v, %v", res, err)
				}
				// 100 + 10 + 40/2, 50 + 20 + 10/2.
				if len(plat.params) != 1 || plat.params[0] != `{"x":130,"y":75}` {
					t.Fatalf("the platform clicked %v, want once at 130,75", plat.params)
				}
			case "deny":
				if !errors.Is(err, api.ErrActionNotSupported) || !strings.Contains(err.Error(), "Tier 3 is denied") || len(plat.params) != 0 {
					t.Fatalf("got %v and clicks %v, want the adapter's refusal and no click", err, plat.params)
				}
			case "confirm":
				var pe *api.Error
				if !errors.As(err, &pe) || pe.Code != api.CodeConfirmationRequired || len(plat.params) != 0 {
					t.Fatalf("got %v and clicks %v, want CONFIRMATION_REQUIRED and no click", err, plat.params)
				}
				raw, _ := json.Marshal(pe.Data)
				if !strings.Contains(string(raw), "system.input.click") {
					t.Fatalf("the confirmation: %s", raw)
				}
				// The user is told which element the click is for.
				if got, want := pe.DataMap()["description"], `Click the "Bold" check box in Editor, at (130, 75) on the screen`; got != want {
					t.Errorf("description %q, want %q", got, want)
				}
			}
		})
	}
}

// windowed is actionless naming the window behind its surface.
type windowed struct {
	actionless
	pid int
}

func (w *windowed) SurfaceWindow(context.Context, string) (int, string, error) {
	return w.pid, "Factory", nil
}

// framer is clicker finding windows: process 42's "Factory" at 90,40.
type framer struct{ clicker }

func (f *framer) Manifests() map[string]*api.Manifest {
	ms := f.clicker.Manifests()
	ms["system.input"].Capabilities[0].Parameters = append(ms["system.input"].Capabilities[0].Parameters,
		api.ParamDecl{Name: "surface_id", Type: "string", Required: new(bool)})
	return ms
}

func (f *framer) Window(_ context.Context, pid int, title string) (string, api.Bounds, bool) {
	if pid != 42 || title != "Factory" {
		return "", api.Bounds{}, false
	}
	return "x11:0x400004", api.Bounds{X: 90, Y: 40, W: 420, H: 320}, true
}

// When the adapters can say which window a surface is, the Tier 3 click
// is aimed at that window (its platform surface id, the point relative to
// it), so a window on top cannot take it; when they can and the window is
// not there, nothing is clicked.
func TestTier3AimsAtTheSurfaceWindow(t *testing.T) {
	for _, c := range []struct {
		name string
		pid  int
		want string
	}{
		{"found", 42, `{"surface_id":"x11:0x400004","x":40,"y":35}`},
		{"not found", 7, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := store.OpenMemory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			pol, err := policy.Parse("policy.toml", []byte("[defaults]\ntier3 = \"auto\"\n[apps.\"atspi.app\"]\ntrust_level = \"auto\"\n"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(context.Background(), Config{Apps: st, Audit: st, Journal: st, Jobs: st, LivenessInterval: -1, Policy: pol, RateLimits: &RateLimits{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Close)
			ad, plat := &windowed{pid: c.pid}, &framer{}
			if err := b.AddAdapter(api.RegisterAdapterParams{AdapterID: "atspi", SurfaceType: "atspi", SupportedTiers: []int{2}}, ad); err != nil {
				t.Fatal(err)
			}
			if err := b.SetPlatformAdapter(plat); err != nil {
				t.Fatal(err)
			}
			ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix", UID: 1000, PID: 1}, (&recPeer{}).endpoint()))
			res, err := b.InvokeAction(ctx, &api.InvokeActionParams{SurfaceID: "atspi.app/1", ElementID: "e1", Action: "click"})
			if c.want == "" {
				var pe *api.Error
				if !errors.As(err, &pe) || pe.Code != api.CodeInputSimulationFailed || pe.DataMap()["reason"] != "no_window" || len(plat.params) != 0 {
					t.Fatalf("got %+v, %v and clicks %v, want INPUT_SIMULATION_FAILED no_window and no click", res, err, plat.params)
				}
				return
			}
			if err != nil || !strings.Contains(string(res.Result), `"platform_surface_id":"x11:0x400004"`) {
				t.Fatalf("got %+v, %v", res, err)
			}
			// The element's centre on the screen is 130,75 (see
			// TestTier3Fallback); the window is at 90,40.
			if len(plat.params) != 1 || plat.params[0] != c.want {
				t.Fatalf("the platform clicked %v, want once with %s", plat.params, c.want)
			}
		})
	}
}
