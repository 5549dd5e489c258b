package atspi

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// Tests against the other toolkits' applications: GTK 4's widget factory
// and Debian's Qt 5 examples, each started by the test that needs it.

const (
	gtk4Factory = AppIDPrefix + "gtk4-widget-factory"
	qtCalc      = AppIDPrefix + "calculator"
	qtTextEdit  = AppIDPrefix + "rich-text"
	qtLineEdits = AppIDPrefix + "lineedits"
)

// qtApps are the Qt examples the tests start, by app id.
var qtApps = map[string]string{
	qtCalc:      "widgets/widgets/calculator",
	qtTextEdit:  "widgets/richtext/textedit",
	qtLineEdits: "widgets/widgets/lineedits",
}

// startApp starts an application on the desktop for the test, and stops
// it when the test ends.
func startApp(t testing.TB, name string, args ...string) *testkit.App {
	t.Helper()
	needDesktop(t)
	app, err := desk.StartApp(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Stop)
	return app
}

// startQt starts the Qt examples ids names.
func startQt(t testing.TB, ids ...string) map[string]*testkit.App {
	t.Helper()
	out := map[string]*testkit.App{}
	for _, id := range ids {
		out[id] = startApp(t, testkit.QtExample(qtApps[id]))
	}
	return out
}

// processAlive says whether the application's process still runs.
func processAlive(t *testing.T, a *Adapter, appID string) bool {
	t.Helper()
	ap, err := a.appByID(context.Background(), appID)
	if err != nil {
		t.Errorf("%s: %v", appID, err)
		return false
	}
	pid, err := ap.processID(context.Background())
	if err != nil {
		t.Errorf("%s: no pid: %v", appID, err)
		return false
	}
	return syscall.Kill(int(pid), 0) == nil
}

// readEverything reads every window's tree of appID (Elements, with
// bounds, values and texts) and the application's flat tree.
func readEverything(ctx context.Context, a *Adapter, appID string) (int, error) {
	ids, err := a.surfacesOf(ctx, appID)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, fmt.Errorf("%s has no window", appID)
	}
	for _, s := range ids {
		if _, err := a.Surface(ctx, s); err != nil {
			return 0, fmt.Errorf("surface %s: %w", s, err)
		}
		if _, err := a.Elements(ctx, &api.QueryElementsParams{SurfaceID: s}); err != nil {
			return 0, fmt.Errorf("elements of %s: %w", s, err)
		}
	}
	els, err := a.ElementTree(ctx, appID)
	return len(els), err
}

