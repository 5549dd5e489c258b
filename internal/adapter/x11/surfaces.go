package x11

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jezek/xgb/xproto"

	"github.com/pcp-dev/pcp/api"
)

// Surface states.
const (
	StateFocused    = "focused"
	StateMinimized  = "minimized"
	StateMaximized  = "maximized"
	StateFullscreen = "fullscreen"
	StateNormal     = "normal"
)

// Surface is one top-level window.
type Surface struct {
	Window   uint32 `json:"window"`
	Title    string `json:"title"`
	Instance string `json:"instance,omitempty"` // WM_CLASS's first part
	Class    string `json:"class,omitempty"`    // WM_CLASS's second part
	PID      int    `json:"pid,omitempty"`      // _NET_WM_PID; 0 when unknown
	// State is the primary state, for api.Surface: focused, minimized,
	// fullscreen, maximized or normal, in that precedence.
	State      string `json:"state"`
	Focused    bool   `json:"focused"`
	Minimized  bool   `json:"minimized"`
	Maximized  bool   `json:"maximized"`
	Fullscreen bool   `json:"fullscreen"`
	Mapped     bool   `json:"mapped"`
	// X, Y, Width, Height: the client area in root coordinates.
	X, Y, Width, Height int
}

// SurfaceID is the surface id of window w: "x11:0x" and its id in
// lower-case hexadecimal, without leading zeros.
func SurfaceID(w uint32) string { return "x11:0x" + strconv.FormatUint(uint64(w), 16) }

// ParseSurfaceID is SurfaceID's inverse; ok is false for another scheme.
func ParseSurfaceID(id string) (w uint32, ok bool) {
	h, found := strings.CutPrefix(id, "x11:0x")
	if !found || h == "" || len(h) > 8 {
		return 0, false
	}
	v, err := strconv.ParseUint(h, 16, 32)
	if err != nil || v == 0 {
		return 0, false
	}
	return uint32(v), true
}

// ID is the surface's id.
func (s *Surface) ID() string { return SurfaceID(s.Window) }

// API returns the surface as spec 000 describes it (tier 3).
func (s *Surface) API(appID string) *api.Surface {
	return &api.Surface{SurfaceID: s.ID(), AppID: appID, Title: s.Title, State: s.State,
		Geometry: &api.Bounds{X: s.X, Y: s.Y, W: s.Width, H: s.Height}, Tier: 3}
}

// getProp reads up to 1 MiB of a property.
func (c *Conn) getProp(w xproto.Window, name string) (*xproto.GetPropertyReply, bool) {
	r, err := xproto.GetProperty(c.xc, false, w, c.atoms[name], xproto.GetPropertyTypeAny, 0, 1<<18).Reply()
	if err != nil || r == nil || r.Format == 0 {
		return nil, false
	}
	return r, true
}

// windowProp reads a property holding one window (or cardinal).
func (c *Conn) windowProp(w xproto.Window, name string) (xproto.Window, bool) {
	r, ok := c.getProp(w, name)
	if !ok {
		return 0, false
	}
	v := parseCard32s(r.Value, r.Format)
	if len(v) == 0 {
		return 0, false
	}
	return xproto.Window(v[0]), true
}

// title reads _NET_WM_NAME, or WM_NAME without one.
func (c *Conn) title(w xproto.Window) string {
	if r, ok := c.getProp(w, "_NET_WM_NAME"); ok && r.Format == 8 {
		return parseText(r.Value, true)
	}
	if r, ok := c.getProp(w, "WM_NAME"); ok && r.Format == 8 {
		return parseText(r.Value, r.Type == c.atoms["UTF8_STRING"])
	}
	return ""
}

// managed reports whether a window manager keeps _NET_CLIENT_LIST.
func (c *Conn) clientList() ([]xproto.Window, bool) {
	r, ok := c.getProp(c.root, "_NET_CLIENT_LIST")
	if !ok {
		return nil, false
	}
	var out []xproto.Window
	for _, v := range parseCard32s(r.Value, r.Format) {
		out = append(out, xproto.Window(v))
	}
	return out, true
}

// topLevels lists the top-level windows: _NET_CLIENT_LIST under an EWMH
// window manager, else the root's mapped children that have WM_STATE,
// or those children's own children that have it (a reparenting window
// manager without EWMH), or the mapped children themselves.
func (c *Conn) topLevels() ([]xproto.Window, error) {
	if l, ok := c.clientList(); ok {
		return l, nil
	}
	tree, err := xproto.QueryTree(c.xc, c.root).Reply()
	if err != nil {
		return nil, fmt.Errorf("x11: listing the root's children: %w", err)
	}
	var out []xproto.Window
	for _, ch := range tree.Children {
		a, err := xproto.GetWindowAttributes(c.xc, ch).Reply()
		if err != nil || a.OverrideRedirect || a.Class == xproto.WindowClassInputOnly {
			continue
		}
		if _, ok := c.getProp(ch, "WM_STATE"); ok {
			out = append(out, ch)
			continue
		}
		if sub, err := xproto.QueryTree(c.xc, ch).Reply(); err == nil {
			found := false
			for _, g := range sub.Children {
				if _, ok := c.getProp(g, "WM_STATE"); ok {
					out = append(out, g)
					found = true
				}
			}
			if found {
				continue
			}
		}
		if a.MapState == xproto.MapStateViewable {
			out = append(out, ch)
		}
	}
	return out, nil
}

