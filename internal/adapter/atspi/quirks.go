package atspi

import (
	"errors"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
)

// Toolkit differences the adapter relies on, measured on Debian 12 (GTK
// 3.24 with at-spi2-atk 2.46, GTK 4.8, Qt 5.15). Every difference lives
// in quirkTable; the code that makes a call a toolkit mishandles consults
// the application's quirks, and every call to an application goes
// through app.run, which applies them (see rewrite), so no call a toolkit
// is known to mishandle reaches it.
//
// The toolkit is read when the application is first seen, with
// Properties.Get of org.a11y.atspi.Application's ToolkitName and Version
// (never GetAll, which kills Qt 5). GTK 3 with the ATK bridge says "gtk",
// GTK 4 "GTK", Qt "Qt".
const (
	toolkitGTK3 = "gtk"
	toolkitGTK4 = "GTK"
	toolkitQt   = "Qt"
)

// quirks are what the adapter does differently for one toolkit.
type quirks struct {
	// getAll: Properties.GetAll is safe. Qt 5.15's adaptor reads a second
	// argument GetAll does not carry and crashes; a toolkit not in the
	// table is treated the same way, so GetAll is sent only to toolkits
	// known to answer it. Without it each property is read with
	// Properties.Get, as pyatspi does.
	getAll bool
	// cacheOnReference: objects enter the toolkit's Cache only once a
	// client has referenced them (GTK4), so a first walk lists children
	// and then asks GetItems once, instead of describing each node.
	cacheOnReference bool
	// actionOnEveryNode: every widget has the Action interface, many with
	// no action (GTK4; Qt 5, whose disabled tool buttons list none), so
	// whether a node can be activated takes its NActions. Elsewhere the
	// interface means the node has actions (GTK3 adds it only to widgets
	// that implement AtkAction).
	actionOnEveryNode bool
	// windowCoordsOnly: the toolkit answers every request for screen
	// coordinates with a warning ("Screen coordinates not supported,
	// reported positions will be wrong") and wrong positions (GTK 4). A
	// window's position is asked in window coordinates and its origin
	// added from Config.WindowOrigins; without them the geometry stays
	// window-relative (AppStats.Coordinates says "window").
	windowCoordsOnly bool
	// disabledKeepsActions: a disabled item keeps its actions and DoAction
	// answers true doing nothing (GTK3, GTK4, Qt 5: Qt's disabled menu
	// items keep Press). Actions are refused unless the element is
	// SENSITIVE when read live just before acting (see actionable); the
	// flag documents why, every toolkit gets the check.
	disabledKeepsActions bool
	// closedMenuStates: the items of a closed menu carry only ENABLED and
	// SENSITIVE, never SHOWING or VISIBLE (Qt 5; GTK sets SHOWING only on
	// windows, GTK 4.8). Actionability never requires SHOWING, and a
	// target prefers a visible element only among equals.
	closedMenuStates bool
	// maxInFlight bounds the calls outstanding to one application, when
	// Config.MaxInFlight does not (0: 12). GTK answers on its main
	// thread, and past about 16 calls more only queue; Qt 5, walked node
	// by node with one Get per property, keeps gaining up to about 48.
	maxInFlight int
}

// inFlight is the bound on the calls outstanding to one application:
// configured, else the toolkit's.
func (q quirks) inFlight(configured int) int {
	switch {
	case configured > 0:
		return configured
	case q.maxInFlight > 0:
		return q.maxInFlight
	}
	return 12
}

// quirkEntry is one row of quirkTable: the toolkit's name as
// Application.ToolkitName gives it and a prefix of its Version ("" for
// any).
type quirkEntry struct {
	toolkit, version string
	q                quirks
}

// quirkTable holds every toolkit difference. The first row whose toolkit
// and version prefix match applies; an application matching none gets
// quirks{}: no GetAll, screen coordinates trusted.
var quirkTable = []quirkEntry{
	{toolkitGTK3, "", quirks{getAll: true, disabledKeepsActions: true}},
	{toolkitGTK4, "", quirks{getAll: true, cacheOnReference: true, actionOnEveryNode: true, windowCoordsOnly: true, disabledKeepsActions: true, closedMenuStates: true}},
	{toolkitQt, "5.", quirks{actionOnEveryNode: true, disabledKeepsActions: true, closedMenuStates: true, maxInFlight: 48}},
	{toolkitQt, "", quirks{actionOnEveryNode: true, disabledKeepsActions: true, closedMenuStates: true, maxInFlight: 48}},
}

