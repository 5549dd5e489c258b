package atspi

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// loadedApp is an application whose cache holds testTree's nodes.
func loadedApp(t *testing.T) *app {
	a := New(Config{})
	t.Cleanup(func() { a.Close() })
	ap := newApp(a, ":1.0", "test", "gtk", "3.24.38")
	ap.id = "atspi.test"
	ap.nodes, ap.loaded = testTree().nodes, true
	ap.syncSurfacesLocked()
	return ap
}

func TestApplyEvents(t *testing.T) {
	ap := loadedApp(t)
	ev := func(kind, detail string, d1 int32, path dbus.ObjectPath, data any) []pcpEvent {
		return ap.apply(event{kind: kind, detail: detail, d1: d1, path: path, data: data, sender: ap.bus})
	}

	out := ev("object:state-changed", "checked", 1, "/w/p/cb2", int32(0))
	if n := ap.nodes["/w/p/cb2"]; !n.states.has(stChecked) {
		t.Errorf("state-changed:checked did not set the bit: %v", n.states.names())
	}
	if len(out) != 1 || out[0].typ != api.EventElementStateChanged || out[0].surface != "atspi.test/1" ||
		out[0].data["state"] != "checked" || out[0].data["value"] != true || out[0].data["element_id"] != ":1.0|/w/p/cb2" {
		t.Errorf("state-changed gave %+v", out)
	}
	ev("object:state-changed", "sensitive", 0, "/w/p/cb2", nil)
	if ap.nodes["/w/p/cb2"].states.has(stSensitive) {
		t.Error("state-changed:sensitive 0 left the bit set")
	}
	ev("object:state-changed", "some-new-state", 1, "/w/p/cb2", nil)
	if !ap.nodes["/w/p/cb2"].infoStale {
		t.Error("an unknown state did not mark the node for a fetch")
	}

	ev("object:property-change", "accessible-name", 0, "/w/p/open", "Open…")
	if ap.nodes["/w/p/open"].name != "Open…" {
		t.Errorf("name %q", ap.nodes["/w/p/open"].name)
	}
	out = ev("object:property-change", "accessible-name", 0, "/w", "New title")
	if len(out) != 1 || out[0].typ != api.EventSurfaceTitleChanged || out[0].data["title"] != "New title" {
		t.Errorf("a window's name change gave %+v", out)
	}

	ap.nodes["/w/p/text"].textOK = true
	out = ev("object:text-changed", "insert", 0, "/w/p/text", "x")
	if ap.nodes["/w/p/text"].textOK || len(out) != 1 || out[0].typ != api.EventElementValueChanged {
		t.Errorf("text-changed: textOK %v, %+v", ap.nodes["/w/p/text"].textOK, out)
	}

	// A removed child goes at once, with its subtree; the parent's
	// children are listed again on the next read.
	out = ev("object:children-changed", "remove", 0, "/w", []any{":1.0", dbus.ObjectPath("/w/tb")})
	if ap.nodes["/w/tb"] != nil || ap.nodes["/w/tb/vol"] != nil || !ap.staleKids["/w"] {
		t.Errorf("remove: /w/tb %v, its child %v, /w stale %v", ap.nodes["/w/tb"], ap.nodes["/w/tb/vol"], ap.staleKids["/w"])
	}
	for _, c := range ap.nodes["/w"].children {
		if c == "/w/tb" {
			t.Error("the removed child is still listed")
		}
	}
	if len(out) != 1 || out[0].typ != api.EventElementChildrenChanged || out[0].data["child_id"] != ":1.0|/w/tb" {
		t.Errorf("children-changed gave %+v", out)
	}

	// A window added to the root is a new surface; removed, it is gone.
	out = ev("object:children-changed", "add", 1, rootPath, []any{":1.0", dbus.ObjectPath("/dialog")})
	if len(out) != 2 || out[0].typ != api.EventSurfaceCreated || out[0].surface != "atspi.test/2" {
		t.Errorf("a new window gave %+v", out)
	}
	out = ev("object:children-changed", "remove", 1, rootPath, []any{":1.0", dbus.ObjectPath("/dialog")})
	if len(out) != 2 || out[0].typ != api.EventSurfaceDestroyed || out[0].surface != "atspi.test/2" {
		t.Errorf("a window gone gave %+v", out)
	}
	if _, ok := ap.surfaces["/dialog"]; ok {
		t.Error("the surface is still numbered")
	}

	// Focus moving to a window is reported once.
	out = ev("window:activate", "", 0, "/w", nil)
	if len(out) != 1 || out[0].typ != api.EventSurfaceFocusChanged || out[0].surface != "atspi.test/1" {
		t.Errorf("window:activate gave %+v", out)
	}
	if out = ev("focus:", "", 0, "/w/p/open", nil); len(out) != 0 {
		t.Errorf("focus within the focused window gave %+v", out)
	}

	// Events during a load are remembered for the loaded tree.
	ap.loading, ap.touched = true, map[dbus.ObjectPath]bool{}
	ev("object:state-changed", "checked", 0, "/w/p/cb1", nil)
	if !ap.touched["/w/p/cb1"] {
		t.Error("an event during a load was not recorded")
	}
}

