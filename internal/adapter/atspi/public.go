package atspi

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// The adapter as the core sees it: core.Adapter (surfaces, query.elements,
// invoke.action, the session context) and core.AccessibilityAdapter (the
// AT-SPI2 path of spec 001's dispatch), with ElementTree and DetectApp.
var (
	_ core.Adapter              = (*Adapter)(nil)
	_ core.AccessibilityAdapter = (*Adapter)(nil)
	_ core.ElementDescriber     = (*Adapter)(nil)
)

// surfaceNotFound is SURFACE_NOT_FOUND, which tells the broker to ask the
// next adapter.
func surfaceNotFound(id string) error {
	return api.Errorf(api.CodeSurfaceNotFound, map[string]any{"surface_id": id}, "surface %s does not exist", id)
}

// surface finds the application and window of a surface id.
func (a *Adapter) surface(ctx context.Context, id string) (*app, dbus.ObjectPath, error) {
	appID, num, ok := parseSurfaceID(id)
	if !ok {
		return nil, "", surfaceNotFound(id)
	}
	ap, err := a.appByID(ctx, appID)
	if err != nil {
		if errors.Is(err, api.ErrNoATSPI2Support) {
			return nil, "", surfaceNotFound(id)
		}
		return nil, "", err
	}
	if err := ap.toplevels(ctx); err != nil {
		return nil, "", err
	}
	ap.mu.Lock()
	p, ok := ap.windowPathLocked(num)
	ap.mu.Unlock()
	if !ok {
		return nil, "", surfaceNotFound(id)
	}
	return ap, p, nil
}

// Surface describes a top-level window.
func (a *Adapter) Surface(ctx context.Context, id string) (*api.Surface, error) {
	ap, p, err := a.surface(ctx, id)
	if err != nil {
		return nil, err
	}
	st := newReq(p, ifaceAccessible+".GetState")
	name := getProp(p, ifaceAccessible, "Name")
	ext := newReq(p, ifaceComponent+".GetExtents", ap.q.windowCoordType())
	if err := ap.run(ctx, []*req{st, name, ext}); err != nil {
		return nil, err
	}
	if isGone(st.err) {
		return nil, surfaceNotFound(id)
	}
	states, _ := decodeStates(st.value())
	title, _ := name.value().(string)
	if title == "" {
		title = ap.name
	}
	s := &api.Surface{SurfaceID: id, AppID: ap.id, Title: clean(title, maxNameBytes), State: surfaceState(states), Tier: 2}
	if x, y, w, h, err := decodeExtents(ext.value()); err == nil {
		b := api.Bounds{X: int(x), Y: int(y), W: int(w), H: int(h)}
		if ap.q.windowCoordsOnly && a.cfg.WindowOrigins != nil {
			if pid, err := ap.processID(ctx); err == nil {
				b, _ = screenBounds(b, a.cfg.WindowOrigins, int(pid), title)
			}
		}
		s.Geometry = &b
	}
	return s, nil
}

// SurfaceWindow names the window behind surface id as the display server
// knows it: the application's process id and the window's title (the
// application's name when the window has none). The platform adapter
// finds the window from them (see the daemon's platform wiring).
func (a *Adapter) SurfaceWindow(ctx context.Context, id string) (pid int, title string, err error) {
	ap, p, err := a.surface(ctx, id)
	if err != nil {
		return 0, "", err
	}
	name := getProp(p, ifaceAccessible, "Name")
	if err := ap.run(ctx, []*req{name}); err != nil {
		return 0, "", err
	}
	if isGone(name.err) {
		return 0, "", surfaceNotFound(id)
	}
	title, _ = name.value().(string)
	if title == "" {
		title = ap.name
	}
	n, err := ap.processID(ctx)
	if err != nil || n == 0 {
		return 0, "", api.Errorf(api.CodeSurfaceNotFound, map[string]any{"surface_id": id}, "surface %s: its application's process id is unknown", id)
	}
	return int(n), clean(title, maxNameBytes), nil
}

// surfaceState names a window's state: focused (ACTIVE), minimized
// (ICONIFIED), hidden (neither VISIBLE nor SHOWING), or normal.
func surfaceState(s stateSet) string {
	switch {
	case s.has(stActive):
		return "focused"
	case s.has(stIconified):
		return "minimized"
	case !s.has(stVisible) && !s.has(stShowing):
		return "hidden"
	}
	return "normal"
}

