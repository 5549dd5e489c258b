package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/adapter/notify"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/testkit"
)

const notesAppID = "org.pcp.test.notes"

var promptManifest = json.RawMessage(`{"version":"1.0","capabilities":[{"name":"delete","tier":1,"trust_level":"confirm",` +
	`"description":"Delete a note","parameters":[{"name":"note_id","type":"string"}]}],"signature":""}`)

// TestNotificationConfirms runs pcpd with its desktop notifier on a
// headless desktop's session bus served by Debian's dunst, and an app
// with a confirm-level capability. The user's pick in dunst's menu (dunst
// then emits ActionInvoked) approves or denies, as "user:notification" in
// the audit log, and the agent waiting on the confirmation gets the
// outcome; a forged ActionInvoked from another connection decides
// nothing; a confirmation decided on the control socket closes its
// notification.
func TestNotificationConfirms(t *testing.T) {
	desk, err := testkit.StartDesktop(false)
	if err != nil {
		t.Fatalf("the notification test needs the headless desktop: %v", err)
	}
	t.Cleanup(desk.Stop)
	dunst, err := desk.StartDunst()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dunst.Stop)
	bus := desk.Vars["DBUS_SESSION_BUS_ADDRESS"]
	watch, err := testkit.WatchNotifications(bus)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watch.Close)
	testkit.CheckGoroutines(t)

	r := start(t, Config{AllowUnsigned: true, RateLimits: &core.RateLimits{}, Notifications: true, NotificationsBus: bus})
	ctx := context.Background()
	ran := make(chan string, 4)
	app, err := client.Dial(ctx, r.cfg.Socket, client.Options{Handler: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		var p api.InvokeCapabilityParams
		json.Unmarshal(params, &p)
		ran <- string(p.Params)
		return &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"deleted":true}`)}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	yes := true
	if _, err := app.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: notesAppID, Manifest: promptManifest, Serve: &yes}); err != nil {
		t.Fatal(err)
	}
	agent, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	user, err := client.Dial(ctx, r.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()

	next := func(member string) testkit.NotifyCall {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		nc, err := watch.Next(wctx, member)
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	// ask invokes delete, sees the notification raised, and waits for
	// the decision in the background.
	ask := func(noteID string) (testkit.NotifyCall, string, <-chan error) {
		t.Helper()
		params := json.RawMessage(`{"note_id":"` + noteID + `"}`)
		p := &api.InvokeCapabilityParams{CapabilityID: notesAppID + ".delete", AppID: notesAppID, Source: api.SourceSystemIntelligence, Params: params}
		_, err := agent.InvokeCapability(ctx, p)
		var pe *api.Error
		if !errors.As(err, &pe) || pe.Code != api.CodeConfirmationRequired {
			t.Fatalf("got %v, want CONFIRMATION_REQUIRED", err)
		}
		id, _ := pe.DataMap()["confirmation_id"].(string)
		nc := next("Notify")
		if !strings.Contains(nc.Body, "Action: Delete a note (note_id=&quot;"+noteID+"&quot;)") || !strings.Contains(nc.Body, "App: "+notesAppID) {
			t.Errorf("notification body %q lacks the app or the description", nc.Body)
		}
		done := make(chan error, 1)
		go func() {
			q := *p
			q.ConfirmationID, q.WaitMS = id, 10000
			_, err := agent.InvokeCapability(ctx, &q)
			done <- err
		}()
		return nc, id, done
	}
	outcome := func(done <-chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the invocation waiting on the confirmation did not return")
		}
		return nil
	}

	// Approve: the invocation runs.
	nc, _, done := ask("n-1")
	if err := dunst.Answer(nc.ID, notify.ActionApprove); err != nil {
		t.Fatal(err)
	}
	if err := outcome(done); err != nil {
		t.Fatalf("approved on the notification, the invocation answered %v", err)
	}
	if got := <-ran; got != `{"note_id":"n-1"}` {
		t.Errorf("the app ran %s", got)
	}

	// A forged ActionInvoked (right id, "approve") from another
	// connection, then the user's Deny: the Deny is the answer.
	nc, _, done = ask("n-2")
	forger, err := dbus.Connect(bus)
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	if err := forger.Emit(notify.ObjectPath, notify.ServiceName+".ActionInvoked", nc.ID, notify.ActionApprove); err != nil {
		t.Fatal(err)
	}
	if f := next("ActionInvoked"); f.Sender != forger.Names()[0] {
		t.Fatalf("saw %+v before the forgery", f)
	}
	if err := dunst.Answer(nc.ID, notify.ActionDeny); err != nil {
		t.Fatal(err)
	}
	if err := outcome(done); !errors.Is(err, api.ErrConfirmationDenied) {
		t.Fatalf("denied on the notification after a forged approve, the invocation answered %v, want CONFIRMATION_DENIED", err)
	}

	// Decided on the control socket: the notification is closed.
	nc, id, done := ask("n-3")
	if _, err := user.ConfirmDeny(ctx, id, "no"); err != nil {
		t.Fatal(err)
	}
	if err := outcome(done); !errors.Is(err, api.ErrConfirmationDenied) {
		t.Fatalf("denied with pcpctl, the invocation answered %v", err)
	}
	// The notifications answered on dunst are closed too, before.
	for next("CloseNotification").ID != nc.ID {
	}
	select {
	case got := <-ran:
		t.Errorf("a denied invocation ran: %s", got)
	default:
	}

	// The audit log names the notification as the decider.
	tail, err := user.AuditTail(ctx, 50)
	if err != nil {
		t.Fatal(err)
	}
	var deciders []string
	for _, e := range tail.Entries {
		if e.Kind == api.AuditConfirmation && (e.Outcome == api.ConfirmApproved || e.Outcome == api.ConfirmDenied) {
			deciders = append(deciders, e.Outcome+" by "+e.Actor)
		}
	}
	for _, want := range []string{"approved by user:notification", "denied by user:notification"} {
		if !strings.Contains(strings.Join(deciders, "\n"), want) {
			t.Errorf("audit decisions %q lack %q", deciders, want)
		}
	}
}

// TestAgentCannotActOnPrompt: once the notifier names the process that
// shows PCP's notifications, an agent's invoke.action on that process's
// windows is refused, through pcpd's agent socket. dunst is not on the
// accessibility bus, so gtk3-widget-factory stands in for the server.
func TestAgentCannotActOnPrompt(t *testing.T) {
	desk, err := testkit.StartDesktop(true)
	if err != nil {
		t.Fatalf("the test needs the headless desktop: %v", err)
	}
	t.Cleanup(desk.Stop)
	if err := desk.WaitApps(30*time.Second, "gtk3-widget-factory"); err != nil {
		t.Fatal(err)
	}
	testkit.CheckGoroutines(t)
	// The app's actions are auto, so invoke.action reaches the adapter
	// without a confirmation: its refusal is what is tested.
	policy := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(policy, []byte("[apps.\"atspi.gtk3-widget-factory\"]\ntrust_level = \"auto\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := serve(t, Config{Accessibility: true, AccessibilityBus: desk.Vars["AT_SPI_BUS_ADDRESS"], PolicyFile: policy})
	ctx := context.Background()
	agent, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	const surface = "atspi.gtk3-widget-factory/1"
	tree, err := agent.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: surface})
	if err != nil {
		t.Fatal(err)
	}
	var find func(e api.Element) string
	find = func(e api.Element) string {
		if e.Role == "check box" && e.Label == "checkbutton" {
			return e.ID
		}
		for _, c := range e.Children {
			if id := find(c); id != "" {
				return id
			}
		}
		return ""
	}
	el := find(tree.Root)
	if el == "" {
		t.Fatal("no check box in gtk3-widget-factory's tree")
	}
	bus, _, _ := strings.Cut(el, "|")
	a11y, err := dbus.Connect(desk.Vars["AT_SPI_BUS_ADDRESS"])
	if err != nil {
		t.Fatal(err)
	}
	defer a11y.Close()
	var pid uint32
	if err := a11y.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixProcessID", 0, bus).Store(&pid); err != nil {
		t.Fatal(err)
	}

	r.notificationServer(":1.99", int(pid)) // what the notifier says of its server
	_, err = agent.InvokeAction(ctx, &api.InvokeActionParams{SurfaceID: surface, ElementID: el, Action: "activate"})
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != api.CodePermissionDenied || pe.DataMap()["reason"] != "pcp_prompt" {
		t.Fatalf("invoke.action on the notification server's window: %v, want PERMISSION_DENIED, reason pcp_prompt", err)
	}
	// The server gone, the window is an ordinary one again.
	r.notificationServer("", 0)
	if _, err := agent.InvokeAction(ctx, &api.InvokeActionParams{SurfaceID: surface, ElementID: el, Action: "read_text"}); err != nil && errors.As(err, &pe) && pe.DataMap()["reason"] == "pcp_prompt" {
		t.Errorf("still refused once the server left: %v", err)
	}
}