// TestApplyEventKinds checks, kind by kind, what an event does to the
// cached node it names and which PCP events it gives, and that an event
// about a node the cache does not hold changes nothing but may still be
// reported.
func TestApplyEventKinds(t *testing.T) {
	for _, tc := range []struct {
		kind, detail string
		path         dbus.ObjectPath
		data         any
		check        func(ap *app) string // "" if the cache is as it should be
		events       []string             // typ of each PCP event
	}{
		{kind: "object:value-changed", path: "/w/p/text",
			check:  func(ap *app) string { return failIf(ap.nodes["/w/p/text"].valueOK, "valueOK still set") },
			events: []string{api.EventElementValueChanged}},
		{kind: "object:property-change", detail: "accessible-value", path: "/w/p/text",
			check:  func(ap *app) string { return failIf(ap.nodes["/w/p/text"].valueOK, "valueOK still set") },
			events: []string{api.EventElementValueChanged}},
		{kind: "object:property-change", detail: "accessible-description", path: "/w/p/open", data: "Opens a file",
			check: func(ap *app) string {
				return failIf(ap.nodes["/w/p/open"].desc != "Opens a file", "description "+ap.nodes["/w/p/open"].desc)
			}},
		{kind: "object:property-change", detail: "accessible-parent", path: "/w/p/open",
			check: func(ap *app) string {
				return failIf(!ap.staleKids["/w/p"] || !ap.nodes["/w/p/open"].infoStale, "old parent not relisted or node not stale")
			}},
		{kind: "object:property-change", detail: "accessible-role", path: "/w/p/open",
			check: func(ap *app) string { return failIf(!ap.nodes["/w/p/open"].infoStale, "node not stale") }},
		{kind: "object:property-change", detail: "accessible-name", path: "/w/p/open", data: 42,
			check: func(ap *app) string {
				n := ap.nodes["/w/p/open"]
				return failIf(!n.infoStale || n.name != "Open", "a name that is no string: stale "+fmt.Sprint(n.infoStale)+", name "+n.name)
			}},
		{kind: "object:bounds-changed", path: "/w/p/open",
			check: func(ap *app) string { return failIf(!ap.nodes["/w/p/open"].boundsAt.IsZero(), "bounds still fresh") }},
		{kind: "object:model-changed", path: "/w/p",
			check: func(ap *app) string { return failIf(!ap.staleKids["/w/p"], "children not relisted") }},
		{kind: "window:create", path: "/w",
			check: func(ap *app) string {
				return failIf(len(ap.staleKids) != 0, fmt.Sprint("stale children ", ap.staleKids))
			}},
		{kind: "object:state-changed", detail: "checked", path: "/gone",
			check:  func(ap *app) string { return failIf(ap.nodes["/gone"] != nil, "a node made up") },
			events: []string{api.EventElementStateChanged}},
		{kind: "object:children-changed", detail: "add", path: "/gone", data: []any{":1.0", dbus.ObjectPath("/gone/kid")},
			check: func(ap *app) string {
				return failIf(len(ap.staleKids) != 0, fmt.Sprint("stale children ", ap.staleKids))
			},
			events: []string{api.EventElementChildrenChanged}},
	} {
		t.Run(tc.kind+":"+tc.detail+" "+string(tc.path), func(t *testing.T) {
			ap := loadedApp(t)
			for _, n := range ap.nodes {
				n.valueOK, n.boundsAt = true, time.Unix(1, 0)
			}
			changed := ap.changed
			gen := uint64(0)
			if n := ap.nodes[tc.path]; n != nil {
				gen = n.gen
			}
			out := ap.apply(event{kind: tc.kind, detail: tc.detail, path: tc.path, data: tc.data, sender: ap.bus})
			if msg := tc.check(ap); msg != "" {
				t.Error(msg)
			}
			var got []string
			for _, e := range out {
				got = append(got, e.typ)
				if e.data["app_id"] != ap.id {
					t.Errorf("%s lacks the app id: %v", e.typ, e.data)
				}
			}
			if !slices.Equal(got, tc.events) {
				t.Errorf("events %v, want %v", got, tc.events)
			}
			if n := ap.nodes[tc.path]; n != nil && n.gen != gen+1 {
				t.Errorf("gen %d, want %d", n.gen, gen+1)
			}
			select {
			case <-changed:
			default:
				t.Error("no change notification")
			}
		})
	}
}

func failIf(bad bool, msg string) string {
	if bad {
		return msg
	}
	return ""
}

func TestSigQueueOverflow(t *testing.T) {
	q := newSigQueue(3)
	for i := 0; i < 5; i++ {
		q.DeliverSignal("", "", &dbus.Signal{Name: fmt.Sprint(i)})
	}
	sigs, overflow := q.take()
	if len(sigs) != 3 || !overflow || sigs[0].Name != "0" || sigs[2].Name != "2" {
		t.Errorf("took %d signals, overflow %v; want the first 3 and an overflow", len(sigs), overflow)
	}
	if rec, drop := q.counts(); rec != 5 || drop != 2 {
		t.Errorf("counts %d received %d dropped", rec, drop)
	}
	if sigs, overflow := q.take(); len(sigs) != 0 || overflow {
		t.Errorf("second take: %d, %v", len(sigs), overflow)
	}
	select {
	case <-q.notify:
	default:
		t.Error("no notification")
	}
}

// TestDesktopCloseLeaksNothing checks Close ends every goroutine the
// adapter started (the event loop, godbus's readers, the direct
// connections).
func TestDesktopCloseLeaksNothing(t *testing.T) {
	needDesktop(t)
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{})
	if _, err := a.ElementTree(t.Context(), widgetFactory); err != nil {
		t.Fatal(err)
	}
	a.Close()
}
