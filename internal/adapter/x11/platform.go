package x11

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// The platform's apps and capabilities (docs/x11.md lists their
// parameters).
const (
	AppInput      = "system.input" // system.input.click, .double_click, .right_click, .move, .drag, .scroll, .key, .type
	AppSystem     = "system"       // system.capture
	AppCompositor = "compositor"   // compositor.focus_surface, compositor.minimize_surface
)

// AdapterID is the id the platform's surface adapter is bound under.
const AdapterID = "x11"

// MaxInlinePNG bounds the PNG a capture result carries as base64; a
// larger one is left out of the result (inline_omitted) and reached
// through Platform.Capture.
const MaxInlinePNG = 8 << 20

// focusTimeout bounds the wait for the window manager to activate a
// window.
const focusTimeout = 3 * time.Second

// Platform is the X11 platform adapter: core.PlatformAdapter for the
// system and compositor capabilities, and core.Adapter for the surfaces
// of every top-level window (ids "x11:0x<window>"). Its methods may be
// called concurrently.
type Platform struct {
	c *Conn
	// AppOf names the app a window belongs to, for api.Surface's app_id;
	// nil: the lower-cased WM_CLASS instance. Set it before use.
	AppOf func(s *Surface) string
	// Claimed, when set, gives the processes whose windows another
	// adapter reports (the accessible apps): the session context leaves
	// their windows out, so that a window has one surface id. Their
	// windows still answer query.surface and the platform's capabilities
	// by their x11 ids. Set it before use.
	Claimed func(ctx context.Context) (map[int]bool, error)
}

// NewPlatform wraps a connection.
func NewPlatform(c *Conn) *Platform { return &Platform{c: c} }

// Conn is the platform's connection.
func (p *Platform) Conn() *Conn { return p.c }

var (
	_ core.PlatformAdapter = (*Platform)(nil)
	_ core.Adapter         = (*Platform)(nil)
)

func opt(p api.ParamDecl) api.ParamDecl {
	f := false
	p.Required = &f
	return p
}

var (
	pX         = api.ParamDecl{Name: "x", Type: "integer", Description: "x in root coordinates, or in the surface's when surface_id is given"}
	pY         = api.ParamDecl{Name: "y", Type: "integer", Description: "y, as x"}
	pSurface   = opt(api.ParamDecl{Name: "surface_id", Type: "string", Description: "x and y are relative to this surface, which is focused first"})
	pSurfaceID = api.ParamDecl{Name: "surface_id", Type: "string"}
)