// activeWindow is _NET_ACTIVE_WINDOW, or the input focus without it.
func (c *Conn) activeWindow() xproto.Window {
	if w, ok := c.windowProp(c.root, "_NET_ACTIVE_WINDOW"); ok {
		return w
	}
	if f, err := xproto.GetInputFocus(c.xc).Reply(); err == nil && f.Focus > 1 {
		return f.Focus
	}
	return 0
}

// describe reads one window; ok is false when it is gone.
func (c *Conn) describe(w xproto.Window, active xproto.Window) (*Surface, bool) {
	a, err := xproto.GetWindowAttributes(c.xc, w).Reply()
	if err != nil {
		return nil, false
	}
	g, err := xproto.GetGeometry(c.xc, xproto.Drawable(w)).Reply()
	if err != nil {
		return nil, false
	}
	s := &Surface{Window: uint32(w), Title: c.title(w), Mapped: a.MapState == xproto.MapStateViewable,
		Width: int(g.Width), Height: int(g.Height), Focused: w == active}
	if t, err := xproto.TranslateCoordinates(c.xc, w, c.root, 0, 0).Reply(); err == nil {
		s.X, s.Y = int(t.DstX), int(t.DstY)
	}
	if r, ok := c.getProp(w, "WM_CLASS"); ok && r.Format == 8 {
		s.Instance, s.Class = parseWMClass(r.Value)
	}
	if r, ok := c.getProp(w, "_NET_WM_PID"); ok {
		if v := parseCard32s(r.Value, r.Format); len(v) > 0 && v[0] < 1<<22 {
			s.PID = int(v[0])
		}
	}
	if r, ok := c.getProp(w, "_NET_WM_STATE"); ok {
		var vert, horz bool
		for _, at := range parseCard32s(r.Value, r.Format) {
			switch xproto.Atom(at) {
			case c.atoms["_NET_WM_STATE_HIDDEN"]:
				s.Minimized = true
			case c.atoms["_NET_WM_STATE_FULLSCREEN"]:
				s.Fullscreen = true
			case c.atoms["_NET_WM_STATE_MAXIMIZED_VERT"]:
				vert = true
			case c.atoms["_NET_WM_STATE_MAXIMIZED_HORZ"]:
				horz = true
			}
		}
		s.Maximized = vert && horz
	}
	// ICCCM: WM_STATE's first member is 3 for an iconic window.
	if r, ok := c.getProp(w, "WM_STATE"); ok {
		if v := parseCard32s(r.Value, r.Format); len(v) > 0 && v[0] == 3 && !s.Mapped {
			s.Minimized = true
		}
	}
	switch {
	case s.Minimized:
		s.State, s.Focused = StateMinimized, false
	case s.Focused:
		s.State = StateFocused
	case s.Fullscreen:
		s.State = StateFullscreen
	case s.Maximized:
		s.State = StateMaximized
	default:
		s.State = StateNormal
	}
	return s, true
}

// Surfaces lists the top-level windows, by window id.
func (c *Conn) Surfaces(ctx context.Context) ([]*Surface, error) {
	ws, err := c.topLevels()
	if err != nil {
		return nil, err
	}
	active := c.activeWindow()
	out := make([]*Surface, 0, len(ws))
	for _, w := range ws {
		if err := ctxErr(ctx); err != nil {
			return nil, err
		}
		if s, ok := c.describe(w, active); ok {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Window < out[j].Window })
	return out, nil
}

// Surface describes one top-level window; SURFACE_NOT_FOUND when w is
// not one.
func (c *Conn) Surface(ctx context.Context, w uint32) (*Surface, error) {
	ws, err := c.topLevels()
	if err != nil {
		return nil, err
	}
	for _, t := range ws {
		if uint32(t) == w {
			if s, ok := c.describe(t, c.activeWindow()); ok {
				return s, nil
			}
		}
	}
	return nil, api.Errorf(api.CodeSurfaceNotFound, map[string]any{"surface_id": SurfaceID(w)}, "surface %s does not exist", SurfaceID(w))
}

// ByPID returns the top-level windows of process pid (_NET_WM_PID).
func (c *Conn) ByPID(ctx context.Context, pid int) ([]*Surface, error) {
	all, err := c.Surfaces(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Surface
	for _, s := range all {
		if s.PID == pid {
			out = append(out, s)
		}
	}
	return out, nil
}

// Active returns the focused top-level window, nil when none is.
func (c *Conn) Active(ctx context.Context) (*Surface, error) {
	a := c.activeWindow()
	if a == 0 {
		return nil, nil
	}
	s, err := c.Surface(ctx, uint32(a))
	if err != nil {
		return nil, nil
	}
	return s, nil
}
