package atspi

import (
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/internal/manifest"
)

func TestElementID(t *testing.T) {
	id := ElementID(":1.42", "/org/a11y/atspi/accessible/152")
	if id != ":1.42|/org/a11y/atspi/accessible/152" {
		t.Errorf("ElementID = %q", id)
	}
	bus, path, err := ParseElementID(id)
	if err != nil || bus != ":1.42" || path != "/org/a11y/atspi/accessible/152" {
		t.Errorf("ParseElementID(%q) = %q, %q, %v", id, bus, path, err)
	}
	for _, bad := range []string{
		"", ":1.42", "/org/a11y", "|/a", ":1.42|", ":1.42|relative", ":1.42|/a//b", ":1.42|/a/",
		"nodots|/a", "org.0bad|/a", ":1.42|/a|b", strings.Repeat("a.", 200) + "b|/a",
	} {
		if _, _, err := ParseElementID(bad); err == nil {
			t.Errorf("ParseElementID(%q) accepted it", bad)
		}
	}
	// A well-known name is a valid bus name too.
	if _, _, err := ParseElementID("org.a11y.atspi.Registry|/org/a11y/atspi/accessible/root"); err != nil {
		t.Errorf("well-known name: %v", err)
	}
}

func TestAppIDs(t *testing.T) {
	for _, tc := range []struct{ name, bus, want string }{
		{"gnome-calculator", ":1.3", "atspi.gnome-calculator"},
		{"gtk3-widget-factory", ":1.0", "atspi.gtk3-widget-factory"},
		{"Google Chrome", ":1.9", "atspi.google-chrome"},
		{"org.gnome.Nautilus", ":1.9", "atspi.org-gnome-nautilus"},
		{"  --Weird__ name!! ", ":1.9", "atspi.weird__-name"},
		{"_x", ":1.9", "atspi.x"},
		{"Ünïcödé", ":1.9", "atspi.n-c-d"},
		{"", ":1.42", "atspi.app-1-42"},
		{"!!!", ":1.42", "atspi.app-1-42"},
		{strings.Repeat("a", 100), ":1.1", "atspi." + strings.Repeat("a", maxLabel)},
	} {
		got := baseAppID(tc.name, tc.bus)
		if got != tc.want {
			t.Errorf("baseAppID(%q, %q) = %q, want %q", tc.name, tc.bus, got, tc.want)
		}
		if err := manifest.ValidateAppID(got); err != nil {
			t.Errorf("baseAppID(%q) = %q, which the core refuses: %v", tc.name, got, err)
		}
	}
}

func TestAppIDCollisions(t *testing.T) {
	a := New(Config{})
	defer a.Close()
	var got []string
	for _, bus := range []string{":1.1", ":1.2", ":1.3"} {
		id := a.freeIDLocked(baseAppID("gnome-calculator", bus))
		a.byID[id] = newApp(a, bus, "gnome-calculator", "GTK", "4.8.3")
		got = append(got, id)
	}
	want := []string{"atspi.gnome-calculator", "atspi.gnome-calculator-2", "atspi.gnome-calculator-3"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ids = %v, want %v", got, want)
	}
	delete(a.byID, "atspi.gnome-calculator")
	if id := a.freeIDLocked(baseAppID("gnome-calculator", ":1.4")); id != "atspi.gnome-calculator" {
		t.Errorf("after the first left: %q, want the plain id again", id)
	}
}

func TestSurfaceIDs(t *testing.T) {
	id := SurfaceID("atspi.gnome-calculator", 3)
	if id != "atspi.gnome-calculator/3" {
		t.Errorf("SurfaceID = %q", id)
	}
	if app, n, ok := parseSurfaceID(id); !ok || app != "atspi.gnome-calculator" || n != 3 {
		t.Errorf("parseSurfaceID(%q) = %q, %d, %v", id, app, n, ok)
	}
	for _, bad := range []string{"", "surface-42", "atspi./1", "org.example/1", "atspi.x/0", "atspi.x/-1", "atspi.x/01", "atspi.x/y", "atspi.x"} {
		if _, _, ok := parseSurfaceID(bad); ok {
			t.Errorf("parseSurfaceID(%q) accepted it", bad)
		}
	}
}

func TestParseCapabilityID(t *testing.T) {
	for _, tc := range []struct {
		id, app, action string
		ok              bool
	}{
		{"atspi.gnome-calculator.activate", "atspi.gnome-calculator", "activate", true},
		{"atspi.gnome-calculator.activate.equals", "atspi.gnome-calculator", "activate", true},
		{"atspi.gtk3-widget-factory.set_value.title", "atspi.gtk3-widget-factory", "set_value", true},
		{"atspi.x.read_text", "atspi.x", "read_text", true},
		{"atspi.x.compose", "", "", false},
		{"atspi.x", "", "", false},
		{"atspi..activate", "", "", false},
		{"org.example.mail.activate", "", "", false},
		{"atspi.x.activate_now", "", "", false},
	} {
		app, action, ok := parseCapabilityID(tc.id)
		if app != tc.app || action != tc.action || ok != tc.ok {
			t.Errorf("parseCapabilityID(%q) = %q, %q, %v; want %q, %q, %v", tc.id, app, action, ok, tc.app, tc.action, tc.ok)
		}
	}
}

func TestValidBusName(t *testing.T) {
	for name, want := range map[string]bool{
		":1.0": true, ":1.42": true, "org.a11y.Bus": true, "org.a11y-x.Bus_2": true,
		"": false, ":": false, "org": false, "org..a": false, "org.1a": false, ":1.a b": false, "org.a11y.Bus\x00": false,
	} {
		if got := validBusName(name); got != want {
			t.Errorf("validBusName(%q) = %v, want %v", name, got, want)
		}
	}
}
