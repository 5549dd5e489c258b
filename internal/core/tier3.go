package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/pcp-dev/pcp/api"
)

// The Tier 3 fallback of invoke.action. When the accessibility adapter
// that has the surface answers ACTION_NOT_SUPPORTED (the element has no
// action of its own, or not that one) for a pointer action, and the
// platform adapter offers the matching input capability, the broker
// clicks at the centre of the element's place on the screen instead:
// the element's bounds (in its surface's coordinates) plus the surface's
// geometry. It is an invocation of that capability (system.input.click,
// .double_click or .right_click) through the whole pipeline, under the
// trust level the user's policy gives Tier 3 for the surface's app
// (policy.Tier3: confirm unless the file says otherwise; deny keeps the
// adapter's refusal), audited with route platform. A CONFIRMATION_REQUIRED
// is answered as it is; invoke.action again with its confirmation_id
// (and wait_ms) presents the user's decision.

// tier3Inputs maps the actions the fallback serves to the platform's
// input capability.
var tier3Inputs = map[string]string{
	"click": "system.input.click", "press": "system.input.click", "activate": "system.input.click", "toggle": "system.input.click",
	"double_click": "system.input.double_click", "right_click": "system.input.right_click",
}

// trustOverride, in a context, replaces the trust level of capability
// capID for that invocation: the Tier 3 fallback's level. Only the core
// sets it; nothing on the wire can.
type trustOverride struct{ capID, level string }

type trustOverrideKey struct{}

func overriddenTrust(ctx context.Context, capID string) (string, bool) {
	o, ok := ctx.Value(trustOverrideKey{}).(trustOverride)
	if !ok || o.capID != capID {
		return "", false
	}
	return o.level, true
}

// tier3Action tries the fallback for p after the adapter answered aerr;
// used is false when it does not apply (aerr is then the answer).
func (b *Broker) tier3Action(ctx context.Context, p *api.InvokeActionParams, aerr error) (res *api.InvokeActionResult, used bool, err error) {
	capID, ok := tier3Inputs[p.Action]
	if !ok || !errors.Is(aerr, api.ErrActionNotSupported) {
		return nil, false, aerr
	}
	if _, err := b.Capability(ctx, capID); err != nil {
		return nil, false, aerr // no platform adapter offers it
	}
	surf, err := b.QuerySurface(ctx, &api.QuerySurfaceParams{SurfaceID: p.SurfaceID})
	if err != nil || surf.Geometry == nil {
		return nil, false, aerr
	}
	el, err := b.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: p.SurfaceID, FocusID: p.ElementID})
	if err != nil || el.Root.Bounds == nil || el.Root.Bounds.W <= 0 || el.Root.Bounds.H <= 0 {
		return nil, false, aerr
	}
	level := b.pol.Load().Tier3(surf.AppID)
	if level.Value == api.TrustDeny {
		e := api.AsError(aerr)
		d := e.DataMap()
		d["tier3"], d["tier3_from"] = level.Value, level.From
		return nil, true, &api.Error{Code: e.Code, Message: e.Message + " (Tier 3 is denied for " + surf.AppID + " by " + level.From + ")", Data: d}
	}
	bo := el.Root.Bounds
	x, y := surf.Geometry.X+bo.X+bo.W/2, surf.Geometry.Y+bo.Y+bo.H/2
	raw, _ := json.Marshal(map[string]any{"x": x, "y": y})
	app, _ := api.CapabilityAppID(capID)
	// The user is told which element the click is for, not only where.
	_, pointer, _ := strings.Cut(capID, "system.input.")
	what := &ElementSummary{Action: pointer, Role: el.Root.Role, Name: el.Root.Label, Window: surf.Title, App: surf.AppID}
	ictx := context.WithValue(ctx, trustOverrideKey{}, trustOverride{capID, level.Value})
	ictx = context.WithValue(ictx, describeOverrideKey{}, describeOverride{capID, fmt.Sprintf("%s, at (%d, %d) on the screen", what.Sentence(), x, y)})
	cres, err := b.InvokeCapability(ictx, &api.InvokeCapabilityParams{
		CapabilityID: capID, AppID: app, Source: api.SourceSystemIntelligence, Params: raw, ConfirmationID: p.ConfirmationID, WaitMS: p.WaitMS})
	if err != nil {
		return nil, true, err
	}
	out, _ := json.Marshal(map[string]any{"route": routePlatform, "capability_id": capID, "x": x, "y": y, "status": cres.Status, "tier3": level.Value})
	return &api.InvokeActionResult{Executed: true, Result: out}, true, nil
}
