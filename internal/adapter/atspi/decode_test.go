package atspi

import (
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"
)

// item builds a cache item as godbus decodes ((so)(so)(so)iiassusau).
func item(bus string, path, parent dbus.ObjectPath, index, count int32, role uint32, name string, states ...uint32) []any {
	if states == nil {
		states = []uint32{0, 0}
	}
	return []any{
		[]any{bus, path}, []any{bus, rootPath}, []any{bus, parent},
		index, count, []string{"org.a11y.atspi.Accessible", "org.a11y.atspi.Component", "org.a11y.atspi.Action", "com.example.Unknown"},
		name, role, "a description", states,
	}
}

func TestDecodeCacheItem(t *testing.T) {
	it, err := decodeCacheItem(item(":1.0", "/org/a11y/atspi/accessible/152", "/org/a11y/atspi/accessible/127", 2, 0, rolePushButton, "OK", 0x43000900))
	if err != nil {
		t.Fatal(err)
	}
	want := cacheItem{
		obj: ref{":1.0", "/org/a11y/atspi/accessible/152"}, app: ref{":1.0", rootPath}, parent: ref{":1.0", "/org/a11y/atspi/accessible/127"},
		index: 2, ifaces: ifAccessible | ifComponent | ifAction, name: "OK", role: rolePushButton, desc: "a description", states: 0x43000900,
	}
	if diff := cmp.Diff(want, it, cmp.AllowUnexported(cacheItem{}, ref{})); diff != "" {
		t.Errorf("new layout (-want +got):\n%s", diff)
	}

	// The older layout lists the children.
	old := []any{
		[]any{":1.0", dbus.ObjectPath("/a")}, []any{":1.0", rootPath}, []any{":1.0", rootPath},
		[][]any{{":1.0", dbus.ObjectPath("/a/b")}, {":1.0", dbus.ObjectPath("/a/c")}, {"bad", dbus.ObjectPath("/x")}},
		[]string{"org.a11y.atspi.Accessible"}, "name", uint32(39), "", []uint32{1 << 24},
	}
	it, err = decodeCacheItem(old)
	if err != nil {
		t.Fatal(err)
	}
	if it.index != -1 || it.childCount != 2 || !it.childrenGiven || len(it.children) != 2 || it.children[1].path != "/a/c" || !it.states.has(stSensitive) {
		t.Errorf("old layout: got %+v", it)
	}

	for name, bad := range map[string]any{
		"not a struct":     "x",
		"short":            []any{1, 2, 3},
		"index a string":   func() []any { v := item(":1.0", "/a", "/", 0, 0, 1, "n"); v[3] = "0"; return v }(),
		"role signed":      func() []any { v := item(":1.0", "/a", "/", 0, 0, 1, "n"); v[7] = int32(1); return v }(),
		"states not au":    func() []any { v := item(":1.0", "/a", "/", 0, 0, 1, "n"); v[9] = []int32{1}; return v }(),
		"bad path":         item(":1.0", "a/b", "/", 0, 0, 1, "n"),
		"null object":      item(":1.0", nullPath, "/", 0, 0, 1, "n"),
		"bad bus":          item("not a bus", "/a", "/", 0, 0, 1, "n"),
		"ifaces not as":    func() []any { v := item(":1.0", "/a", "/", 0, 0, 1, "n"); v[5] = "x"; return v }(),
		"ref three fields": func() []any { v := item(":1.0", "/a", "/", 0, 0, 1, "n"); v[2] = []any{"a", "b", "c"}; return v }(),
	} {
		if _, err := decodeCacheItem(bad); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func TestDecodeItemsCleans(t *testing.T) {
	long := strings.Repeat("é", maxNameBytes) // 2 bytes each
	body := []any{[][]any{
		item(":1.0", "/a", "/", 0, -5, 1, "bad \xff utf8\x00"),
		item(":1.0", "/b", "/", 1, 0, 1, long),
		{"garbage"},
		item(":1.0", "/c", "/", 2, 0, 1, "third"),
	}}
	items, bad, truncated, err := decodeItems(body, 3)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 1 || !truncated || len(items) != 2 {
		t.Fatalf("got %d items, %d bad, truncated %v; want 2, 1, true", len(items), bad, truncated)
	}
	if items[0].name != "bad \uFFFD utf8" || items[0].childCount != 0 {
		t.Errorf("cleaned name %q, child count %d", items[0].name, items[0].childCount)
	}
	items, _, _, _ = decodeItems(body, 10)
	if n := items[1].name; len(n) > maxNameBytes || !utf8.ValidString(n) {
		t.Errorf("long name: %d bytes, valid %v", len(n), utf8.ValidString(n))
	}
	if _, _, _, err := decodeItems([]any{"x"}, 10); err == nil {
		t.Error("decodeItems of a string: no error")
	}
	if _, _, _, err := decodeItems(nil, 10); err == nil {
		t.Error("decodeItems of nothing: no error")
	}
}

func TestBuildFromItems(t *testing.T) {
	const bus = ":1.0"
	var items []cacheItem
	for _, raw := range [][]any{
		item(bus, rootPath, "/", -1, 2, roleApplication, "app"),
		item(bus, "/w2", rootPath, 1, 0, roleFrame, "second"),
		item(bus, "/w1", rootPath, 0, 1, roleFrame, "first"),
		item(bus, "/w1/b", "/w1", 0, 0, rolePushButton, "button"),
		item(":1.9", "/other", rootPath, 2, 0, rolePushButton, "other app"),
	} {
		it, err := decodeCacheItem(raw)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, it)
	}
	items[0].parent = ref{":1.2", rootPath} // the registry
	work := map[dbus.ObjectPath]*node{}
	buildFromItems(work, items, bus)
	if len(work) != 4 {
		t.Fatalf("%d nodes, want 4 (the other application's item left out)", len(work))
	}
	if got := work[rootPath].children; len(got) != 2 || got[0] != "/w1" || got[1] != "/w2" {
		t.Errorf("root's children %v, want [/w1 /w2] in index order", got)
	}
	if work[rootPath].parent != "" || work["/w1/b"].parent != "/w1" || !work["/w2"].kidsKnown {
		t.Errorf("links: root parent %q, button parent %q", work[rootPath].parent, work["/w1/b"].parent)
	}
}

func TestDecodeEvent(t *testing.T) {
	body := []any{"checked", int32(1), int32(0), dbus.MakeVariant(int32(0)), map[string]dbus.Variant{}}
	ev, ok := decodeEvent("org.a11y.atspi.Event.Object.StateChanged", ":1.0", "/a", body)
	if !ok || ev.kind != "object:state-changed" || ev.detail != "checked" || ev.d1 != 1 || ev.sender != ":1.0" || ev.path != "/a" {
		t.Errorf("state-changed: %+v, %v", ev, ok)
	}
	old := []any{"add", int32(3), int32(0), dbus.MakeVariant([]any{":1.0", dbus.ObjectPath("/b")}), []any{":1.0", rootPath}}
	ev, ok = decodeEvent("org.a11y.atspi.Event.Object.ChildrenChanged", ":1.0", "/a", old)
	if r, err := decodeRef(ev.data); !ok || ev.kind != "object:children-changed" || err != nil || r.path != "/b" {
		t.Errorf("children-changed: %+v, %v", ev, ok)
	}
	ev, ok = decodeEvent("org.a11y.atspi.Event.Focus.Focus", ":1.0", "/a", body)
	if !ok || ev.kind != "focus:" {
		t.Errorf("focus: %+v", ev)
	}
	ev, ok = decodeEvent("org.a11y.atspi.Event.Window.Activate", ":1.0", "/a", body)
	if !ok || ev.kind != "window:activate" {
		t.Errorf("window: %+v", ev)
	}
	for name, b := range map[string][]any{
		"org.freedesktop.DBus.NameOwnerChanged":    body,
		"org.a11y.atspi.Event.Object.StateChanged": body[:3],
		"org.a11y.atspi.Event.Object.TextChanged":  {int32(1), int32(1), int32(1), dbus.MakeVariant("")},
		"NoDot": body,
	} {
		if _, ok := decodeEvent(name, ":1.0", "/a", b); ok {
			t.Errorf("%s with %v: decoded", name, b)
		}
	}
	if got := eventMember("PropertyChange"); got != "property-change" {
		t.Errorf("eventMember = %q", got)
	}
}

func TestDecodeReplies(t *testing.T) {
	v, err := decodeValue(map[string]dbus.Variant{
		"CurrentValue": dbus.MakeVariant(5.0), "MinimumValue": dbus.MakeVariant(math.Inf(-1)),
		"MaximumValue": dbus.MakeVariant(math.NaN()), "MinimumIncrement": dbus.MakeVariant(0.5),
	})
	if err != nil || v != (rangeValue{Current: 5, Step: 0.5}) {
		t.Errorf("decodeValue = %+v, %v (non-finite values must become 0)", v, err)
	}
	if _, err := decodeValue(map[string]dbus.Variant{"CurrentValue": dbus.MakeVariant("5")}); err == nil {
		t.Error("decodeValue of a string CurrentValue: no error")
	}
	if x, y, w, h, err := decodeExtents([]any{int32(1), int32(2), int32(-3), int32(4)}); err != nil || x != 1 || y != 2 || w != 0 || h != 4 {
		t.Errorf("decodeExtents = %d %d %d %d %v", x, y, w, h, err)
	}
	if _, _, _, _, err := decodeExtents([]any{int32(1), "2", int32(3), int32(4)}); err == nil {
		t.Error("decodeExtents with a string: no error")
	}
	names, err := decodeActionNames([][]any{{"Click", "Clicks the button", ""}, {}, {"toggle\xff"}})
	if err != nil || len(names) != 2 || names[0] != "Click" || names[1] != "toggle\uFFFD" {
		t.Errorf("decodeActionNames = %q, %v", names, err)
	}
	ni, err := decodeAccessibleProps(map[string]dbus.Variant{
		"Name": dbus.MakeVariant("Title"), "ChildCount": dbus.MakeVariant(int32(-4)),
		"Parent": dbus.MakeVariant([]any{":1.0", dbus.ObjectPath("/p")}),
	})
	if err != nil || ni.name != "Title" || ni.childCount != 0 || ni.parent.path != "/p" {
		t.Errorf("decodeAccessibleProps = %+v, %v", ni, err)
	}
	refs, cut, err := decodeRefs(make([]any, maxChildren+1))
	if err != nil || !cut || len(refs) != 0 {
		t.Errorf("decodeRefs of %d junk entries: %d refs, cut %v, %v", maxChildren+1, len(refs), cut, err)
	}
}

func TestClean(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"plain", 10, "plain"},
		{"a\x00b", 10, "ab"},
		{"\xff\xfe", 10, "\uFFFD"},
		{"ééé", 5, "éé"},
		{"ééé", 1, ""},
	} {
		if got := clean(tc.in, tc.max); got != tc.want {
			t.Errorf("clean(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