// Manifests returns the platform's apps.
func (p *Platform) Manifests() map[string]*api.Manifest {
	point := []api.ParamDecl{pX, pY, pSurface}
	return map[string]*api.Manifest{
		AppInput: {Version: "1.0", Description: "Input on the X11 display through XTEST", Capabilities: []api.CapabilityDecl{
			{Name: "click", Tier: 3, TrustLevel: api.TrustConfirm, Description: "Click at a point",
				Parameters: append(point[:3:3], opt(api.ParamDecl{Name: "button", Type: "string", Description: "left (default), middle or right"}))},
			{Name: "double_click", Tier: 3, TrustLevel: api.TrustConfirm, Description: "Double-click at a point", Parameters: point},
			{Name: "right_click", Tier: 3, TrustLevel: api.TrustConfirm, Description: "Right-click at a point", Parameters: point},
			{Name: "move", Tier: 3, TrustLevel: api.TrustConfirm, Description: "Move the pointer to a point", Parameters: point},
			{Name: "drag", Tier: 3, TrustLevel: api.TrustConfirm, Description: "Drag with the left button from (x, y) to (to_x, to_y)",
				Parameters: []api.ParamDecl{pX, pY, {Name: "to_x", Type: "integer"}, {Name: "to_y", Type: "integer"}, pSurface}},
			{Name: "scroll", Tier: 3, TrustLevel: api.TrustConfirm, Description: "Turn the wheel at a point: dy > 0 scrolls down, dx > 0 right",
				Parameters: []api.ParamDecl{pX, pY, opt(api.ParamDecl{Name: "dx", Type: "integer"}), opt(api.ParamDecl{Name: "dy", Type: "integer"}), pSurface}},
			{Name: "key", Tier: 3, TrustLevel: api.TrustConfirm, Description: `Press a key chord: "ctrl+s", "ctrl+shift+Tab", "Return"`,
				Parameters: []api.ParamDecl{{Name: "keys", Type: "string"}, opt(pSurfaceID)}},
			{Name: "type", Tier: 3, TrustLevel: api.TrustConfirm, Description: "Type text, any characters",
				Parameters: []api.ParamDecl{{Name: "text", Type: "string"}, opt(pSurfaceID)}},
		}},
		AppSystem: {Version: "1.0", Description: "The X11 display", Capabilities: []api.CapabilityDecl{
			{Name: "capture", Tier: 3, TrustLevel: api.TrustConfirm, Description: "Capture a window or the screen as PNG, scaled to fit",
				Parameters: []api.ParamDecl{opt(pSurfaceID), opt(api.ParamDecl{Name: "max_long_edge", Type: "integer"}),
					opt(api.ParamDecl{Name: "max_pixels", Type: "integer"}), opt(api.ParamDecl{Name: "inline", Type: "boolean", Description: "also carry the PNG as base64 in the data, for faces without attachments (default false)"})}},
		}},
		AppCompositor: {Version: "1.0", Description: "The X11 window manager", Capabilities: []api.CapabilityDecl{
			{Name: "focus_surface", Tier: 3, TrustLevel: api.TrustAuto, Description: "Activate a window", Parameters: []api.ParamDecl{pSurfaceID}},
			{Name: "minimize_surface", Tier: 3, TrustLevel: api.TrustAuto, Description: "Minimize a window", Parameters: []api.ParamDecl{pSurfaceID}},
		}},
	}
}

// params are every capability's parameters.
type params struct {
	X, Y      *int
	ToX       *int `json:"to_x"`
	ToY       *int `json:"to_y"`
	DX, DY    int
	Button    string
	Keys      string
	Text      string
	SurfaceID string `json:"surface_id"`
	MaxLong   int    `json:"max_long_edge"`
	MaxPixels int    `json:"max_pixels"`
	Inline    *bool
}

// Execute runs one platform capability.
func (p *Platform) Execute(ctx context.Context, ex *core.Execution) (*api.CapabilityResult, error) {
	var ps params
	if len(ex.Params) > 0 && string(ex.Params) != "null" {
		if err := json.Unmarshal(ex.Params, &ps); err != nil {
			return nil, api.InvalidParam("params", "%v", err)
		}
	}
	id := ex.Capability.ID
	app, _ := api.CapabilityAppID(id)
	name := strings.TrimPrefix(id, app+".")
	var data any
	var err error
	var attach []api.Attachment
	switch app + "/" + name {
	case AppInput + "/click", AppInput + "/double_click", AppInput + "/right_click", AppInput + "/move":
		data, err = p.pointer(ctx, name, &ps)
	case AppInput + "/drag":
		data, err = p.drag(ctx, &ps)
	case AppInput + "/scroll":
		data, err = p.scroll(ctx, &ps)
	case AppInput + "/key", AppInput + "/type":
		data, err = p.keyboard(ctx, name, &ps)
	case AppSystem + "/capture":
		data, attach, err = p.capture(ctx, &ps)
	case AppCompositor + "/focus_surface", AppCompositor + "/minimize_surface":
		data, err = p.window(ctx, name, &ps)
	default:
		return nil, api.Errorf(api.CodeActionNotSupported, map[string]any{"capability_id": id}, "the X11 platform has no capability %s", id)
	}
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	return &api.CapabilityResult{Status: api.StatusSuccess, Data: raw, Attachments: attach}, nil
}

func (p *Platform) window(ctx context.Context, name string, ps *params) (any, error) {
	w, err := surfaceParam(ps.SurfaceID)
	if err != nil {
		return nil, err
	}
	if name == "minimize_surface" {
		err = p.c.Iconify(ctx, w)
	} else {
		err = p.c.Focus(ctx, w, focusTimeout)
	}
	if err != nil {
		return nil, err
	}
	return map[string]any{"surface_id": SurfaceID(w)}, nil
}

