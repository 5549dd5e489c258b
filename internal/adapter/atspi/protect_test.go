package atspi

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// busPID asks the accessibility bus daemon, on a connection of the
// test's own, for the process behind an application's bus name.
func busPID(t *testing.T, busName string) int {
	t.Helper()
	c, err := dbus.Connect(os.Getenv("AT_SPI_BUS_ADDRESS"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var pid uint32
	if err := c.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixProcessID", 0, busName).Store(&pid); err != nil {
		t.Fatal(err)
	}
	return int(pid)
}

// TestDesktopProtectedPrompt: the adapter does not act on the windows of
// a process that shows PCP's own prompts, whether asked by invoke.action
// or by a capability, and says why; reading them is allowed, and other
// processes are not affected. (The desktop notification server in the
// tests, dunst, is not on the accessibility bus: a GTK application stands
// for it here.)
func TestDesktopProtectedPrompt(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{})
	ctx := context.Background()
	target := Target{App: widgetFactory, Role: "check box", Name: "checkbutton", States: []string{"sensitive", "!checked", "!indeterminate"}}
	m, err := a.Resolve(ctx, target, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bus, _, _ := strings.Cut(m.ElementID, "|")
	pid := busPID(t, bus)
	sid := mainSurface(t, a, widgetFactory)

	a.Protect("notifications", pid)
	_, err = act(ctx, a, sid, m.ElementID, ActionActivate, nil)
	if _, data := wantCode(t, err, api.CodePermissionDenied); data["reason"] != "pcp_prompt" || data["shows"] != "notifications" {
		t.Errorf("invoke.action refused with data %v, want reason pcp_prompt, shows notifications", data)
	}
	_, err = dispatch(ctx, a, widgetFactory+".activate", map[string]any{"element_id": m.ElementID})
	wantCode(t, err, api.CodePermissionDenied)
	if _, err := a.ReadText(ctx, m.ElementID); err == nil {
		t.Error("read_text of a protected element succeeded")
	}
	// Reading the tree is allowed; nothing was pressed.
	if _, err := a.Resolve(ctx, target, time.Second); err != nil {
		t.Fatalf("the protected check button changed or cannot be read: %v", err)
	}

	// Another process protected, or none: the application is acted on.
	a.Protect("notifications", pid+1<<20)
	if _, err := act(ctx, a, sid, m.ElementID, ActionActivate, nil); err != nil {
		t.Fatal(err)
	}
	a.Protect("notifications", 0)
	if _, err := act(ctx, a, sid, m.ElementID, ActionActivate, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Resolve(ctx, target, 3*time.Second); err != nil {
		t.Fatalf("the check button is not back to unchecked: %v", err)
	}
}