// Context lists the windows that are visible, and the focused one.
func (a *Adapter) Context(ctx context.Context) (*api.SessionContext, error) {
	apps, err := a.appList(ctx)
	if err != nil {
		return nil, err
	}
	sc := &api.SessionContext{ActiveSurfaces: []string{}, SystemState: map[string]any{}}
	for _, ap := range apps {
		if ap.toplevels(ctx) != nil {
			continue
		}
		ap.mu.Lock()
		for p, num := range ap.surfaces {
			n := ap.nodes[p]
			if n == nil || !n.states.has(stVisible) && !n.states.has(stShowing) {
				continue
			}
			sid := SurfaceID(ap.id, num)
			sc.ActiveSurfaces = append(sc.ActiveSurfaces, sid)
			if n.states.has(stActive) && sc.FocusedSurface == nil {
				sc.FocusedSurface = &sid
			}
		}
		ap.mu.Unlock()
	}
	sort.Strings(sc.ActiveSurfaces)
	a.mu.Lock()
	sc.SystemState["atspi_bus"] = a.busAddr
	a.mu.Unlock()
	sc.SystemState["atspi_apps"] = len(apps)
	return sc, nil
}

// Elements returns the tree of a surface, or of the element focus_id
// within it: ids, roles, labels, bounds in window coordinates, the
// structural actions each supports, states, and a value (the text of a
// text field, the current value of a range).
func (a *Adapter) Elements(ctx context.Context, p *api.QueryElementsParams) (*api.QueryElementsResult, error) {
	ap, win, err := a.surface(ctx, p.SurfaceID)
	if err != nil {
		return nil, err
	}
	scope := win
	if p.FocusID != "" {
		bus, path, err := ParseElementID(p.FocusID)
		if err != nil || bus != ap.bus {
			return nil, elementNotFound(p.FocusID, "not an element of surface "+p.SurfaceID)
		}
		scope = path
	}
	if err := ap.ensure(ctx, "", 0); err != nil {
		return nil, err
	}
	ap.mu.Lock()
	inside := ap.nodes[scope] != nil && ap.surfaceOfLocked(scope) == win
	ap.mu.Unlock()
	if !inside {
		return nil, elementNotFound(p.FocusID, "not an element of surface "+p.SurfaceID)
	}
	if err := ap.ensure(ctx, scope, needActions|needText|needValue|needBounds); err != nil {
		return nil, err
	}
	ap.mu.Lock()
	defer ap.mu.Unlock()
	underScroll := false
	for q := ap.nodes[scope]; q != nil && q.parent != ""; q = ap.nodes[q.parent] {
		if r := q.role; r == roleScrollPane || r == roleViewport {
			underScroll = true
			break
		}
	}
	budget := a.cfg.MaxNodes
	root := ap.elementLocked(scope, underScroll, 0, &budget)
	return &api.QueryElementsResult{Root: root}, nil
}

func elementNotFound(id, why string) error {
	return api.Errorf(api.CodeElementNotFound, map[string]any{"element_id": id}, "element %s: %s", id, why)
}

// elementLocked builds the nested element for p.
func (ap *app) elementLocked(p dbus.ObjectPath, underScroll bool, depth int, budget *int) api.Element {
	n := ap.nodes[p]
	*budget--
	el := api.Element{ID: ElementID(ap.bus, p), Role: RoleName(n.role), Label: n.name, States: n.states.names()}
	if !n.boundsAt.IsZero() {
		b := n.bounds
		el.Bounds = &b
	}
	el.Actions = supportedActions(n, ap.nodes[n.parent], underScroll)
	el.Value = nodeValue(n)
	if n.role == roleScrollPane || n.role == roleViewport {
		underScroll = true
	}
	if depth < ap.a.cfg.MaxDepth {
		for _, c := range n.children {
			if *budget <= 0 {
				break
			}
			if ap.nodes[c] != nil {
				el.Children = append(el.Children, ap.elementLocked(c, underScroll, depth+1, budget))
			}
		}
	}
	return el
}