func surfaceParam(id string) (uint32, error) {
	if id == "" {
		return 0, api.MissingParam("surface_id")
	}
	w, ok := ParseSurfaceID(id)
	if !ok {
		return 0, api.Errorf(api.CodeSurfaceNotFound, map[string]any{"surface_id": id}, "surface %s is not an X11 surface", id)
	}
	return w, nil
}

// point resolves (x, y), relative to surface_id when given (which is then
// focused), to root coordinates.
func (p *Platform) point(ctx context.Context, ps *params, x, y *int, xn, yn string) (int, int, error) {
	if x == nil {
		return 0, 0, api.MissingParam(xn)
	}
	if y == nil {
		return 0, 0, api.MissingParam(yn)
	}
	if ps.SurfaceID == "" {
		return *x, *y, nil
	}
	w, err := surfaceParam(ps.SurfaceID)
	if err != nil {
		return 0, 0, err
	}
	s, err := p.c.Surface(ctx, w)
	if err != nil {
		return 0, 0, err
	}
	if *x < 0 || *y < 0 || *x >= s.Width || *y >= s.Height {
		return 0, 0, inputFailed("point_outside_surface", map[string]any{"x": *x, "y": *y, "surface_id": ps.SurfaceID},
			"point (%d,%d) is outside surface %s (%dx%d)", *x, *y, ps.SurfaceID, s.Width, s.Height)
	}
	return s.X + *x, s.Y + *y, nil
}

// focusParam focuses surface_id, when given.
func (p *Platform) focusParam(ctx context.Context, ps *params) error {
	if ps.SurfaceID == "" {
		return nil
	}
	w, err := surfaceParam(ps.SurfaceID)
	if err != nil {
		return err
	}
	return p.c.Focus(ctx, w, focusTimeout)
}

func (p *Platform) pointer(ctx context.Context, name string, ps *params) (any, error) {
	x, y, err := p.point(ctx, ps, ps.X, ps.Y, "x", "y")
	if err != nil {
		return nil, err
	}
	if err := p.focusParam(ctx, ps); err != nil {
		return nil, err
	}
	button, count := ButtonLeft, 1
	switch name {
	case "move":
		return map[string]any{"x": x, "y": y}, p.c.Move(ctx, x, y)
	case "double_click":
		count = 2
	case "right_click":
		button = ButtonRight
	default:
		switch ps.Button {
		case "", "left":
		case "middle":
			button = ButtonMiddle
		case "right":
			button = ButtonRight
		default:
			return nil, api.InvalidParam("button", "must be left, middle or right, got %q", ps.Button)
		}
	}
	return map[string]any{"x": x, "y": y}, p.c.Click(ctx, x, y, button, count)
}

func (p *Platform) drag(ctx context.Context, ps *params) (any, error) {
	x1, y1, err := p.point(ctx, ps, ps.X, ps.Y, "x", "y")
	if err != nil {
		return nil, err
	}
	x2, y2, err := p.point(ctx, ps, ps.ToX, ps.ToY, "to_x", "to_y")
	if err != nil {
		return nil, err
	}
	if err := p.focusParam(ctx, ps); err != nil {
		return nil, err
	}
	return map[string]any{"x": x1, "y": y1, "to_x": x2, "to_y": y2}, p.c.Drag(ctx, x1, y1, x2, y2, ButtonLeft)
}

func (p *Platform) scroll(ctx context.Context, ps *params) (any, error) {
	x, y, err := p.point(ctx, ps, ps.X, ps.Y, "x", "y")
	if err != nil {
		return nil, err
	}
	if err := p.focusParam(ctx, ps); err != nil {
		return nil, err
	}
	return map[string]any{"x": x, "y": y}, p.c.Scroll(ctx, x, y, ps.DX, ps.DY)
}