func quirksOf(toolkit, version string) quirks {
	for _, e := range quirkTable {
		if e.toolkit == toolkit && strings.HasPrefix(version, e.version) {
			return e.q
		}
	}
	return quirks{}
}

// knownProps are the properties a GetAll the adapter makes needs, per
// interface: what a toolkit without GetAll is asked one by one.
var knownProps = map[string][]string{
	ifaceAccessible: {"Name", "Description", "ChildCount", "Parent"},
	ifaceValue:      {"CurrentValue", "MinimumValue", "MaximumValue", "MinimumIncrement"},
}

// errForbidden is the error of a call the toolkit's quirks forbid and
// nothing replaces; it is never sent.
var errForbidden = errors.New("call not sent: the toolkit is known to mishandle it")

// rewrite returns the calls to send in place of reqs, and a function
// that, once they are answered, fills each of reqs from its
// replacements. A Properties.GetAll to a toolkit without getAll becomes
// one Properties.Get per property the caller reads (req.props, else
// knownProps), and its
// reply the a{sv} of those that answered; a GetAll of another interface
// is not sent (errForbidden). Calls nothing replaces are sent as they
// are.
func (q quirks) rewrite(reqs []*req) (send []*req, finish func()) {
	if q.getAll {
		return reqs, func() {}
	}
	type sub struct {
		orig  *req
		names []string
		gets  []*req
	}
	var subs []sub
	send = reqs[:0:0]
	for _, r := range reqs {
		if r.method != ifaceProperties+".GetAll" {
			send = append(send, r)
			continue
		}
		iface, _ := firstArg(r).(string)
		names := r.props
		if names == nil {
			names = knownProps[iface]
		}
		s := sub{orig: r, names: names}
		for _, n := range names {
			g := getProp(r.path, iface, n)
			s.gets = append(s.gets, g)
			send = append(send, g)
		}
		subs = append(subs, s)
	}
	if len(subs) == 0 {
		return reqs, func() {}
	}
	return send, func() {
		for _, s := range subs {
			if len(s.gets) == 0 {
				s.orig.err = errForbidden
				continue
			}
			m := map[string]dbus.Variant{}
			var firstErr error
			for i, g := range s.gets {
				if g.err != nil {
					if firstErr == nil {
						firstErr = g.err
					}
					continue
				}
				if len(g.body) == 1 {
					if v, ok := g.body[0].(dbus.Variant); ok {
						m[s.names[i]] = v
					}
				}
			}
			if len(m) == 0 && firstErr != nil {
				s.orig.err = firstErr
				continue
			}
			s.orig.body = []any{m}
		}
	}
}

func firstArg(r *req) any {
	if len(r.args) == 0 {
		return nil
	}
	return r.args[0]
}

// The coordinate types of Component.GetExtents.
const (
	coordScreen uint32 = 0 // ATSPI_COORD_TYPE_SCREEN
	coordWindow uint32 = 1 // ATSPI_COORD_TYPE_WINDOW
)

// windowCoordType is the coordinate type a top-level window's extents are
// asked in: screen coordinates, unless the toolkit cannot give them.
func (q quirks) windowCoordType() uint32 {
	if q.windowCoordsOnly {
		return coordWindow
	}
	return coordScreen
}

// screenBounds turns b, a top-level window's extents in its own
// coordinates (so its origin is 0, 0 or the offset of its content, such
// as client-side decorations), into root coordinates by adding the
// window's origin as the display server knows it. Without a known origin
// b is returned as it is, and ok is false.
func screenBounds(b api.Bounds, origins WindowOrigins, pid int, title string) (_ api.Bounds, ok bool) {
	if origins == nil {
		return b, false
	}
	x, y, ok := origins.Origin(pid, title)
	if !ok {
		return b, false
	}
	b.X += x
	b.Y += y
	return b, true
}