// nodeValue is an element's value: a range's current value, else a text
// field's text.
func nodeValue(n *node) json.RawMessage {
	var v any
	switch {
	case n.ifaces.has(ifValue) && n.valueOK:
		v = n.value.Current
	case n.ifaces.has(ifText) && isTextRole(n.role) && n.textOK:
		v = n.text
	default:
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return raw
}

// ElementTree returns an application's whole tree, flat, depth first from
// the application's root (spec 001's ElementTree query).
func (a *Adapter) ElementTree(ctx context.Context, appID string) ([]api.ElementInfo, error) {
	ap, err := a.appByID(ctx, appID)
	if err != nil {
		return nil, err
	}
	if err := ap.ensure(ctx, "", needActions|needText); err != nil {
		return nil, err
	}
	ap.mu.Lock()
	defer ap.mu.Unlock()
	paths := ap.subtreeLocked(rootPath, a.cfg.MaxNodes)
	out := make([]api.ElementInfo, 0, len(paths))
	scroll := map[dbus.ObjectPath]bool{}
	for _, p := range paths {
		n := ap.nodes[p]
		under := scroll[n.parent]
		if n.role == roleScrollPane || n.role == roleViewport || under {
			scroll[p] = true
		}
		ei := api.ElementInfo{AccessiblePath: string(p), BusName: ap.bus, Role: RoleName(n.role),
			Actions: supportedActions(n, ap.nodes[n.parent], under), States: n.states.names()}
		if ei.Actions == nil {
			ei.Actions = []string{}
		}
		if n.name != "" {
			name := n.name
			ei.Name = &name
		}
		if n.ifaces.has(ifText) && isTextRole(n.role) && n.textOK {
			t := n.text
			ei.Text = &t
		}
		out = append(out, ei)
	}
	return out, nil
}

// DetectApp reports whether an application with this app id is on the
// accessibility bus.
func (a *Adapter) DetectApp(ctx context.Context, appID string) (*api.DetectionResult, error) {
	if _, err := a.appByID(ctx, appID); err != nil {
		var pe *api.Error
		if errors.As(err, &pe) && pe.Data != nil {
			if m := pe.DataMap(); m["app_id"] != nil {
				return &api.DetectionResult{AppID: appID}, nil // not on the bus
			}
		}
		return nil, err
	}
	return &api.DetectionResult{AppID: appID, Detected: true, Via: ID, Tier: 2, State: api.AppRunning}, nil
}

// Detect claims capability ids of the adapter's convention,
// "<app id>.<action>[.<anything>]" with the app on the bus and the action
// structural (see Actions).
func (a *Adapter) Detect(ctx context.Context, capabilityID, target string) (string, bool, error) {
	appID, _, ok := parseCapabilityID(capabilityID)
	if !ok || target != "" && target != appID {
		return "", false, nil
	}
	res, err := a.DetectApp(ctx, appID)
	if err != nil {
		return "", false, err
	}
	return appID, res.Detected, nil
}

// execParams are the parameters an execution may carry: an element (by
// element_id, or a target given inline or under "target"), the action
// when the capability does not name it, its value, and how long to wait
// for the target.
type execParams struct {
	ElementID string `json:"element_id"`
	Target
	Nested    *Target         `json:"target"`
	Action    string          `json:"action"`
	Value     json.RawMessage `json:"value"`
	TimeoutMS *int64          `json:"timeout_ms"`
}

func parseExecParams(raw json.RawMessage) (*execParams, error) {
	var p execParams
	if len(raw) == 0 || string(raw) == "null" {
		return &p, nil
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, api.InvalidParam("params", "%v", err)
	}
	if p.TimeoutMS != nil && (*p.TimeoutMS < 0 || *p.TimeoutMS > 60000) {
		return nil, api.InvalidParam("params.timeout_ms", "must be 0 to 60000")
	}
	return &p, nil
}

func (p *execParams) target() Target {
	if p.Nested != nil {
		return *p.Nested
	}
	return p.Target
}

func (a *Adapter) timeout(p *execParams) time.Duration {
	if p.TimeoutMS != nil {
		return time.Duration(*p.TimeoutMS) * time.Millisecond
	}
	return a.cfg.ActionTimeout
}

// ResolveElement finds the element of an execution whose parameters name
// no accessible_path: by element_id, else by a target (role, name, text,
// states, ancestor), in the capability's application.
func (a *Adapter) ResolveElement(ctx context.Context, ex *core.Execution) (*core.ElementRef, error) {
	appID := ex.Capability.AppID
	if appID != "" {
		// An app this adapter does not reach is declined before its
		// parameters are judged: they may be meant for another route.
		if _, err := a.appByID(ctx, appID); err != nil {
			return nil, err
		}
	}
	p, err := parseExecParams(ex.Params)
	if err != nil {
		return nil, err
	}
	if p.ElementID != "" {
		bus, path, err := ParseElementID(p.ElementID)
		if err != nil {
			return nil, api.InvalidParam("params.element_id", "%v", err)
		}
		ap, err := a.appByBus(ctx, bus)
		if err != nil {
			return nil, elementNotFound(p.ElementID, "its application is not on the accessibility bus")
		}
		if appID != "" && ap.id != a.canonical(appID) {
			return nil, elementNotFound(p.ElementID, "it belongs to "+ap.id+", not "+appID)
		}
		return &core.ElementRef{BusName: bus, AccessiblePath: string(path)}, nil
	}
	t := p.target()
	if t.App != "" && appID != "" && a.canonical(t.App) != a.canonical(appID) {
		return nil, api.InvalidParam("params.app", "%s is not the capability's app %s", t.App, appID)
	}
	if appID != "" {
		t.App = appID
	}
	if t.empty() {
		return nil, api.InvalidParam("params", "name the element: element_id, accessible_path, or a target (role, name, text, states, ancestor)")
	}
	m, err := a.Resolve(ctx, t, a.timeout(p))
	if err != nil {
		return nil, err
	}
	return &core.ElementRef{BusName: m.BusName, AccessiblePath: m.Path}, nil
}

// actionOf is the structural action of an execution: params "action", else
// the first part of the capability's name ("activate" of
// "atspi.gnome-calculator.activate.equals").
func actionOf(ex *core.Execution, p *execParams) (string, error) {
	if p.Action != "" {
		if !isAction(p.Action) {
			return "", api.InvalidParam("params.action", "%q is not a structural action (want one of activate, select, set_value, scroll, read_text)", p.Action)
		}
		return p.Action, nil
	}
	name := ex.Capability.Name
	if _, act, ok := parseCapabilityID(ex.Capability.ID); ok {
		return act, nil
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			name = name[:i]
			break
		}
	}
	if isAction(name) {
		return name, nil
	}
	return "", api.Errorf(api.CodeActionNotSupported, map[string]any{"capability_id": ex.Capability.ID},
		"capability %s names no structural action: name it in params \"action\"", ex.Capability.ID)
}

