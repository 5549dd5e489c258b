package atspi

import (
	"context"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

var _ core.AppLister = (*Adapter)(nil)

// ReachableApps lists the applications on the accessibility bus, each
// with the generic capabilities the adapter offers on any of them: one per
// structural action, "<app id>.<action>", which Detect claims
// (core.AppLister).
func (a *Adapter) ReachableApps(ctx context.Context) ([]core.ReachableApp, error) {
	apps, err := a.appList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]core.ReachableApp, 0, len(apps))
	for _, ap := range apps {
		out = append(out, core.ReachableApp{AppID: ap.id, Capabilities: genericCapabilities})
	}
	return out, nil
}

// genericCapabilities are the capabilities every reached application has:
// the structural actions, on the element their parameters name (see
// execParams). Callers must not modify them.
var genericCapabilities = func() []api.CapabilityDecl {
	opt := func() *bool { f := false; return &f }
	element := []api.ParamDecl{
		{Name: "element_id", Type: api.TypeString, Required: opt(), Description: "The element, as query.elements names it (\"<bus name>|<path>\")."},
		{Name: "role", Type: api.TypeString, Required: opt(), Description: "Or a target: the element's role (\"push button\", \"check box\", \"text\")."},
		{Name: "name", Type: api.TypeString, Required: opt(), Description: "The target's accessible name or label."},
		{Name: "text", Type: api.TypeString, Required: opt(), Description: "The target's text content."},
		{Name: "states", Type: api.TypeArray, Required: opt(), Description: "States the target must have; \"!state\" must not."},
		{Name: "ancestor", Type: api.TypeObject, Required: opt(), Description: "A target some ancestor of the element matches."},
		{Name: "target", Type: api.TypeObject, Required: opt(), Description: "The target as one object (role, name, text, states, ancestor)."},
		{Name: "accessible_path", Type: api.TypeString, Required: opt(), Description: "Or the element's object path, with bus_name."},
		{Name: "bus_name", Type: api.TypeString, Required: opt(), Description: "The D-Bus name of the element's application."},
		{Name: "timeout_ms", Type: api.TypeInteger, Required: opt(), Description: "How long to wait for the target to be actionable, 0 to 60000 (default 3000)."},
	}
	with := func(extra ...api.ParamDecl) []api.ParamDecl {
		return append(append([]api.ParamDecl(nil), element...), extra...)
	}
	return []api.CapabilityDecl{
		{Name: ActionActivate, Tier: 2, TrustLevel: api.TrustConfirm, Description: "Press, click or toggle an element: its default action, or the one value names.",
			Parameters: with(api.ParamDecl{Name: "value", Type: api.TypeAny, Required: opt(), Description: "The toolkit action's name (\"click\", \"toggle\"), or {\"name\": ...}."})},
		{Name: ActionReadText, Tier: 2, TrustLevel: api.TrustConfirm, Description: "Read an element's text: all of it, or a part.",
			Parameters: with(api.ParamDecl{Name: "value", Type: api.TypeObject, Required: opt(), Description: "{\"offset\": n, \"length\": n}: that part, in characters."})},
		{Name: ActionScroll, Tier: 2, TrustLevel: api.TrustConfirm, Description: "Scroll an element into view.",
			Parameters: with()},
		{Name: ActionSelect, Tier: 2, TrustLevel: api.TrustConfirm, Description: "Select an element (a tab, a list item), or its child value names.",
			Parameters: with(api.ParamDecl{Name: "value", Type: api.TypeObject, Required: opt(), Description: "{\"index\": n}: select the element's child n."})},
		{Name: ActionSetValue, Tier: 2, TrustLevel: api.TrustConfirm, Description: "Set the text of an editable element, or the value of a range (a slider, a spin button).",
			Parameters: with(api.ParamDecl{Name: "value", Type: api.TypeAny, Description: "A string (text) or a number (a range's value)."})},
	}
}()
