package atspi

import (
	"errors"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
)

func TestQuirksOf(t *testing.T) {
	for _, c := range []struct {
		toolkit, version     string
		getAll, windowCoords bool
	}{
		{"gtk", "3.24.38", true, false},
		{"GTK", "4.8.3", true, true},
		{"Qt", "5.15.8", false, false},
		{"Qt", "6.4.2", false, false},
		{"", "", false, false},
		{"SomethingElse", "1.0", false, false},
	} {
		q := quirksOf(c.toolkit, c.version)
		if q.getAll != c.getAll || q.windowCoordsOnly != c.windowCoords {
			t.Errorf("%s %s: %+v", c.toolkit, c.version, q)
		}
		want := coordScreen
		if c.windowCoords {
			want = coordWindow
		}
		if q.windowCoordType() != want {
			t.Errorf("%s: coordinate type %d", c.toolkit, q.windowCoordType())
		}
	}
}

// TestRewriteNoGetAll: where GetAll is forbidden, no GetAll is sent; each
// becomes Gets, and the a{sv} of those that answered.
func TestRewriteNoGetAll(t *testing.T) {
	q := quirksOf("Qt", "5.15.8")
	acc := getAllProps("/a", ifaceAccessible)
	val := getAllProps("/v", ifaceValue)
	other := getAllProps("/o", ifaceText)
	state := newReq("/a", ifaceAccessible+".GetState")
	send, finish := q.rewrite([]*req{acc, state, val, other})
	for _, r := range send {
		if r.method == ifaceProperties+".GetAll" {
			t.Fatalf("GetAll sent: %+v", r)
		}
	}
	if len(send) != 1+4+4 {
		t.Fatalf("sent %d calls", len(send))
	}
	// Answer: every Get of /a, the Value's CurrentValue only.
	for _, r := range send {
		switch {
		case r.method == ifaceAccessible+".GetState":
			r.body = []any{[]uint32{1, 0}}
		case r.path == "/a":
			switch r.args[1] {
			case "Name":
				r.body = []any{dbus.MakeVariant("OK")}
			case "ChildCount":
				r.body = []any{dbus.MakeVariant(int32(3))}
			default:
				r.body = []any{dbus.MakeVariant("")}
			}
		case r.path == "/v" && r.args[1] == "CurrentValue":
			r.body = []any{dbus.MakeVariant(2.5)}
		default:
			r.err = dbus.Error{Name: "org.freedesktop.DBus.Error.InvalidArgs"}
		}
	}
	finish()
	ni, err := decodeAccessibleProps(acc.value())
	if err != nil || ni.name != "OK" || ni.childCount != 3 {
		t.Errorf("accessible %+v, %v", ni, err)
	}
	v, err := decodeValue(val.value())
	if err != nil || v.Current != 2.5 {
		t.Errorf("value %+v, %v", v, err)
	}
	if !errors.Is(other.err, errForbidden) {
		t.Errorf("GetAll of Text: %v", other.err)
	}
	if state.body == nil {
		t.Error("GetState was not passed through")
	}

	// Where GetAll is safe, nothing changes.
	send, _ = quirksOf("GTK", "4.8.3").rewrite([]*req{acc})
	if len(send) != 1 || send[0] != acc {
		t.Errorf("GTK 4: sent %+v", send)
	}
}

func TestRewriteAllFailed(t *testing.T) {
	acc := getAllProps("/a", ifaceAccessible)
	send, finish := quirks{}.rewrite([]*req{acc})
	gone := dbus.Error{Name: "org.freedesktop.DBus.Error.UnknownObject"}
	for _, r := range send {
		r.err = gone
	}
	finish()
	if !isGone(acc.err) {
		t.Errorf("err %v", acc.err)
	}
}

type fakeOrigins map[string][2]int

func (f fakeOrigins) Origin(pid int, title string) (int, int, bool) {
	o, ok := f[title]
	if pid != 42 {
		return 0, 0, false
	}
	return o[0], o[1], ok
}

func TestScreenBounds(t *testing.T) {
	origins := fakeOrigins{"GTK Widget Factory": {100, 250}}
	rel := api.Bounds{X: 0, Y: 0, W: 800, H: 600}
	if b, ok := screenBounds(rel, origins, 42, "GTK Widget Factory"); !ok || b != (api.Bounds{X: 100, Y: 250, W: 800, H: 600}) {
		t.Errorf("got %+v %v", b, ok)
	}
	// Content offset inside the window (client-side decorations) is kept.
	if b, _ := screenBounds(api.Bounds{X: 12, Y: 8, W: 10, H: 10}, origins, 42, "GTK Widget Factory"); b != (api.Bounds{X: 112, Y: 258, W: 10, H: 10}) {
		t.Errorf("got %+v", b)
	}
	for _, c := range []struct {
		o     WindowOrigins
		pid   int
		title string
	}{{nil, 42, "GTK Widget Factory"}, {origins, 7, "GTK Widget Factory"}, {origins, 42, "other"}} {
		if b, ok := screenBounds(rel, c.o, c.pid, c.title); ok || b != rel {
			t.Errorf("%+v: got %+v %v, want the window-relative bounds", c, b, ok)
		}
	}
}