// Execute performs the execution's action on its element.
func (a *Adapter) Execute(ctx context.Context, ex *core.Execution) (*api.CapabilityResult, error) {
	if ex.Element == nil || ex.Element.AccessiblePath == "" {
		return nil, api.Errorf(api.CodeElementNotFound, map[string]any{"capability_id": ex.Capability.ID}, "no element to act on")
	}
	p, err := parseExecParams(ex.Params)
	if err != nil {
		return nil, err
	}
	action, err := actionOf(ex, p)
	if err != nil {
		return nil, err
	}
	path := dbus.ObjectPath(ex.Element.AccessiblePath)
	if !path.IsValid() {
		return nil, api.InvalidParam("params.accessible_path", "%q is not an object path", ex.Element.AccessiblePath)
	}
	var ap *app
	if ex.Element.BusName != "" {
		ap, err = a.appByBus(ctx, ex.Element.BusName)
	} else {
		ap, err = a.appByID(ctx, ex.Capability.AppID)
	}
	if err != nil {
		return nil, err
	}
	id := ElementID(ap.bus, path)
	if ex.Capability.AppID != "" && ap.id != a.canonical(ex.Capability.AppID) {
		return nil, elementNotFound(id, "it belongs to "+ap.id+", not "+ex.Capability.AppID)
	}
	res, err := a.perform(ctx, ap, path, action, p.Value, a.timeout(p))
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return &api.CapabilityResult{Status: api.StatusSuccess, Data: raw}, nil
}

