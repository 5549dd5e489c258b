package notify

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// Integration tests against Debian's dunst on a headless desktop's
// session bus (Xvfb, dbus-daemon), started once by TestMain. What PCP
// shows is read off the bus by a monitor (testkit.WatchNotifications),
// not from the Notifier; the user's click is a pick in dunst's context
// menu (testkit.Dunst.Answer), after which dunst emits ActionInvoked
// itself. A desktop or dunst that cannot start fails every test here.

var (
	desk     *testkit.Desktop
	dunst    *testkit.Dunst
	setupErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	if desk, setupErr = testkit.StartDesktop(false); setupErr == nil {
		if dunst, setupErr = desk.StartDunst(); setupErr != nil {
			desk.Stop()
			desk = nil
		}
	}
	code := m.Run()
	if dunst != nil {
		dunst.Stop()
	}
	if desk != nil {
		desk.Stop()
	}
	os.Exit(code)
}

// decision is one call of Config.Decide.
type decision struct {
	id      string
	approve bool
}

// world is a Notifier on the desktop's bus whose decisions go to a
// channel, and a monitor of the bus.
type world struct {
	n         *Notifier
	decisions chan decision
	watch     *testkit.NotifyWatch
	mu        sync.Mutex
	servers   []string // what OnServer was told, "name pid"
}