func (p *Platform) keyboard(ctx context.Context, name string, ps *params) (any, error) {
	if err := p.focusParam(ctx, ps); err != nil {
		return nil, err
	}
	if name == "key" {
		if ps.Keys == "" {
			return nil, api.MissingParam("keys")
		}
		return map[string]any{"keys": ps.Keys}, p.c.Key(ctx, ps.Keys)
	}
	return map[string]any{"characters": len([]rune(ps.Text))}, p.c.Type(ctx, ps.Text)
}

// Capture captures a surface ("" for the whole screen): the PNG's bytes
// for a transport that passes them out of band.
func (p *Platform) Capture(ctx context.Context, surfaceID string, opts CaptureOptions) (*Shot, error) {
	var w uint32
	if surfaceID != "" {
		var err error
		if w, err = surfaceParam(surfaceID); err != nil {
			return nil, err
		}
	}
	return p.c.Capture(ctx, w, opts)
}

// CaptureData is system.capture's result data.
type CaptureData struct {
	SurfaceID    string  `json:"surface_id,omitempty"`
	MimeType     string  `json:"mime_type"`
	Width        int     `json:"width"`
	Height       int     `json:"height"`
	Scale        float64 `json:"scale"`
	X            int     `json:"x"`
	Y            int     `json:"y"`
	SourceWidth  int     `json:"source_width"`
	SourceHeight int     `json:"source_height"`
	Bytes        int     `json:"bytes"`
	// PNG is the image as base64 in the data itself, when asked for
	// with inline (for a face that carries no attachments) and at most
	// MaxInlinePNG bytes. The image is always the result's attachment
	// "image" (image/png).
	PNG           string `json:"png,omitempty"`
	InlineOmitted bool   `json:"inline_omitted,omitempty"`
}

func (p *Platform) capture(ctx context.Context, ps *params) (any, []api.Attachment, error) {
	if ps.MaxLong < 0 || ps.MaxPixels < 0 {
		return nil, nil, api.InvalidParam("max_long_edge", "limits must not be negative")
	}
	shot, err := p.Capture(ctx, ps.SurfaceID, CaptureOptions{MaxLongEdge: ps.MaxLong, MaxPixels: ps.MaxPixels})
	if err != nil {
		return nil, nil, err
	}
	d := &CaptureData{SurfaceID: ps.SurfaceID, MimeType: "image/png", Width: shot.Width, Height: shot.Height, Scale: shot.Scale,
		X: shot.X, Y: shot.Y, SourceWidth: shot.SourceWidth, SourceHeight: shot.SourceHeight, Bytes: len(shot.PNG)}
	switch {
	case ps.Inline == nil || !*ps.Inline:
	case len(shot.PNG) > MaxInlinePNG:
		d.InlineOmitted = true
	default:
		d.PNG = base64.StdEncoding.EncodeToString(shot.PNG)
	}
	return d, []api.Attachment{{Name: "image", MediaType: "image/png", Data: shot.PNG}}, nil
}

func (p *Platform) appOf(s *Surface) string {
	if p.AppOf != nil {
		return p.AppOf(s)
	}
	return strings.ToLower(s.Instance)
}

// SurfaceAPI is a window as spec 000's Surface.
func (p *Platform) SurfaceAPI(s *Surface) *api.Surface { return s.API(p.appOf(s)) }

// Surface answers query.surface for an X11 surface id.
func (p *Platform) Surface(ctx context.Context, surfaceID string) (*api.Surface, error) {
	w, err := surfaceParam(surfaceID)
	if err != nil {
		return nil, err
	}
	s, err := p.c.Surface(ctx, w)
	if err != nil {
		return nil, err
	}
	return p.SurfaceAPI(s), nil
}

// Elements answers query.elements: a window without accessibility is one
// element, the window itself, with its one action, focus.
func (p *Platform) Elements(ctx context.Context, q *api.QueryElementsParams) (*api.QueryElementsResult, error) {
	w, err := surfaceParam(q.SurfaceID)
	if err != nil {
		return nil, err
	}
	s, err := p.c.Surface(ctx, w)
	if err != nil {
		return nil, err
	}
	states := []string{s.State}
	return &api.QueryElementsResult{Root: api.Element{ID: s.ID(), Role: "window", Label: s.Title,
		Bounds: &api.Bounds{X: 0, Y: 0, W: s.Width, H: s.Height}, Actions: []string{"focus"}, States: states}}, nil
}

