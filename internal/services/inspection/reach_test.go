package inspection

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// reacher is an accessibility adapter that reaches one app and acts on
// nothing.
type reacher struct{}

func (reacher) ID() string { return "atspi" }
func (reacher) Detect(context.Context, string, string) (string, bool, error) {
	return "", false, nil
}
func (reacher) ResolveElement(context.Context, *core.Execution) (*core.ElementRef, error) {
	return nil, api.ErrNoATSPI2Support
}
func (reacher) Execute(context.Context, *core.Execution) (*api.CapabilityResult, error) {
	return nil, api.ErrNoATSPI2Support
}
func (reacher) ReachableApps(context.Context) ([]core.ReachableApp, error) {
	return []core.ReachableApp{{AppID: "atspi.gnome-calculator", Capabilities: []api.CapabilityDecl{
		{Name: "activate", Tier: 2, TrustLevel: api.TrustConfirm, Description: "Press it"}}}}, nil
}

// describe_registry lists an app reached only through accessibility,
// tier 2, with its generic capabilities; describe_capability finds one.
func TestDescribeRegistryReachedApp(t *testing.T) {
	b := broker(t)
	if err := b.AddAccessibilityAdapter(reacher{}, 1); err != nil {
		t.Fatal(err)
	}
	data, err := invoke(t, b, "describe_registry", `{"app_id":"atspi.gnome-calculator"}`)
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		Apps []appView `json:"apps"`
	}
	if err := json.Unmarshal(data, &reg); err != nil {
		t.Fatal(err)
	}
	want := []appView{{App: api.App{AppID: "atspi.gnome-calculator", State: api.AppRunning, Tier: 2, Via: "atspi", Capabilities: 1},
		CapabilityList: []api.Capability{{ID: "atspi.gnome-calculator.activate", Name: "activate", Tier: 2, TrustLevel: api.TrustConfirm,
			AppID: "atspi.gnome-calculator", Description: "Press it", Available: true}}}}
	if diff := cmp.Diff(want, reg.Apps); diff != "" {
		t.Errorf("describe_registry (-want +got):\n%s", diff)
	}
	data, err = invoke(t, b, "describe_capability", `{"capability_id":"atspi.gnome-calculator.activate"}`)
	if err != nil {
		t.Fatal(err)
	}
	var c api.Capability
	if err := json.Unmarshal(data, &c); err != nil || c.Tier != 2 || c.AppID != "atspi.gnome-calculator" {
		t.Errorf("describe_capability: %s, %v", data, err)
	}
}
