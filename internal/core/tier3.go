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

// The click is aimed at the surface's own window when the adapters can
// say which it is: the adapter that has the surface names its process and
// title (SurfaceWindower), the platform adapter finds the window
// (WindowFinder), and the click is then given that window's surface id,
// so that the platform brings the window to the front after the user
// approves and refuses a point outside it. Without that, a window on top
// would take the click meant for the element under it. When the adapters
// offer this and the window is not found, the fallback refuses rather
// than click blind; adapters that offer neither get the click at the
// screen point (a platform whose windows cannot overlap).

// SurfaceWindower is what an accessibility adapter may implement to name
// the window behind one of its surfaces: its application's process id and
// the window's title.
type SurfaceWindower interface {
	SurfaceWindow(ctx context.Context, surfaceID string) (pid int, title string, err error)
}

// WindowFinder is what a platform adapter may implement to find a
// top-level window by its process and title: its surface id on the
// platform and its geometry on the screen.
type WindowFinder interface {
	Window(ctx context.Context, pid int, title string) (surfaceID string, geometry api.Bounds, ok bool)
}

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
	level := b.pol.Load().Tier3For(SessionFrom(ctx).Agent(), surf.AppID, string(api.SourceSystemIntelligence))
	if level.Value == api.TrustConfirm && actionApproved(ctx) {
		// The user approved this very action on this element: the click
		// that carries it out is not asked again.
		level.Value, level.From = api.TrustAuto, "the approval of this invoke.action"
	}
	if level.Value == api.TrustDeny {
		e := api.AsError(aerr)
		d := e.DataMap()
		d["tier3"], d["tier3_from"] = level.Value, level.From
		return nil, true, &api.Error{Code: e.Code, Message: e.Message + " (Tier 3 is denied for " + surf.AppID + " by " + level.From + ")", Data: d}
	}
	bo := el.Root.Bounds
	x, y := surf.Geometry.X+bo.X+bo.W/2, surf.Geometry.Y+bo.Y+bo.H/2
	click := map[string]any{"x": x, "y": y}
	win, aimed, err := b.platformWindow(ctx, p.SurfaceID)
	if err != nil {
		return nil, true, err
	}
	if aimed {
		// The point relative to the window's own surface on the platform.
		click = map[string]any{"x": x - win.geometry.X, "y": y - win.geometry.Y, "surface_id": win.id}
	}
	raw, _ := json.Marshal(click)
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
	result := map[string]any{"route": routePlatform, "capability_id": capID, "x": x, "y": y, "status": cres.Status, "tier3": level.Value}
	if aimed {
		result["platform_surface_id"] = win.id
	}
	out, _ := json.Marshal(result)
	return &api.InvokeActionResult{Executed: true, Result: out}, true, nil
}

// platformWindow is the platform's surface for the window behind surface
// id, when the adapters can say (see SurfaceWindower): aimed is false when
// they cannot, and the error is INPUT_SIMULATION_FAILED (reason
// no_window) when they can and the window is not found.
func (b *Broker) platformWindow(ctx context.Context, surfaceID string) (w struct {
	id       string
	geometry api.Bounds
}, aimed bool, err error) {
	b.mu.RLock()
	plat := b.platform
	b.mu.RUnlock()
	finder, ok := plat.(WindowFinder)
	if !ok {
		return w, false, nil
	}
	type found struct {
		pid   int
		title string
	}
	f, err := firstAdapter(ctx, b, surfaceID, func(ctx context.Context, a Adapter) (found, error) {
		sw, ok := a.(SurfaceWindower)
		if !ok {
			return found{}, api.Errorf(api.CodeSurfaceNotFound, nil, "adapter names no windows")
		}
		pid, title, err := sw.SurfaceWindow(ctx, surfaceID)
		return found{pid, title}, err
	})
	if err != nil {
		return w, false, nil // no adapter names the surface's window
	}
	id, g, ok := finder.Window(ctx, f.pid, f.title)
	if !ok {
		return w, false, api.Errorf(api.CodeInputSimulationFailed, map[string]any{"reason": "no_window", "surface_id": surfaceID, "pid": f.pid, "title": f.title},
			"surface %s: no top-level window of process %d titled %q on the display, so there is nothing to aim the click at", surfaceID, f.pid, f.title)
	}
	w.id, w.geometry = id, g
	return w, true, nil
}
