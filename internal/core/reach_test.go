package core

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/policy"
)

// listingAccess is a fakeAccess that reaches the apps in apps.
type listingAccess struct {
	*fakeAccess
	apps []ReachableApp
	err  error
}

func (l *listingAccess) ReachableApps(context.Context) ([]ReachableApp, error) { return l.apps, l.err }

var pressDecl = api.CapabilityDecl{Name: "activate", Tier: 2, TrustLevel: api.TrustConfirm, Description: "Press it",
	Parameters: []api.ParamDecl{{Name: "name", Type: api.TypeString}}}

// Apps reached only through accessibility are listed, with their tier and
// their generic capabilities, by apps.list, query.capabilities and the
// lookup by id; the registry's own entries win.
func TestReachedAppsListed(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	pol, err := policy.Parse("policy.toml", []byte("[apps.\"atspi.calc\"]\ntrust_level = \"auto\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	w.b.setPolicy(pol)
	w.register(t, "org.example.editor", editorManifest, nil)
	reach := []ReachableApp{{AppID: "atspi.calc", Capabilities: []api.CapabilityDecl{pressDecl}}, {AppID: "atspi.notes", Capabilities: []api.CapabilityDecl{pressDecl}},
		// Ids the registry holds, the platform's and invalid ones are not the adapter's to list.
		{AppID: "org.example.editor", Capabilities: []api.CapabilityDecl{pressDecl}}, {AppID: "system.input"}, {AppID: "pcp.inspection"}, {AppID: "Not An Id"}}
	if err := w.b.AddAccessibilityAdapter(&listingAccess{fakeAccess: &fakeAccess{id: "broken", calls: w.calls}, err: api.ErrNoATSPI2Support}, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.b.AddAccessibilityAdapter(&listingAccess{fakeAccess: &fakeAccess{id: "atspi", calls: w.calls}, apps: reach}, 1); err != nil {
		t.Fatal(err)
	}
	apps, err := w.b.Apps(w.agent)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.App{
		{AppID: "atspi.calc", State: api.AppRunning, Tier: 2, Via: "atspi", Capabilities: 1},
		{AppID: "atspi.notes", State: api.AppRunning, Tier: 2, Via: "atspi", Capabilities: 1},
		{AppID: "org.example.editor", State: api.AppNotRunning, Tier: 1, Capabilities: 4},
	}
	if d := cmp.Diff(want, apps.Apps); d != "" {
		t.Errorf("apps (-want +got):\n%s", d)
	}
	caps, err := w.b.QueryCapabilities(w.agent, &api.QueryCapabilitiesParams{AppID: "atspi.calc"})
	if err != nil {
		t.Fatal(err)
	}
	wantCaps := []api.Capability{{ID: "atspi.calc.activate", Name: "activate", Tier: 2, TrustLevel: api.TrustAuto, AppID: "atspi.calc",
		Description: "Press it", Parameters: pressDecl.Parameters, Available: true}}
	if d := cmp.Diff(wantCaps, caps.Capabilities); d != "" {
		t.Errorf("caps of atspi.calc (-want +got):\n%s", d)
	}
	all, _ := w.b.QueryCapabilities(w.agent, &api.QueryCapabilitiesParams{})
	var ids []string
	for _, c := range all.Capabilities {
		ids = append(ids, c.ID)
	}
	if d := cmp.Diff([]string{"atspi.calc.activate", "atspi.notes.activate", "org.example.editor.bold", "org.example.editor.click",
		"org.example.editor.erase", "org.example.editor.slow"}, ids); d != "" {
		t.Errorf("all caps (-want +got):\n%s", d)
	}
	// The registry's alone, as the faces that bind tools ask; tier 1 alone;
	// a registered app's capabilities alone.
	for _, p := range []*api.QueryCapabilitiesParams{{Registered: true}, {Tier: ptr(1)}, {AppID: "org.example.editor"}} {
		got, _ := w.b.QueryCapabilities(w.agent, p)
		for _, c := range got.Capabilities {
			if c.Tier == 2 && c.AppID != "org.example.editor" {
				t.Errorf("%+v listed %s", p, c.ID)
			}
		}
	}
	notes, err := w.b.Capability(w.agent, "atspi.notes.activate")
	if err != nil || notes.TrustLevel != api.TrustConfirm || !notes.Available {
		t.Errorf("Capability(atspi.notes.activate) = %+v, %v; want it, confirm", notes, err)
	}
	if _, err := w.b.Capability(w.agent, "atspi.notes.erase"); !errors.Is(err, api.ErrCapabilityNotFound) {
		t.Errorf("Capability(atspi.notes.erase) = %v, want CAPABILITY_NOT_FOUND", err)
	}
	// A reached app can be revoked: it is then listed as revoked only.
	if _, err := w.b.RevokeApp(w.user, &api.RevokeAppParams{AppID: "atspi.notes", Reason: "hands off"}); err != nil {
		t.Fatalf("revoking a reached app: %v", err)
	}
	apps, _ = w.b.Apps(w.agent)
	if len(apps.Apps) != 3 || apps.Apps[1].AppID != "atspi.notes" || apps.Apps[1].State != api.AppRevoked || apps.Apps[1].Tier != 0 {
		t.Errorf("after revoking atspi.notes: %+v", apps.Apps)
	}
	if _, err := w.b.Capability(w.agent, "atspi.notes.activate"); !errors.Is(err, api.ErrCapabilityNotFound) {
		t.Errorf("a revoked app's capability: %v, want CAPABILITY_NOT_FOUND", err)
	}
	if _, err := w.b.RevokeApp(w.user, &api.RevokeAppParams{AppID: "atspi.nowhere"}); !errors.Is(err, api.ErrAppNotFound) {
		t.Errorf("revoking an app nobody reaches: %v, want APP_NOT_FOUND", err)
	}
}

func ptr[T any](v T) *T { return &v }