// DescribeElement says which element an execution would act on, for its
// confirmation (core.ElementDescriber): the element its parameters name
// (resolved as Execute would, waiting as long for a target), its live
// role and name, the title of its window and the application's name. It
// reads and never acts.
func (a *Adapter) DescribeElement(ctx context.Context, ex *core.Execution) (*core.ElementSummary, error) {
	p, err := parseExecParams(ex.Params)
	if err != nil {
		return nil, err
	}
	action, err := actionOf(ex, p)
	if err != nil {
		return nil, err
	}
	el := ex.Element
	if el == nil {
		if el, err = a.ResolveElement(ctx, ex); err != nil {
			return nil, err
		}
	}
	path := dbus.ObjectPath(el.AccessiblePath)
	if !path.IsValid() {
		return nil, api.InvalidParam("params.accessible_path", "%q is not an object path", el.AccessiblePath)
	}
	var ap *app
	if el.BusName != "" {
		ap, err = a.appByBus(ctx, el.BusName)
	} else {
		ap, err = a.appByID(ctx, ex.Capability.AppID)
	}
	if err != nil {
		return nil, err
	}
	ln, err := ap.fetchLive(ctx, path)
	if err == errGone {
		return nil, elementNotFound(ElementID(ap.bus, path), "it no longer exists")
	}
	if err != nil {
		return nil, err
	}
	s := &core.ElementSummary{Action: action, Role: RoleName(ln.role), Name: spokenName(ln.name), App: ap.name, Value: p.Value}
	// The window's title is the cache's; without it the app's name is said.
	if ap.ensure(ctx, "", 0) == nil {
		ap.mu.Lock()
		if n := ap.nodes[ap.surfaceOfLocked(path)]; n != nil && n.path != path {
			s.Window = n.name
		}
		ap.mu.Unlock()
	}
	return s, nil
}

// spokenName is an element's name as the user is told it. GTK 4.8 names
// a button after its label twice over (gnome-calculator's "7" is "7 7",
// its "mod" "mod mod"): a name made of one text, a space and the same
// text again is said once.
func spokenName(name string) string {
	if n := len(name); n >= 3 && n%2 == 1 && name[n/2] == ' ' && name[:n/2] == name[n/2+1:] {
		return name[:n/2]
	}
	return name
}

// Action performs invoke.action: the element must belong to the surface.
func (a *Adapter) Action(ctx context.Context, p *api.InvokeActionParams) (*api.InvokeActionResult, error) {
	ap, win, err := a.surface(ctx, p.SurfaceID)
	if err != nil {
		return nil, err
	}
	bus, path, err := ParseElementID(p.ElementID)
	if err != nil {
		return nil, elementNotFound(p.ElementID, err.Error())
	}
	if bus != ap.bus {
		return nil, elementNotFound(p.ElementID, "not an element of surface "+p.SurfaceID)
	}
	ap.mu.Lock()
	elsewhere := ap.loaded && ap.nodes[path] != nil && ap.surfaceOfLocked(path) != win
	ap.mu.Unlock()
	if elsewhere {
		return nil, elementNotFound(p.ElementID, "not an element of surface "+p.SurfaceID)
	}
	res, err := a.perform(ctx, ap, path, p.Action, p.Value, a.cfg.ActionTimeout)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return &api.InvokeActionResult{Executed: true, Result: raw}, nil
}

// ReadText reads an element's whole text (at most MaxTextBytes).
func (a *Adapter) ReadText(ctx context.Context, elementID string) (string, error) {
	bus, path, err := ParseElementID(elementID)
	if err != nil {
		return "", api.InvalidParam("element_id", "%v", err)
	}
	ap, err := a.appByBus(ctx, bus)
	if err != nil {
		return "", err
	}
	res, err := a.perform(ctx, ap, path, ActionReadText, nil, a.cfg.ActionTimeout)
	if err != nil {
		return "", err
	}
	s, _ := res["text"].(string)
	return s, nil
}

// AccessiblePIDs are the process ids of the applications on the
// accessibility bus: the platform adapter leaves their windows to this
// adapter, so that one window has one surface id.
func (a *Adapter) AccessiblePIDs(ctx context.Context) (map[int]bool, error) {
	apps, err := a.appList(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int]bool{}
	for _, ap := range apps {
		if pid, err := ap.processID(ctx); err == nil && pid != 0 {
			out[int(pid)] = true
		}
	}
	return out, nil
}
