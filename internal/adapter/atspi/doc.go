// Package atspi is pcpd's AT-SPI2 adapter: it makes every accessible
// application on the desktop usable through PCP without any change to the
// application (Tier 2). It talks D-Bus itself (godbus); there is no
// libatspi underneath.
//
// # Connection
//
// The adapter connects to the accessibility bus (Config.BusAddress, else
// AT_SPI_BUS_ADDRESS, else org.a11y.Bus.GetAddress on the session bus),
// adds match rules for AT-SPI2's event signals, and registers those events
// with the registry (GTK3 sends only events some client registered, and
// exposes its Cache interface only after that). It connects on first use,
// or at Connect, and retries a failed connection at most once a second; with
// no bus every call answers NO_ATSPI2_SUPPORT.
//
// The applications are the children of the registry's root
// (org.a11y.atspi.Registry, /org/a11y/atspi/accessible/root). Calls to an
// application go over a peer-to-peer connection when it offers one
// (Application.GetApplicationBusAddress: GTK3 does, GTK4 does not), about
// twice as fast as through the bus daemon, else through the bus. At most
// Config.MaxInFlight calls (default by toolkit) are outstanding to one application, and every
// call has its own timeout (Config.CallTimeout), never godbus's none: some
// GTK3 methods never answer.
//
// # Identifiers
//
//	app id      "atspi." + the application's accessible name, lower case, every run
//	            of characters other than a-z 0-9 _ - as one "-": "atspi.gnome-calculator",
//	            "atspi.gtk3-widget-factory". A second application of the same name is
//	            "<id>-2", then "-3", in the order the adapter first saw them; an id is
//	            kept while its application runs and given again once it has left. An
//	            application without a name is "atspi.app-<its bus name>". The prefix
//	            makes the ids reverse-DNS, as the core requires, and keeps them apart
//	            from the app ids of manifests.
//	surface id  "<app id>/<n>": the application root's n-th child (a top-level
//	            window: frame, dialog, window...) in the order the adapter first saw
//	            it, from 1; kept for the window's life, never reused while the
//	            application runs. "atspi.gnome-calculator/1".
//	element id  "<unique bus name>|<object path>": ":1.3|/org/a11y/atspi/accessible/152".
//	            It needs no table to resolve, holds for the node's life, and splits
//	            into spec 001's bus_name and accessible_path. Object paths are not
//	            stable across runs of an application: find nodes by target, not by
//	            a remembered path.
//
// # Trees and the cache
//
// Each application has a cache of its tree, filled on first use and kept
// current by events instead of walks. A fetch takes Cache.GetItems (one
// call describes most nodes), then lists the children of every node whose
// children the cache left out: GTK3 omits the cells of tree and table
// views (nodes with MANAGES_DESCENDANTS, which count as childless there),
// and GTK4 holds only objects some client has referenced, so its first
// fetch lists children level by level and then calls GetItems once more.
// Nodes GetItems does not describe cost four calls each (role, states,
// interfaces, properties). A fetch is bounded by Config.MaxNodes,
// Config.MaxDepth and Config.WalkTimeout; a cut tree is reported in Stats.
//
// Events keep the cache current: a state change or a new name is applied
// in place; a children change makes the next read list that node's
// children again (walking only new subtrees); text and value changes make
// the next read fetch that text or value again. A read with nothing
// changed makes no D-Bus call. If the event queue overflows, every tree is
// fetched again. Fields only some reads want are fetched lazily per node:
// text (the trees carry at most Config.TreeTextChars characters of a text
// field; read_text reads all), range values, action counts, and bounds
// (reused for Config.BoundsMaxAge, since toolkits send no reliable event
// when a widget moves).
//
// Role names come from the numeric role (roles.go's table of AT-SPI2's
// enumeration), never from GetRoleName, which GTK 4.8 gets wrong for some
// roles. States are decoded from the GetState bitset with AT-SPI2's state
// names ("sensitive", "multi-line"). Everything an application sends is
// untrusted: decode.go checks types, object paths and bus names, makes
// strings valid UTF-8 and bounds their length, and the fuzz tests hold it
// to that.
//
// Elements list the structural actions they support (activate, select,
// set_value, scroll, read_text), not the toolkit's action names; activate
// takes a toolkit action name as its value ({"name": "toggle"}).
//
// # Actions, targets and actionability
//
// See actions.go for what each action does and when an element is
// actionable, and target.go for targets: an element described by role,
// name, text, states and an ancestor. Exact matches beat matches ignoring
// case, spacing and GTK4's doubled labels ("2 2"), which beat substrings;
// among equals a visible element beats a hidden one; more than one match of
// the best kind is TARGET_AMBIGUOUS listing the candidates, never a silent
// first pick. Before acting the adapter waits, up to the action's timeout,
// for the target to exist and be actionable, checking again whenever the
// application reports a change, and says which condition failed if it
// never is.
//
// # The core's interfaces
//
// Adapter implements core.Adapter (query.surface, query.elements,
// invoke.action, query.session_context) and core.AccessibilityAdapter (ID
// "atspi"), with ElementTree and DetectApp for spec 001's ElementTree and
// DetectRequest, and Healthy and Stats for health reports.
//
// Detect claims capability ids "<app id>.<action>" and
// "<app id>.<action>.<anything>", where the app is on the bus and the
// action is structural: "atspi.gnome-calculator.activate",
// "atspi.gnome-calculator.activate.equals". The parameters name the
// element and carry the value:
//
//	{"element_id": ":1.3|/org/...", "value": ...}
//	{"role": "push button", "name": "2"}          a target, inline
//	{"target": {"role": "text", "states": ["editable"]}, "value": "hello"}
//	{"accessible_path": "/org/...", "bus_name": ":1.3"}   (the core resolves these)
//	{"action": "set_value", ...}      when the capability's name is not an action
//	{"timeout_ms": 500}               how long to wait for the target (default Config.ActionTimeout)
//
// # Events
//
// Config.OnEvent receives PCP events: element.state_changed (state, value),
// element.children_changed (change, index, child_id), element.value_changed
// (kind "text" or "value"), surface.created and surface.destroyed (a
// top-level window added to or removed from its application, or an
// application leaving the bus), surface.title_changed, and
// surface.focus_changed (window:activate, or focus moving to another
// window). They are called from one goroutine, in order.
//
// # Concurrency
//
// All exported methods may be called concurrently. Adapter.mu guards the
// connection and the application tables; each application's loadMu
// serializes the fetches that change its tree's shape and is the only
// lock held across D-Bus calls; its mu guards the cache and is held
// briefly. The order is app.loadMu, Adapter.mu, app.mu; no lock is held
// while Config.OnEvent runs. The event loop is the one long-lived
// goroutine; Close ends it and closes every connection.
package atspi