// Action answers invoke.action: "focus" on a window's element.
func (p *Platform) Action(ctx context.Context, a *api.InvokeActionParams) (*api.InvokeActionResult, error) {
	w, err := surfaceParam(a.SurfaceID)
	if err != nil {
		return nil, err
	}
	if a.ElementID != a.SurfaceID || a.Action != "focus" {
		return nil, api.Errorf(api.CodeActionNotSupported, map[string]any{"surface_id": a.SurfaceID, "element_id": a.ElementID, "action": a.Action},
			"X11 surface %s: element %s has no action %q", a.SurfaceID, a.ElementID, a.Action)
	}
	if err := p.c.Focus(ctx, w, focusTimeout); err != nil {
		return nil, err
	}
	return &api.InvokeActionResult{Executed: true}, nil
}

// Context reports every top-level window and the focused one, and the
// display.
func (p *Platform) Context(ctx context.Context) (*api.SessionContext, error) {
	all, err := p.c.Surfaces(ctx)
	if err != nil {
		return nil, err
	}
	sc := &api.SessionContext{ActiveSurfaces: make([]string, 0, len(all)), SystemState: map[string]any{}}
	claimed := p.claimed(ctx)
	for _, s := range all {
		if claimed[s.PID] {
			continue
		}
		sc.ActiveSurfaces = append(sc.ActiveSurfaces, s.ID())
		if s.Focused && sc.FocusedSurface == nil {
			id := s.ID()
			sc.FocusedSurface = &id
		}
	}
	in := p.c.Info()
	sc.SystemState["display_server"] = "x11"
	sc.SystemState["x11"] = in
	return sc, nil
}

// claimed are the pids whose windows another adapter reports
// (Platform.Claimed), none when unset or failing.
func (p *Platform) claimed(ctx context.Context) map[int]bool {
	if p.Claimed == nil {
		return nil
	}
	m, err := p.Claimed(ctx)
	if err != nil {
		return nil
	}
	return m
}

// Claims reports whether another adapter reports s's window (its
// process is accessible), so that s is not listed nor announced twice.
func (p *Platform) Claims(ctx context.Context, s *Surface) bool {
	return s.PID != 0 && p.claimed(ctx)[s.PID]
}

// Origin implements the AT-SPI2 adapter's WindowOrigins: the origin, in
// root coordinates, of process pid's top-level window titled title (its
// only window when none has that title).
func (p *Platform) Origin(pid int, title string) (x, y int, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ws, err := p.c.ByPID(ctx, pid)
	if err != nil || len(ws) == 0 {
		return 0, 0, false
	}
	for _, w := range ws {
		if w.Title == title {
			return w.X, w.Y, true
		}
	}
	if len(ws) == 1 {
		return ws[0].X, ws[0].Y, true
	}
	return 0, 0, false
}

// Window finds the top-level window of process pid titled title (the
// only one of the process when none has that title), as Origin does, and
// returns its surface id and geometry in root coordinates.
func (p *Platform) Window(ctx context.Context, pid int, title string) (id string, geometry api.Bounds, ok bool) {
	ws, err := p.c.ByPID(ctx, pid)
	if err != nil || len(ws) == 0 {
		return "", api.Bounds{}, false
	}
	var w *Surface
	for _, s := range ws {
		if s.Title == title {
			w = s
			break
		}
	}
	if w == nil && len(ws) == 1 {
		w = ws[0]
	}
	if w == nil {
		return "", api.Bounds{}, false
	}
	return SurfaceID(w.Window), api.Bounds{X: w.X, Y: w.Y, W: w.Width, H: w.Height}, true
}

// Healthy reports whether the display still answers.
func (p *Platform) Healthy(ctx context.Context) error { return p.c.sync() }
