package core

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

// invoke.action under trust levels. A structural action on an element is
// what the app's generic capability of that action does
// (atspi.gnome-calculator.activate with the element's id): an agent that
// acts through invoke.action gets no more than one that invokes the
// capability. So the action is gated by that capability's trust level —
// the registered capability's, when the app's manifest declares one of
// that name, else the detected capability's (confirm), each under the
// user's policy for the app, the capability, the source and the agent.
// deny refuses (PERMISSION_DENIED); confirm asks the user (a confirmation
// of capability APP.ACTION whose parameters are the element and value,
// described by naming the element), and invoke.action again with
// confirmation_id (and wait_ms) presents the decision; auto acts.
//
// The app is the surface's: the part of the surface id before "/" (the
// accessibility adapter's ids), else the app query.surface names. The
// adapter refuses an element that is not in the surface, so an agent
// cannot borrow a relaxed app's trust for another app's element.

// actionApproved, in a context, says the user approved this invocation
// of invoke.action: the Tier 3 fallback (tier3.go) does not ask again for
// the click that carries it out. Only the core sets it.
type actionApprovedKey struct{}

func actionApproved(ctx context.Context) bool {
	ok, _ := ctx.Value(actionApprovedKey{}).(bool)
	return ok
}

// actionCapability is the capability whose trust level gates invoke.action
// p, with the policy applied, and the parameters its confirmation binds.
// seen reports whether the surface was looked up (and found) on the way.
func (b *Broker) actionCapability(ctx context.Context, p *api.InvokeActionParams) (_ api.Capability, _ json.RawMessage, seen bool, _ error) {
	appID, _, ok := strings.Cut(p.SurfaceID, "/")
	if !ok || appID == "" {
		surf, err := b.QuerySurface(ctx, &api.QuerySurfaceParams{SurfaceID: p.SurfaceID})
		if err != nil {
			return api.Capability{}, nil, false, err
		}
		appID, seen = surf.AppID, true
	}
	id := api.CapabilityID(appID, p.Action)
	c, ok := b.LookupCapability(id)
	if !ok || c.AppID != appID {
		c = detected(id, appID)
	}
	c = b.effective(c, api.SourceSystemIntelligence, SessionFrom(ctx).Agent())
	params := map[string]any{"element_id": p.ElementID, "surface_id": p.SurfaceID}
	if len(p.Value) > 0 {
		params["value"] = p.Value
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return api.Capability{}, nil, false, api.InvalidParam("value", "%v", err)
	}
	return c, raw, seen, nil
}

// gateAction applies the trust level of invoke.action p (see above). It
// returns nil to act, with approved set when the user approved it.
func (b *Broker) gateAction(ctx context.Context, p *api.InvokeActionParams) (approved bool, err error) {
	c, raw, seen, err := b.actionCapability(ctx, p)
	if err != nil {
		return false, err
	}
	switch c.TrustLevel {
	case api.TrustAuto:
		return false, nil
	case api.TrustDeny:
		return false, api.Errorf(api.CodePermissionDenied, map[string]any{"capability_id": c.ID, "trust_level": c.TrustLevel, "action": p.Action},
			"%s on %s is denied by the trust level of %s", p.Action, p.ElementID, c.ID)
	}
	if p.ConfirmationID == "" && !seen {
		// The user is not asked about a window that is not there.
		if _, err := b.QuerySurface(ctx, &api.QuerySurfaceParams{SurfaceID: p.SurfaceID}); err != nil {
			return false, err
		}
	}
	cp := &api.InvokeCapabilityParams{CapabilityID: c.ID, AppID: c.AppID, Source: api.SourceSystemIntelligence, Params: raw,
		ConfirmationID: p.ConfirmationID, WaitMS: p.WaitMS}
	if err := b.confirmGate(ctx, cp, &c, func() string { return b.describeAction(ctx, &c, p, raw) }); err != nil {
		return false, err
	}
	return true, nil
}

// describeAction is the confirmation's description of invoke.action p:
// the element named by the adapters that can, else the capability and
// its parameters.
func (b *Broker) describeAction(ctx context.Context, c *api.Capability, p *api.InvokeActionParams, raw json.RawMessage) string {
	dc := *c
	if _, pointer := tier3Inputs[p.Action]; pointer {
		// A pointer action (click, toggle, ...) names its element as
		// activate does; the sentence says the action asked for.
		dc.ID, dc.Name = api.CapabilityID(c.AppID, "activate"), "activate"
	}
	ex := &Execution{Capability: dc, Source: api.SourceSystemIntelligence, Params: raw}
	for _, ae := range b.accessAdapters() {
		d, ok := ae.a.(ElementDescriber)
		if !ok {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, AdapterTimeout)
		s, err := d.DescribeElement(actx, ex)
		cancel()
		if err == nil && s != nil {
			s.Action = p.Action
			return s.Sentence()
		}
		if err != nil && !declines(err) {
			break
		}
	}
	return describe(c, raw)
}

// actionDigest is the params digest an invoke.action audit entry records.
func actionDigest(p *api.InvokeActionParams) string { return audit.ParamsDigest(p.Value) }
