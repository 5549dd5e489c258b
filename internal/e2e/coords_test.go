package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// TestDesktopElementBoundsAreScreenCoordinates: an element's bounds (in
// its surface's coordinates) plus its surface's geometry (in the
// screen's) are where it is on the screen, for GTK 3 (screen coordinates
// from AT-SPI2) and GTK 4 (window coordinates only: the window's origin
// comes from X11). A click through XTEST at the centre of a check
// button's bounds redraws the pixels inside them in a capture, and for
// GTK 3 toggles the button as AT-SPI2 then reads it.
func TestDesktopElementBoundsAreScreenCoordinates(t *testing.T) {
	d, err := testkit.StartDesktop(false)
	if err != nil {
		t.Fatalf("the headless desktop did not start: %v", err)
	}
	t.Cleanup(d.Stop)
	for _, name := range []string{"gtk3-widget-factory", "gtk4-widget-factory"} {
		app, err := d.StartApp(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(app.Stop)
	}
	if err := d.WaitApps(60*time.Second, "gtk3-widget-factory", "gtk4-widget-factory"); err != nil {
		t.Fatal(err)
	}
	w, agent := desktopPCPD(t, d, "[apps.\"system.input\".capabilities.click]\ntrust_level = \"auto\"\n"+
		"[apps.\"system\".capabilities.capture]\ntrust_level = \"auto\"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, appID := range []string{"atspi.gtk3-widget-factory", "atspi.gtk4-widget-factory"} {
		t.Run(appID, func(t *testing.T) {
			sid := appID + "/1"
			checks := func() []api.Element {
				res, err := agent.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: sid})
				if err != nil {
					t.Fatal(err)
				}
				var out []api.Element
				var walk func(e *api.Element)
				walk = func(e *api.Element) {
					visible := slices.Contains(e.States, "showing") || slices.Contains(e.States, "visible")
					if e.Role == "check box" && strings.Contains(strings.ToLower(e.Label), "check") && visible && e.Bounds != nil && e.Bounds.W > 4 && e.Bounds.H > 4 &&
						slices.Contains(e.States, "sensitive") && !slices.Contains(e.States, "indeterminate") {
						out = append(out, *e)
					}
					for i := range e.Children {
						walk(&e.Children[i])
					}
				}
				walk(&res.Root)
				return out
			}
			before := checks()
			if len(before) == 0 {
				t.Fatalf("no visible, sensitive check box with bounds in %s", sid)
			}
			target := before[0]
			was := slices.Contains(target.States, "checked")
			// Element bounds are in the surface's coordinates (spec 000);
			// the surface's geometry is in the screen's.
			surf, err := agent.QuerySurface(ctx, &api.QuerySurfaceParams{SurfaceID: sid})
			if err != nil || surf.Geometry == nil {
				t.Fatalf("query.surface %s: %+v, %v", sid, surf, err)
			}
			b := target.Bounds
			x, y := surf.Geometry.X+b.X+b.W/2, surf.Geometry.Y+b.Y+b.H/2
			t.Logf("surface %s at %+v; %q at %+v: clicking %d,%d", sid, *surf.Geometry, target.Label, *b, x, y)
			// The element's pixels on the screen, unscaled.
			crop := func() []byte {
				res, err := agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "system.capture", AppID: "system",
					Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"max_long_edge":100000,"max_pixels":100000000}`)})
				if err != nil || len(res.Attachments) != 1 {
					t.Fatalf("system.capture: %+v, %v", res, err)
				}
				img, err := png.Decode(bytes.NewReader(res.Attachments[0].Data))
				if err != nil {
					t.Fatal(err)
				}
				var out []byte
				for py := y - b.H/2; py < y+b.H/2; py++ {
					for px := x - b.W/2; px < x+b.W/2; px++ {
						r, g, bl, _ := img.At(px, py).RGBA()
						out = append(out, byte(r>>8), byte(g>>8), byte(bl>>8))
					}
				}
				return out
			}
			changed := screenChanges(t, d.Vars["DISPLAY"])
			pixels := crop()
			sub, err := agent.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventElementStateChanged}, SurfaceID: sid})
			if err != nil {
				t.Fatal(err)
			}
			defer agent.Unsubscribe(ctx, sub.SubscriptionID)
			res, err := agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "system.input.click", AppID: "system.input",
				Source: api.SourceSystemIntelligence, Params: json.RawMessage(fmt.Sprintf(`{"x":%d,"y":%d}`, x, y))})
			if err != nil || res.Status != api.StatusSuccess {
				t.Fatalf("system.input.click at %d,%d: %+v, %v", x, y, res, err)
			}
			// The pixels inside the bounds change: the pointer landed on the
			// element the bounds name, which redrew (hovered, toggled).
			deadline := time.Now().Add(10 * time.Second)
			// The screen is captured again each time the X server reports
			// that something drew on it, until the element's pixels differ.
			for bytes.Equal(crop(), pixels) {
				if !changed(deadline) {
					t.Fatalf("a click at %d,%d changed no pixel inside %q's bounds", x, y, target.Label)
				}
			}
			if appID != "atspi.gtk3-widget-factory" {
				// GTK 4: this raw click at a screen point lands on whatever
				// window is on top there, and the GTK 3 factory's window
				// covers the same place, so the pixels (the pointer's
				// hover) are the check here; the Tier 3 subtest below aims
				// its click at the window and checks the toggle.
				return
			}
			// The state change arrives as an element.state_changed event of
			// the surface (subscribed before the click).
			for {
				var now []string
				for _, e := range checks() {
					if e.ID == target.ID {
						now = e.States
					}
				}
				if slices.Contains(now, "checked") != was {
					return
				}
				select {
				case <-agent.Notifications():
				case <-time.After(time.Until(deadline)):
					t.Fatalf("a click at the centre of %q's bounds %+v (%d,%d) did not toggle it: states %s", target.Label, *b, x, y, strings.Join(now, " "))
				}
			}
		})
	}

	t.Run("Tier 3: invoke.action on an element with no action of its own", func(t *testing.T) {
		// GTK 4's check button offers AT-SPI2 no action: invoke.action
		// falls back to a click at its place on the screen, after the
		// user approves (Tier 3 is confirm unless the policy says
		// otherwise), audited with route platform.
		sid := "atspi.gtk4-widget-factory/1"
		res, err := agent.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: sid})
		if err != nil {
			t.Fatal(err)
		}
		var target *api.Element
		var walk func(e *api.Element)
		walk = func(e *api.Element) {
			if target == nil && e.Role == "check box" && e.Label == "checkbutton" && len(e.Actions) == 0 && e.Bounds != nil &&
				slices.Contains(e.States, "sensitive") && !slices.Contains(e.States, "indeterminate") {
				target = e
			}
			for i := range e.Children {
				walk(&e.Children[i])
			}
		}
		walk(&res.Root)
		if target == nil {
			t.Fatal("no sensitive check button without actions in gtk4-widget-factory")
		}
		was := slices.Contains(target.States, "checked")
		sub, err := agent.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventElementStateChanged}, SurfaceID: sid})
		if err != nil {
			t.Fatal(err)
		}
		defer agent.Unsubscribe(ctx, sub.SubscriptionID)
		p := &api.InvokeActionParams{SurfaceID: sid, ElementID: target.ID, Action: "click"}
		_, err = agent.InvokeAction(ctx, p)
		var pe *api.Error
		// One confirmation, of the action the agent asked for, naming the
		// element; once approved, the Tier 3 click that carries it out is
		// not asked again.
		if !errors.As(err, &pe) || pe.Code != api.CodeConfirmationRequired || pe.DataMap()["capability_id"] != "atspi.gtk4-widget-factory.click" {
			t.Fatalf("invoke.action click: %v, want CONFIRMATION_REQUIRED for atspi.gtk4-widget-factory.click", err)
		}
		if d, _ := pe.DataMap()["description"].(string); !strings.Contains(d, "checkbutton") {
			t.Errorf("the confirmation's description %q does not name the check button", d)
		}
		id, _ := pe.DataMap()["confirmation_id"].(string)
		user, err := client.Dial(ctx, w.control, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer user.Close()
		if err := user.Call(ctx, api.MethodConfirmApprove, &api.ConfirmDecisionParams{ConfirmationID: id}, nil); err != nil {
			t.Fatal(err)
		}
		p.ConfirmationID = id
		out, err := agent.InvokeAction(ctx, p)
		if err != nil || !out.Executed || !strings.Contains(string(out.Result), `"route":"platform"`) ||
			!strings.Contains(string(out.Result), `"platform_surface_id":"x11:`) {
			t.Fatalf("invoke.action with the approval: %+v, %v", out, err)
		}
		// The click was aimed at gtk4-widget-factory's own window, which
		// the platform brought to the front first (the GTK 3 factory's
		// window covers the same place): the check button toggled, as
		// its element.state_changed event and a fresh read say.
		deadline := time.After(10 * time.Second)
		for {
			now, err := agent.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: sid, FocusID: target.ID})
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(now.Root.States, "checked") != was {
				break
			}
			select {
			case <-agent.Notifications():
			case <-deadline:
				t.Fatalf("the Tier 3 click did not toggle %q: states %s", target.Label, strings.Join(now.Root.States, " "))
			}
		}
		// pcpctl action --wait: the same click asked from the command line
		// waits for the user's decision, taken here with --last, and
		// toggles the check button back.
		asked, err := user.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventConfirmationRequested}})
		if err != nil {
			t.Fatal(err)
		}
		defer user.Unsubscribe(ctx, asked.SubscriptionID)
		done := make(chan result, 1)
		go func() { done <- w.pcpctl("action", "--wait", sid, target.ID, "click") }()
		for waiting := true; waiting; {
			select {
			case n := <-user.Notifications():
				waiting = n.Method != api.EventConfirmationRequested || !strings.Contains(string(n.Params), `"atspi.gtk4-widget-factory.click"`)
			case r := <-done:
				t.Fatalf("pcpctl action --wait ended before the user decided: %v\n%s%s", r.err, r.stdout, r.stderr)
			case <-ctx.Done():
				t.Fatal("no confirmation of atspi.gtk4-widget-factory.click was asked")
			}
		}
		w.mustPCPCTL("confirm", "approve", "--last")
		if r := <-done; r.err != nil || !strings.HasPrefix(r.stdout, "executed") || !strings.Contains(r.stderr, "waiting for the user to decide") {
			t.Fatalf("pcpctl action --wait: %v\nstdout: %s\nstderr: %s", r.err, r.stdout, r.stderr)
		}
		deadline = time.After(10 * time.Second)
		for {
			now, err := agent.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: sid, FocusID: target.ID})
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(now.Root.States, "checked") == was {
				break
			}
			select {
			case <-agent.Notifications():
			case <-deadline:
				t.Fatalf("pcpctl action did not toggle %q back: states %s", target.Label, strings.Join(now.Root.States, " "))
			}
		}
		var tail api.AuditTailResult
		w.pcpctlJSON(&tail, "audit", "tail", "-n", "10")
		found := false
		for _, e := range tail.Entries {
			var detail struct{ Route string }
			json.Unmarshal(e.Detail, &detail)
			found = found || e.Kind == "invoke" && e.CapabilityID == "system.input.click" && detail.Route == "platform" && e.Outcome == "success"
		}
		if !found {
			t.Fatalf("no audit entry of system.input.click with route platform: %+v", tail.Entries)
		}
	})

}
