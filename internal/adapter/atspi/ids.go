package atspi

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"
)

// AppIDPrefix starts every app id this adapter gives: "atspi.<name>". The
// core wants reverse-DNS app ids (two or more labels), and a fixed first
// label keeps accessibility-detected apps apart from the apps that
// register manifests of their own.
const AppIDPrefix = "atspi."

// maxLabel bounds the label derived from an application's name.
const maxLabel = 64

// appLabel turns an application's accessible name into one app-id label:
// lower case, every run of characters other than a-z 0-9 _ - (dots
// included) becomes one "-", no leading or trailing "-", at most maxLabel
// bytes. "gnome-calculator" stays "gnome-calculator"; "Google Chrome"
// becomes "google-chrome"; "org.gnome.Nautilus" becomes
// "org-gnome-nautilus". A name with nothing left is "" (the caller then
// names the app after its bus name).
func appLabel(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			r = '-'
		}
		if r == '-' && (b.Len() == 0 || strings.HasSuffix(b.String(), "-")) {
			continue
		}
		if r == '_' && b.Len() == 0 {
			continue
		}
		b.WriteRune(r)
		if b.Len() >= maxLabel {
			break
		}
	}
	return strings.TrimRight(b.String(), "-")
}

// baseAppID is the app id an application gets when no other application
// on the bus has the same name: AppIDPrefix + appLabel(name), or, for an
// application without a usable name, AppIDPrefix + "app-" + its bus name
// (":1.42" gives "atspi.app-1-42").
func baseAppID(name, bus string) string {
	if l := appLabel(name); l != "" {
		return AppIDPrefix + l
	}
	return AppIDPrefix + "app-" + appLabel(bus)
}

// ElementID is the id of a node: its application's unique bus name and
// its object path, joined by "|" (which neither may contain). It is stable
// for the node's life and resolves without any state in the adapter.
func ElementID(busName string, path dbus.ObjectPath) string {
	return busName + "|" + string(path)
}

// ParseElementID splits an element id into bus name and object path and
// checks both are well formed.
func ParseElementID(id string) (busName string, path dbus.ObjectPath, err error) {
	bus, p, ok := strings.Cut(id, "|")
	if !ok {
		return "", "", fmt.Errorf("element id %q: want <bus name>|<object path>", id)
	}
	if !validBusName(bus) {
		return "", "", fmt.Errorf("element id %q: %q is not a D-Bus name", id, bus)
	}
	if !dbus.ObjectPath(p).IsValid() {
		return "", "", fmt.Errorf("element id %q: %q is not an object path", id, p)
	}
	return bus, dbus.ObjectPath(p), nil
}

// validBusName checks the D-Bus bus name grammar: a unique name
// (":1.42") or a well-known name of two or more elements, at most 255
// bytes.
func validBusName(s string) bool {
	if s == "" || len(s) > 255 || !utf8.ValidString(s) {
		return false
	}
	unique := s[0] == ':'
	if unique {
		s = s[1:]
	}
	elems := strings.Split(s, ".")
	if len(elems) < 2 {
		return false
	}
	for _, e := range elems {
		if e == "" {
			return false
		}
		if !unique && e[0] >= '0' && e[0] <= '9' {
			return false
		}
		for i := 0; i < len(e); i++ {
			c := e[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				return false
			}
		}
	}
	return true
}

// SurfaceID names a top-level window: "<app id>/<n>", n counting the
// application's top-level windows from 1 in the order the adapter first
// saw them. The number is kept for the window's life and never reused
// while the application runs.
func SurfaceID(appID string, n int) string { return appID + "/" + strconv.Itoa(n) }

// parseSurfaceID splits a surface id of this adapter; ok is false for
// any other adapter's.
func parseSurfaceID(id string) (appID string, n int, ok bool) {
	app, num, found := strings.Cut(id, "/")
	if !found || !strings.HasPrefix(app, AppIDPrefix) || len(app) == len(AppIDPrefix) {
		return "", 0, false
	}
	v, err := strconv.Atoi(num)
	if err != nil || v < 1 || strconv.Itoa(v) != num {
		return "", 0, false
	}
	return app, v, true
}

// Structural actions, as invoke.action and capability ids name them.
const (
	ActionActivate = "activate"
	ActionSelect   = "select"
	ActionSetValue = "set_value"
	ActionScroll   = "scroll"
	ActionReadText = "read_text"
)

// Actions lists the structural actions, in the order elements list them.
var Actions = []string{ActionActivate, ActionSelect, ActionSetValue, ActionScroll, ActionReadText}

func isAction(s string) bool {
	for _, a := range Actions {
		if a == s {
			return true
		}
	}
	return false
}

// parseCapabilityID splits a capability id of the adapter's convention,
// "<app id>.<action>" or "<app id>.<action>.<anything>", where the app id
// is "atspi.<label>" and the action one of Actions. ok is false for any
// other id.
func parseCapabilityID(id string) (appID, action string, ok bool) {
	rest, found := strings.CutPrefix(id, AppIDPrefix)
	if !found {
		return "", "", false
	}
	label, rest, found := strings.Cut(rest, ".")
	if !found || label == "" {
		return "", "", false
	}
	action, _, _ = strings.Cut(rest, ".")
	if !isAction(action) {
		return "", "", false
	}
	return AppIDPrefix + label, action, true
}