func newWorld(t *testing.T) *world {
	t.Helper()
	if setupErr != nil {
		t.Fatalf("the notification tests need the headless desktop and dunst, which did not start: %v", setupErr)
	}
	testkit.CheckGoroutines(t)
	w := &world{decisions: make(chan decision, 8)}
	var err error
	if w.watch, err = testkit.WatchNotifications(desk.Vars["DBUS_SESSION_BUS_ADDRESS"]); err != nil {
		t.Fatal(err)
	}
	w.n = New(Config{
		BusAddress: desk.Vars["DBUS_SESSION_BUS_ADDRESS"],
		Decide: func(ctx context.Context, id string, approve bool) error {
			w.decisions <- decision{id, approve}
			return nil
		},
		OnServer: func(name string, pid int) {
			w.mu.Lock()
			w.servers = append(w.servers, fmt.Sprintf("%s %d", name, pid))
			w.mu.Unlock()
		},
	})
	t.Cleanup(func() { w.n.Close(); w.watch.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.n.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

func confirmation(id string) api.Confirmation {
	return api.Confirmation{ConfirmationID: id, CapabilityID: "org.pcp.notes.delete", AppID: "org.pcp.notes",
		Description: `Delete a note (note_id="n-1")`, State: api.ConfirmPending, Requester: "agent:uid=1000,pid=42",
		ExpiresAt: time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)}
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// shown prompts c and returns its notification as the bus saw it.
func (w *world) shown(t *testing.T, c api.Confirmation) testkit.NotifyCall {
	t.Helper()
	w.n.Prompt(context.Background(), c)
	nc, err := w.watch.Next(within(t, 5*time.Second), "Notify")
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

func (w *world) decided(t *testing.T) decision {
	t.Helper()
	select {
	case d := <-w.decisions:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no decision within 5s")
	}
	return decision{}
}

// TestDunstApproveDeny: a confirmation shows as a notification with
// Approve and Deny, its capability, app and description; picking an
// action in dunst decides it, once.
func TestDunstApproveDeny(t *testing.T) {
	w := newWorld(t)
	w.mu.Lock()
	servers := w.servers
	w.mu.Unlock()
	if want := fmt.Sprintf("%s %d", w.n.Server(), dunst.PID); len(servers) != 1 || servers[0] != want {
		t.Errorf("OnServer got %v, want [%s]", servers, want)
	}
	for _, tc := range []struct {
		key     string
		approve bool
	}{{ActionApprove, true}, {ActionDeny, false}} {
		c := confirmation("conf-" + tc.key)
		nc := w.shown(t, c)
		if nc.Summary != "PCP: allow org.pcp.notes.delete?" || !strings.Contains(nc.Body, "App: org.pcp.notes\n") ||
			!strings.Contains(nc.Body, "Action: Delete a note (note_id=&quot;n-1&quot;)\n") || !strings.Contains(nc.Body, "Asked by: agent:uid=1000,pid=42") {
			t.Errorf("notification %q / %q lacks the capability, app, description or requester", nc.Summary, nc.Body)
		}
		if got := strings.Join(nc.Actions, ","); got != "approve,Approve,deny,Deny" {
			t.Errorf("actions %s, want approve,Approve,deny,Deny", got)
		}
		if n, err := dunst.Displayed(); err != nil || n != 1 {
			t.Errorf("dunst displays %d notifications (%v), want 1", n, err)
		}
		if err := dunst.Answer(nc.ID, tc.key); err != nil {
			t.Fatal(err)
		}
		inv, err := w.watch.Next(within(t, 5*time.Second), "ActionInvoked")
		if err != nil {
			t.Fatal(err)
		}
		if inv.ID != nc.ID || inv.Key != tc.key || inv.Sender != w.n.Server() {
			t.Errorf("dunst sent %+v, want ActionInvoked %d %s from %s", inv, nc.ID, tc.key, w.n.Server())
		}
		if d := w.decided(t); d != (decision{c.ConfirmationID, tc.approve}) {
			t.Errorf("decided %+v, want %s approve=%v", d, c.ConfirmationID, tc.approve)
		}
		// The decision withdraws the confirmation: dunst keeps a
		// notification answered from its menu until then.
		w.n.Withdraw(c.ConfirmationID)
		if cl, err := w.watch.Next(within(t, 5*time.Second), "NotificationClosed"); err != nil || cl.ID != nc.ID {
			t.Fatalf("NotificationClosed %+v, %v; want %d", cl, err, nc.ID)
		}
	}
}

// TestDunstForgedActionInvoked: an ActionInvoked that the notification
// server did not send decides nothing, whether broadcast on the bus or
// sent to the Notifier's own connection, with the right notification id
// and "approve". The user's answer that follows is the one taken.
func TestDunstForgedActionInvoked(t *testing.T) {
	w := newWorld(t)
	c := confirmation("conf-forged")
	nc := w.shown(t, c)

	forger, err := dbus.Connect(desk.Vars["DBUS_SESSION_BUS_ADDRESS"])
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	if err := forger.Emit(ObjectPath, ServiceName+".ActionInvoked", nc.ID, ActionApprove); err != nil {
		t.Fatal(err)
	}
	m := &dbus.Message{Type: dbus.TypeSignal, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldPath: dbus.MakeVariant(ObjectPath), dbus.FieldInterface: dbus.MakeVariant(ServiceName),
		dbus.FieldMember: dbus.MakeVariant("ActionInvoked"), dbus.FieldDestination: dbus.MakeVariant(w.n.BusName()),
		dbus.FieldSignature: dbus.MakeVariant(dbus.SignatureOf(nc.ID, ActionApprove))}, Body: []any{nc.ID, ActionApprove}}
	if call := forger.Send(m, nil); call.Err != nil {
		t.Fatal(call.Err)
	}
	// Both forgeries reached the Notifier's connection before the
	// user's answer: the bus monitor saw them.
	for range 2 {
		f, err := w.watch.Next(within(t, 5*time.Second), "ActionInvoked")
		if err != nil {
			t.Fatal(err)
		}
		if f.Sender != forger.Names()[0] {
			t.Fatalf("saw %+v, want the forger's", f)
		}
	}
	if err := dunst.Answer(nc.ID, ActionDeny); err != nil {
		t.Fatal(err)
	}
	if d := w.decided(t); d != (decision{c.ConfirmationID, false}) {
		t.Fatalf("first decision %+v, want the user's deny of %s: a forged ActionInvoked approved", d, c.ConfirmationID)
	}
	w.n.Withdraw(c.ConfirmationID)
}

// TestDunstWithdraw: a confirmation decided elsewhere (pcpctl) closes its
// notification.
func TestDunstWithdraw(t *testing.T) {
	w := newWorld(t)
	c := confirmation("conf-withdrawn")
	nc := w.shown(t, c)
	w.n.Withdraw(c.ConfirmationID)
	cl, err := w.watch.Next(within(t, 5*time.Second), "CloseNotification")
	if err != nil {
		t.Fatal(err)
	}
	closed, err := w.watch.Next(within(t, 5*time.Second), "NotificationClosed")
	if err != nil {
		t.Fatal(err)
	}
	// Reason 3: closed by a call to CloseNotification.
	if cl.ID != nc.ID || closed.ID != nc.ID || closed.Reason != 3 {
		t.Errorf("CloseNotification %d, NotificationClosed %d reason %d; want %d, %d reason 3", cl.ID, closed.ID, closed.Reason, nc.ID, nc.ID)
	}
	if n, err := dunst.Displayed(); err != nil || n != 0 {
		t.Errorf("dunst displays %d notifications (%v), want 0", n, err)
	}
}