// TestDesktopCrashGuard reads every window's tree of every application of
// each toolkit twice, the second time from a cold cache, while the
// adapter watches their events, and checks that every application still
// runs and was never reported gone.
func TestDesktopCrashGuard(t *testing.T) {
	cases := []struct {
		toolkit string
		apps    []string
		start   func(t *testing.T) map[string]*testkit.App
	}{
		{"gtk3", []string{widgetFactory}, func(*testing.T) map[string]*testkit.App { return nil }},
		{"gtk4", []string{gtk4Factory, calculator}, func(t *testing.T) map[string]*testkit.App {
			return map[string]*testkit.App{gtk4Factory: startApp(t, "gtk4-widget-factory")}
		}},
		{"qt5", []string{qtCalc, qtTextEdit, qtLineEdits}, func(t *testing.T) map[string]*testkit.App {
			return startQt(t, qtCalc, qtTextEdit, qtLineEdits)
		}},
	}
	for _, c := range cases {
		t.Run(c.toolkit, func(t *testing.T) {
			testkit.CheckGoroutines(t)
			procs := c.start(t)
			gone := newRecorder(func(typ, app, _ string, data map[string]any) string {
				if typ == api.EventAppDisconnected {
					return fmt.Sprintf("%s %v", app, data)
				}
				return ""
			})
			logs := &testkit.SyncBuffer{}
			a := desktopWith(t, Config{OnEvent: gone.onEvent, Log: slog.New(slog.NewTextHandler(logs, nil))}, c.apps...)
			ctx := context.Background()
			want := map[string]string{widgetFactory: toolkitGTK3, calculator: toolkitGTK4, gtk4Factory: toolkitGTK4,
				qtCalc: toolkitQt, qtTextEdit: toolkitQt, qtLineEdits: toolkitQt}
			for round := 0; round < 2; round++ {
				for _, id := range c.apps {
					ap, err := a.appByID(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					if ap.toolkit != want[id] || ap.version == "" {
						t.Errorf("%s: toolkit %q %q, want %q", id, ap.toolkit, ap.version, want[id])
					}
					if round == 1 {
						ap.forget() // cold: every call again
					}
					n, err := readEverything(ctx, a, id)
					if err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
					if n < 20 {
						t.Errorf("%s: %d elements", id, n)
					}
				}
			}
			// Watch the events a moment: until the registry has answered a
			// round trip after the reads, every signal sent during them has
			// been taken by the event loop.
			if _, err := a.appList(ctx); err != nil {
				t.Fatal(err)
			}
			for _, id := range c.apps {
				if p := procs[id]; p != nil && !p.Alive() {
					t.Errorf("%s exited: %v", id, p.Err)
				}
				if !processAlive(t, a, id) {
					t.Errorf("%s's process is gone", id)
				}
			}
			gone.mu.Lock()
			if len(gone.lines) > 0 {
				t.Errorf("applications reported gone: %v", gone.lines)
			}
			gone.mu.Unlock()
			if l := logs.String(); l != "" {
				t.Errorf("logged: %s", l)
			}
		})
	}
}

// TestDesktopCrashReported makes a Qt 5 application crash on purpose, by
// lifting the quirk that keeps Properties.GetAll from it, and checks the
// crash is logged with the app and the call, answered APP_UNRESPONSIVE,
// and reported as app.disconnected.
func TestDesktopCrashReported(t *testing.T) {
	testkit.CheckGoroutines(t)
	procs := startQt(t, qtCalc)
	events := newRecorder(func(typ, app, _ string, data map[string]any) string {
		if typ == api.EventAppDisconnected {
			return fmt.Sprintf("%s %s %v %v", typ, app, data["reason"], data["call"])
		}
		return ""
	})
	logs := &testkit.SyncBuffer{}
	a := desktopWith(t, Config{OnEvent: events.onEvent, Log: slog.New(slog.NewTextHandler(logs, nil))}, qtCalc)
	ctx := context.Background()
	ap, err := a.appByID(ctx, qtCalc)
	if err != nil {
		t.Fatal(err)
	}
	ap.q.getAll = true // what the adapter did before it knew Qt
	_, win, err := a.surface(ctx, mainSurface(t, a, qtCalc))
	if err != nil {
		t.Fatal(err)
	}
	// Qt reads an argument that is not there: some calls answer an error
	// instead, none answers the properties.
	for i := 0; i < 100; i++ {
		r := getAllProps(win, ifaceAccessible)
		if err = ap.run(ctx, []*req{r}); err != nil {
			break
		}
		if r.err == nil {
			t.Fatalf("Qt answered GetAll: %v", r.body)
		}
	}
	_, data := wantCode(t, err, api.CodeAppUnresponsive)
	if data["reason"] != "crashed" || data["call"] != ifaceProperties+".GetAll" {
		t.Errorf("data %v", data)
	}
	select {
	case <-procs[qtCalc].Exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the calculator survived GetAll: the quirk is no longer needed")
	}
	events.waitFor(t, 5*time.Second, "app.disconnected "+qtCalc+" crashed "+ifaceProperties+".GetAll")
	l := logs.String()
	for _, w := range []string{"crashed", "app_id=" + qtCalc, "call=" + ifaceProperties + ".GetAll", "toolkit=Qt"} {
		if !strings.Contains(l, w) {
			t.Errorf("log %q lacks %q", l, w)
		}
	}
	if _, err := a.appByID(ctx, qtCalc); err == nil {
		t.Error("the crashed application is still listed")
	}
}

// TestDesktopQtCalculator: 7 × 6 = 42, pressing the buttons by name
// through AT-SPI actions and reading the display.
func TestDesktopQtCalculator(t *testing.T) {
	testkit.CheckGoroutines(t)
	startQt(t, qtCalc)
	a := desktopWith(t, Config{}, qtCalc)
	ctx := context.Background()
	display, err := a.Resolve(ctx, Target{App: qtCalc, Role: "text"}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"7", "×", "6", "="} {
		if _, err := dispatch(ctx, a, qtCalc+".activate", map[string]any{"role": "push button", "name": key}); err != nil {
			t.Fatalf("pressing %s: %v", key, err)
		}
	}
	eventually(t, a, qtCalc, 5*time.Second, "the display reads 42", func() (bool, string) {
		els, err := a.ElementTree(ctx, qtCalc)
		if err != nil {
			return false, err.Error()
		}
		e := infoOf(els, display.ElementID)
		if e == nil || e.Text == nil {
			return false, "no display"
		}
		return *e.Text == "42", *e.Text
	})
	if s, err := a.ReadText(ctx, display.ElementID); err != nil || s != "42" {
		t.Errorf("read_text of the display = %q, %v", s, err)
	}
}

// TestDesktopQtTextEdit sets the text of textedit's text area (an
// editable text) through EditableText and reads it back.
func TestDesktopQtTextEdit(t *testing.T) {
	testkit.CheckGoroutines(t)
	startQt(t, qtTextEdit)
	a := desktopWith(t, Config{}, qtTextEdit)
	ctx := context.Background()
	area := map[string]any{"role": "text", "states": []string{"editable", "multi line"}}
	const text = "Set through AT-SPI2, read back the same way."
	res, err := dispatch(ctx, a, qtTextEdit+".set_value.body", map[string]any{"target": area, "value": text})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res["element_id"].(string)
	eventually(t, a, qtTextEdit, 5*time.Second, "the text area holds the text", func() (bool, string) {
		s, err := a.ReadText(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return s == text, s
	})
}

// TestDesktopQtDisabledAction: a disabled Qt menu item keeps its Press
// action, and DoAction would answer true doing nothing; the adapter
// refuses it before acting. An enabled item of the same closed menu,
// which Qt describes only as enabled and sensitive, is actionable.
func TestDesktopQtDisabledAction(t *testing.T) {
	testkit.CheckGoroutines(t)
	startQt(t, qtTextEdit)
	a := desktopWith(t, Config{}, qtTextEdit)
	ctx := context.Background()
	cut, err := a.Resolve(ctx, Target{App: qtTextEdit, Role: "menu item", Name: "Cut"}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	els, err := a.ElementTree(ctx, qtTextEdit)
	if err != nil {
		t.Fatal(err)
	}
	if e := infoOf(els, cut.ElementID); e == nil || hasState(e.States, "sensitive") || !hasState(e.Actions, ActionActivate) {
		t.Fatalf("Cut, disabled and still offering its action: %+v", e)
	}
	start := time.Now()
	_, err = dispatch(ctx, a, qtTextEdit+".activate", map[string]any{"element_id": cut.ElementID, "timeout_ms": 300})
	pe, data := wantCode(t, err, api.CodeExecutionTimeout)
	if !strings.Contains(pe.Message, "not SENSITIVE") {
		t.Errorf("message %q does not say the item is not SENSITIVE", pe.Message)
	}
	if na, _ := data["not_actionable"].([]any); len(na) == 0 || na[0] != "not SENSITIVE" {
		t.Errorf("data %v lacks not_actionable", data)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
	// Bold, in the closed Format menu: enabled and sensitive, not showing.
	bold, err := a.Resolve(ctx, Target{App: qtTextEdit, Role: "menu item", Name: "Bold"}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e := infoOf(els, bold.ElementID)
	if e == nil || !hasState(e.States, "sensitive") || hasState(e.States, "showing") {
		t.Fatalf("the closed menu's Bold item: %+v", e)
	}
	if _, err := dispatch(ctx, a, qtTextEdit+".activate", map[string]any{"element_id": bold.ElementID}); err != nil {
		t.Fatalf("activating a closed menu's enabled item: %v", err)
	}
	if _, err := a.Resolve(ctx, Target{App: qtTextEdit, Role: "check box", Name: "Bold", States: []string{"checked"}}, 3*time.Second); err != nil {
		t.Errorf("Bold did not become checked in the tool bar: %v", err)
	}
}

// TestDesktopQtLineEdits reads lineedits' tree: four editable fields, each
// labelled by its group, and a text written to one reads back.
func TestDesktopQtLineEdits(t *testing.T) {
	testkit.CheckGoroutines(t)
	startQt(t, qtLineEdits)
	a := desktopWith(t, Config{}, qtLineEdits)
	ctx := context.Background()
	ms, err := a.Find(ctx, Target{App: qtLineEdits, Role: "text", States: []string{"editable"}})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range ms {
		names[m.Name] = true
	}
	for _, n := range []string{"Echo", "Validator", "Alignment", "Input mask", "Access"} {
		if !names[n] {
			t.Errorf("no editable text %q among %v", n, names)
		}
	}
	res, err := dispatch(ctx, a, qtLineEdits+".set_value", map[string]any{"role": "text", "name": "Echo", "value": "line one"})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res["element_id"].(string)
	eventually(t, a, qtLineEdits, 5*time.Second, "the Echo field holds the text", func() (bool, string) {
		s, err := a.ReadText(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return s == "line one", s
	})
	sid := mainSurface(t, a, qtLineEdits)
	s, err := a.Surface(ctx, sid)
	if err != nil || s.Title != "Line Edits" || s.Geometry == nil || s.Geometry.W <= 0 {
		t.Errorf("surface %+v, %v", s, err)
	}
}

// originsFunc is a WindowOrigins from a function.
type originsFunc func(pid int, title string) (int, int, bool)

func (f originsFunc) Origin(pid int, title string) (int, int, bool) { return f(pid, title) }

// TestDesktopGTK4Coordinates: GTK 4's window geometry is asked in window
// coordinates and placed by WindowOrigins; without it, it stays
// window-relative and the stats say so.
func TestDesktopGTK4Coordinates(t *testing.T) {
	testkit.CheckGoroutines(t)
	proc := startApp(t, "gtk4-widget-factory")
	var asked []string
	var mu sync.Mutex
	origins := originsFunc(func(pid int, title string) (int, int, bool) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, fmt.Sprintf("%d %s", pid, title))
		return 300, 200, true
	})
	ctx := context.Background()
	plain := desktopWith(t, Config{}, gtk4Factory)
	rel, err := plain.Surface(ctx, mainSurface(t, plain, gtk4Factory))
	if err != nil || rel.Geometry == nil || rel.Geometry.W <= 0 {
		t.Fatalf("surface %+v, %v", rel, err)
	}
	for _, s := range plain.Stats().Apps {
		if s.AppID == gtk4Factory && s.Coordinates != "window" || s.AppID == widgetFactory && s.Coordinates != "screen" {
			t.Errorf("%s: coordinates %q", s.AppID, s.Coordinates)
		}
	}
	placed := desktopWith(t, Config{WindowOrigins: origins}, gtk4Factory)
	abs, err := placed.Surface(ctx, mainSurface(t, placed, gtk4Factory))
	if err != nil || abs.Geometry == nil {
		t.Fatalf("surface %+v, %v", abs, err)
	}
	want := *rel.Geometry
	want.X += 300
	want.Y += 200
	if *abs.Geometry != want {
		t.Errorf("geometry %+v, want %+v (window-relative %+v moved by the origin)", *abs.Geometry, want, *rel.Geometry)
	}
	if !proc.Alive() {
		t.Fatalf("gtk4-widget-factory exited: %v", proc.Err)
	}
	mu.Lock()
	if len(asked) != 1 || asked[0] != fmt.Sprintf("%d %s", proc.Cmd.Process.Pid, abs.Title) {
		t.Errorf("origins asked %v", asked)
	}
	mu.Unlock()
	for _, s := range placed.Stats().Apps {
		if s.AppID == gtk4Factory && s.Coordinates != "screen" {
			t.Errorf("with origins: coordinates %q", s.Coordinates)
		}
	}
}
