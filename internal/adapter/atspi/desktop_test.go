package atspi

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// Integration tests against a real headless desktop (Xvfb, a session
// bus, the accessibility bus, gtk3-widget-factory and gnome-calculator).
// TestMain starts one of its own with scripts/desktop, unless the tests
// already run inside one (PCP_DESKTOP_DIR set, as under `scripts/desktop
// run --apps -- go test ./internal/adapter/atspi/`). A desktop that cannot
// start fails every integration test with the reason; only -short skips
// them. Effects in the applications appear asynchronously, so every
// check of an effect waits, against a deadline, for the event that
// reports it: a change to the application's cache (eventually) or an event
// through Config.OnEvent (recorder.waitFor). Each test that connects
// checks that closing the adapter ends every goroutine it started.

const (
	widgetFactory = AppIDPrefix + "gtk3-widget-factory"
	calculator    = AppIDPrefix + "gnome-calculator"
)

// desktopErr is why TestMain could not start the desktop; desk is the
// desktop, for starting further applications.
var (
	desktopErr error
	desk       *testkit.Desktop
)

func TestMain(m *testing.M) {
	flag.Parse()
	var d *testkit.Desktop
	if dir := os.Getenv("PCP_DESKTOP_DIR"); dir != "" {
		desk = &testkit.Desktop{Dir: dir} // its environment is this process's
	} else if !testing.Short() {
		if d, desktopErr = testkit.StartDesktop(true); desktopErr == nil {
			d.Setenv()
			desk = d
		}
	}
	code := m.Run()
	if d != nil {
		d.Stop()
	}
	os.Exit(code)
}

// needDesktop fails (or, with -short, skips) a test without the desktop.
func needDesktop(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no headless desktop")
	}
	if desktopErr != nil {
		t.Fatalf("the AT-SPI2 integration tests need the headless desktop, which did not start: %v", desktopErr)
	}
}

// desktop returns a connected adapter once both test applications are on
// the bus with their windows. An application or window that appears is
// announced by a surface.created event; a bus not up yet, or an
// application too busy to answer, announces nothing, so those are tried
// again every retryEvery.
func desktop(t testing.TB, cfg Config) *Adapter {
	t.Helper()
	return desktopWith(t, cfg)
}

// desktopWith is desktop, also waiting for the applications extra (app
// ids) to be on the bus with a window.
func desktopWith(t testing.TB, cfg Config, extra ...string) *Adapter {
	t.Helper()
	needDesktop(t)
	appeared := make(chan struct{}, 1)
	onEvent := cfg.OnEvent
	cfg.OnEvent = func(typ, app, surface string, data map[string]any) {
		if typ == api.EventSurfaceCreated {
			select {
			case appeared <- struct{}{}:
			default:
			}
		}
		if onEvent != nil {
			onEvent(typ, app, surface, data)
		}
	}
	a := New(cfg)
	t.Cleanup(func() { a.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const retryEvery = 100 * time.Millisecond
	retry := time.NewTicker(retryEvery)
	defer retry.Stop()
	for {
		err := a.Connect(ctx)
		if err == nil {
			err = bothApps(ctx, a, extra...)
		}
		if err == nil {
			return a
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the desktop's applications did not appear on the accessibility bus: %v; stats %+v", err, a.Stats())
		case <-appeared:
		case <-retry.C:
		}
	}
}

// bothApps says why the test applications are not both there with a
// window, or nil.
func bothApps(ctx context.Context, a *Adapter, extra ...string) error {
	for _, id := range append([]string{widgetFactory, calculator}, extra...) {
		if ids, err := a.surfacesOf(ctx, id); err != nil || len(ids) == 0 {
			return fmt.Errorf("%s: surfaces %v, %v", id, ids, err)
		}
	}
	return nil
}

// surfacesOf lists an application's surface ids, in order.
func (a *Adapter) surfacesOf(ctx context.Context, appID string) ([]string, error) {
	ap, err := a.appByID(ctx, appID)
	if err != nil {
		return nil, err
	}
	if err := ap.toplevels(ctx); err != nil {
		return nil, err
	}
	ap.mu.Lock()
	defer ap.mu.Unlock()
	out := make([]string, len(ap.surfaces))
	for i := range out {
		out[i] = SurfaceID(ap.id, i+1)
	}
	for _, n := range ap.surfaces {
		if n > len(out) {
			out = append(out, SurfaceID(ap.id, n))
		}
	}
	return out, nil
}

// mainSurface is the application's first window.
func mainSurface(t *testing.T, a *Adapter, appID string) string {
	t.Helper()
	ids, err := a.surfacesOf(context.Background(), appID)
	if err != nil || len(ids) == 0 {
		t.Fatalf("surfaces of %s: %v, %v", appID, ids, err)
	}
	return ids[0]
}

// eventually checks cond, and again each time the cache of the
// application appID changes (an event applied, a fetch stored), until it
// holds or d passes.
func eventually(t *testing.T, a *Adapter, appID string, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		// Taken before the check, so a change during it is not missed.
		changed := a.changes(appID)
		if ok, _ := cond(); ok {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			if ok, got := cond(); !ok {
				t.Fatalf("after %s: %s; got %s", d, what, got)
			}
			return
		}
	}
}

// recorder keeps, as lines, the events an adapter reports through
// Config.OnEvent, for a test to wait for.
type recorder struct {
	line func(typ, app, surface string, data map[string]any) string // "" leaves the event out

	mu    sync.Mutex
	lines []string
	added chan struct{} // closed and replaced at every line kept
}

func newRecorder(line func(typ, app, surface string, data map[string]any) string) *recorder {
	return &recorder{line: line, added: make(chan struct{})}
}

// onEvent is the recorder's Config.OnEvent.
func (r *recorder) onEvent(typ, app, surface string, data map[string]any) {
	l := r.line(typ, app, surface, data)
	if l == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, l)
	close(r.added)
	r.added = make(chan struct{})
}

// waitFor waits until the recorder has kept the line want, for at most d.
func (r *recorder) waitFor(t *testing.T, d time.Duration, want string) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		found, added, got := slices.Contains(r.lines, want), r.added, strings.Join(r.lines, "; ")
		r.mu.Unlock()
		if found {
			return
		}
		select {
		case <-added:
		case <-deadline.C:
			t.Fatalf("after %s: no event %q; got %s", d, want, got)
		}
	}
}

// wantCode checks err's code and returns its data as it reads on the
// wire (through JSON).
func wantCode(t *testing.T, err error, code api.Code) (*api.Error, map[string]any) {
	t.Helper()
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("got %v, want %s", err, code.Name())
	}
	var data map[string]any
	raw, jerr := json.Marshal(pe.Data)
	if jerr == nil {
		jerr = json.Unmarshal(raw, &data)
	}
	if jerr != nil {
		t.Fatalf("%s data %v does not encode: %v", code.Name(), pe.Data, jerr)
	}
	return pe, data
}

// act performs invoke.action, as the broker sends it.
func act(ctx context.Context, a *Adapter, surface, element, action string, value any) (map[string]any, error) {
	p := &api.InvokeActionParams{SurfaceID: surface, ElementID: element, Action: action}
	if value != nil {
		raw, _ := json.Marshal(value)
		p.Value = raw
	}
	res, err := a.Action(ctx, p)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(res.Result, &m); err != nil || !res.Executed {
		return nil, fmt.Errorf("result %s, executed %v: %v", res.Result, res.Executed, err)
	}
	return m, nil
}

// dispatch runs a capability the way the core's AT-SPI2 path does:
// detect its owner, resolve the element from the parameters, execute.
func dispatch(ctx context.Context, a *Adapter, capabilityID string, params any) (map[string]any, error) {
	appID, ok, err := a.Detect(ctx, capabilityID, "")
	if err != nil || !ok {
		return nil, fmt.Errorf("Detect(%s) = %q, %v, %v", capabilityID, appID, ok, err)
	}
	raw, _ := json.Marshal(params)
	ex := &core.Execution{Capability: api.Capability{ID: capabilityID, AppID: appID, Name: strings.TrimPrefix(capabilityID, appID+"."), Tier: 2},
		Source: api.SourceSystemIntelligence, Params: raw}
	el, err := a.ResolveElement(ctx, ex)
	if err != nil {
		return nil, err
	}
	ex.Element = el
	res, err := a.Execute(ctx, ex)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(res.Data, &m); err != nil || res.Status != api.StatusSuccess {
		return nil, fmt.Errorf("result %+v: %v", res, err)
	}
	return m, nil
}

// infoOf finds an element in the flat tree.
func infoOf(els []api.ElementInfo, id string) *api.ElementInfo {
	for i := range els {
		if ElementID(els[i].BusName, dbus.ObjectPath(els[i].AccessiblePath)) == id {
			return &els[i]
		}
	}
	return nil
}

func hasState(states []string, s string) bool {
	for _, x := range states {
		if x == s {
			return true
		}
	}
	return false
}

func pyatspiWalk(t testing.TB, appName, mode string, iterations int) (int, []float64) {
	t.Helper()
	n, ms, err := testkit.PyatspiWalk(nil, appName, mode, iterations)
	if err != nil {
		t.Fatal(err)
	}
	return n, ms
}

func TestDesktopWidgetFactoryTree(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{})
	ctx := context.Background()
	els, err := a.ElementTree(ctx, widgetFactory)
	if err != nil {
		t.Fatal(err)
	}
	pyNodes, _ := pyatspiWalk(t, "gtk3-widget-factory", "minimal", 1)
	if d := len(els) - pyNodes; d < -pyNodes/20 || d > pyNodes/20 {
		t.Errorf("ElementTree has %d nodes, pyatspi walks %d", len(els), pyNodes)
	}
	t.Logf("ElementTree: %d nodes; pyatspi: %d", len(els), pyNodes)
	if els[0].Role != "application" || els[0].AccessiblePath != string(rootPath) || els[0].Name == nil || *els[0].Name != "gtk3-widget-factory" {
		t.Errorf("first element %+v, want the application root", els[0])
	}
	roles := map[string]int{}
	for _, e := range els {
		roles[e.Role]++
		if e.Role == "unknown" || e.Role == "invalid" {
			t.Errorf("%s: role %q", e.AccessiblePath, e.Role)
		}
		if _, _, err := ParseElementID(ElementID(e.BusName, dbus.ObjectPath(e.AccessiblePath))); err != nil {
			t.Error(err)
		}
		for _, s := range e.States {
			if stateBit(s) <= 0 {
				t.Errorf("%s: state %q", e.AccessiblePath, s)
			}
		}
		if e.Role == "push button" && len(e.Actions) == 0 {
			t.Errorf("push button %s has no actions", e.AccessiblePath)
		}
		if e.Role == "text" && e.Text == nil {
			t.Errorf("text %s has no text", e.AccessiblePath)
		}
	}
	for _, r := range []string{"frame", "push button", "check box", "radio button", "text", "spin button", "table cell", "page tab", "slider"} {
		if roles[r] == 0 {
			t.Errorf("no %s in the tree (roles %v)", r, roles)
		}
	}

	// query.elements of the window: the same nodes, nested, with bounds.
	sid := mainSurface(t, a, widgetFactory)
	res, err := a.Elements(ctx, &api.QueryElementsParams{SurfaceID: sid})
	if err != nil {
		t.Fatal(err)
	}
	count, withBounds := 0, 0
	var walk func(e *api.Element)
	walk = func(e *api.Element) {
		count++
		if e.Bounds != nil {
			withBounds++
		}
		for i := range e.Children {
			walk(&e.Children[i])
		}
	}
	walk(&res.Root)
	if res.Root.Role != "frame" || res.Root.Bounds == nil || res.Root.Bounds.W == 0 {
		t.Errorf("window element %+v", res.Root)
	}
	if count < len(els)/3 || withBounds < count/2 {
		t.Errorf("query.elements: %d elements, %d with bounds (tree %d)", count, withBounds, len(els))
	}
	// A focus_id narrows it to a subtree; an element of another surface
	// is not found.
	sub, err := a.Elements(ctx, &api.QueryElementsParams{SurfaceID: sid, FocusID: res.Root.Children[0].ID})
	if err != nil || sub.Root.ID != res.Root.Children[0].ID {
		t.Errorf("focus_id: %v, %v", sub, err)
	}
	_, err = a.Elements(ctx, &api.QueryElementsParams{SurfaceID: sid, FocusID: ElementID(els[0].BusName, "/org/a11y/atspi/accessible/999999")})
	wantCode(t, err, api.CodeElementNotFound)
}

func TestDesktopEntryText(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{})
	ctx := context.Background()
	sid := mainSurface(t, a, widgetFactory)
	ms, err := a.Find(ctx, Target{App: widgetFactory, Role: "text", States: []string{"editable", "sensitive", "single-line", "showing"}})
	if err != nil || len(ms) == 0 {
		t.Fatalf("Find: %v, %v", ms, err)
	}
	entry := ms[0]
	const text = "hello from pcp \u2713"
	if _, err := act(ctx, a, sid, entry.ElementID, ActionSetValue, text); err != nil {
		t.Fatal(err)
	}
	got, err := act(ctx, a, sid, entry.ElementID, ActionReadText, nil)
	if err != nil || got["text"] != text {
		t.Fatalf("read_text = %v, %v; want %q", got, err, text)
	}
	// The cache sees it too, through the text-changed events.
	eventually(t, a, widgetFactory, 3*time.Second, "the tree shows the entry's new text", func() (bool, string) {
		els, err := a.ElementTree(ctx, widgetFactory)
		if err != nil {
			return false, err.Error()
		}
		e := infoOf(els, entry.ElementID)
		if e == nil || e.Text == nil {
			return false, fmt.Sprint(e)
		}
		return *e.Text == text, *e.Text
	})
	if _, err := act(ctx, a, sid, entry.ElementID, ActionSetValue, ""); err != nil {
		t.Fatal(err)
	}
}

func TestDesktopCheckButton(t *testing.T) {
	testkit.CheckGoroutines(t)
	events := newRecorder(func(typ, app, surface string, data map[string]any) string {
		return fmt.Sprintf("%s %s %v %v", typ, data["element_id"], data["state"], data["value"])
	})
	a := desktop(t, Config{OnEvent: events.onEvent})
	ctx := context.Background()
	m, err := a.Resolve(ctx, Target{App: widgetFactory, Role: "check box", Name: "checkbutton", States: []string{"sensitive", "!checked", "!indeterminate"}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sid := mainSurface(t, a, widgetFactory)
	checked := func(want bool) func() (bool, string) {
		return func() (bool, string) {
			els, err := a.ElementTree(ctx, widgetFactory)
			if err != nil {
				return false, err.Error()
			}
			e := infoOf(els, m.ElementID)
			if e == nil {
				return false, "gone"
			}
			return hasState(e.States, "checked") == want, strings.Join(e.States, ",")
		}
	}
	if _, err := act(ctx, a, sid, m.ElementID, ActionActivate, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, a, widgetFactory, 3*time.Second, "the check button is checked", checked(true))
	events.waitFor(t, 3*time.Second, fmt.Sprintf("%s %s checked true", api.EventElementStateChanged, m.ElementID))
	// A named toolkit action works too.
	if res, err := act(ctx, a, sid, m.ElementID, ActionActivate, map[string]string{"name": "click"}); err != nil || !strings.EqualFold(fmt.Sprint(res["toolkit_action"]), "click") {
		t.Fatalf("activate {name: click} = %v, %v", res, err)
	}
	eventually(t, a, widgetFactory, 3*time.Second, "the check button is unchecked again", checked(false))
	_, err = act(ctx, a, sid, m.ElementID, ActionActivate, "no-such-action")
	_, data := wantCode(t, err, api.CodeActionNotSupported)
	if data["toolkit_actions"] == nil {
		t.Errorf("data %v lacks the toolkit's actions", data)
	}
}

func TestDesktopSpinButton(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{})
	ctx := context.Background()
	res, err := dispatch(ctx, a, widgetFactory+".set_value", map[string]any{"role": "spin button", "states": []string{"sensitive"}, "value": 42})
	if err != nil {
		t.Fatal(err)
	}
	if res["value"] != 42.0 {
		t.Errorf("set_value result %v, want value 42", res)
	}
	m, err := a.Resolve(ctx, Target{App: widgetFactory, Role: "spin button", States: []string{"sensitive"}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sid := mainSurface(t, a, widgetFactory)
	eventually(t, a, widgetFactory, 3*time.Second, "query.elements shows value 42", func() (bool, string) {
		r, err := a.Elements(ctx, &api.QueryElementsParams{SurfaceID: sid, FocusID: m.ElementID})
		if err != nil {
			return false, err.Error()
		}
		return string(r.Root.Value) == "42", string(r.Root.Value)
	})
	eventually(t, a, widgetFactory, 3*time.Second, "its text says 42", func() (bool, string) {
		s, err := a.ReadText(ctx, m.ElementID)
		return err == nil && s == "42", s
	})
	// Out of range is refused before anything is done.
	_, err = dispatch(ctx, a, widgetFactory+".set_value", map[string]any{"element_id": m.ElementID, "value": 1e9})
	wantCode(t, err, api.CodeInvalidParams)
	if _, err := dispatch(ctx, a, widgetFactory+".set_value", map[string]any{"element_id": m.ElementID, "value": 50}); err != nil {
		t.Fatal(err)
	}
}

func TestDesktopCalculator(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{})
	ctx := context.Background()
	// Clear the display first, so the test can run again.
	display, err := a.Resolve(ctx, Target{App: calculator, Role: "text", States: []string{"editable"}}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dispatch(ctx, a, calculator+".set_value.display", map[string]any{"element_id": display.ElementID, "value": ""}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"2", "+", "3", "="} {
		if _, err := dispatch(ctx, a, calculator+".activate", map[string]any{"role": "push button", "name": key}); err != nil {
			t.Fatalf("pressing %s: %v", key, err)
		}
	}
	eventually(t, a, calculator, 5*time.Second, "the display reads 5", func() (bool, string) {
		els, err := a.ElementTree(ctx, calculator)
		if err != nil {
			return false, err.Error()
		}
		e := infoOf(els, display.ElementID)
		if e == nil || e.Text == nil {
			return false, "no display"
		}
		return *e.Text == "5", *e.Text
	})
	if s, err := a.ReadText(ctx, display.ElementID); err != nil || s != "5" {
		t.Errorf("read_text of the display = %q, %v", s, err)
	}
}

func TestDesktopAmbiguousTarget(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{})
	ctx := context.Background()
	_, err := dispatch(ctx, a, widgetFactory+".activate", map[string]any{"role": "check box", "name": "checkbutton"})
	_, data := wantCode(t, err, api.CodeTargetAmbiguous)
	cands, _ := data["candidates"].([]any)
	if len(cands) < 2 || data["count"] != float64(len(cands)) {
		t.Fatalf("candidates %v", data)
	}
	for _, c := range cands {
		c := c.(map[string]any)
		if c["element_id"] == "" || c["role"] != "check box" || c["name"] != "checkbutton" || c["accessible_path"] == "" {
			t.Errorf("candidate %v", c)
		}
	}
	// Nothing resolves it silently: no element, no action.
	_, err = a.Resolve(ctx, Target{App: widgetFactory, Role: "push button", Name: "no such button"}, 100*time.Millisecond)
	_, data = wantCode(t, err, api.CodeElementNotFound)
	if data["target"] == nil {
		t.Errorf("ELEMENT_NOT_FOUND data %v lacks the target", data)
	}
}

func TestDesktopDisabledTarget(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{ActionTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	target := map[string]any{"role": "check box", "name": "checkbutton", "states": []string{"!sensitive", "!checked", "!indeterminate"}, "timeout_ms": 300}
	start := time.Now()
	_, err := dispatch(ctx, a, widgetFactory+".activate", target)
	pe, data := wantCode(t, err, api.CodeExecutionTimeout)
	if !strings.Contains(pe.Message, "not SENSITIVE") {
		t.Errorf("message %q does not say the element is not SENSITIVE", pe.Message)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %v, want about 300ms", d)
	}
	if na, _ := data["not_actionable"].([]any); len(na) == 0 || na[0] != "not SENSITIVE" {
		t.Errorf("data %v lacks not_actionable", data)
	}
	// DoAction was never called: it is still unchecked.
	if _, err := a.Resolve(ctx, Target{App: widgetFactory, Role: "check box", Name: "checkbutton", States: []string{"!sensitive", "!checked", "!indeterminate"}}, time.Second); err != nil {
		t.Fatalf("the disabled check button changed: %v", err)
	}
	// A disabled entry refuses text the same way.
	entries, err := a.Find(ctx, Target{App: widgetFactory, Role: "text", States: []string{"editable", "!sensitive", "showing"}})
	if err != nil || len(entries) == 0 {
		t.Fatalf("no disabled entry: %v", err)
	}
	_, err = act(ctx, a, mainSurface(t, a, widgetFactory), entries[0].ElementID, ActionSetValue, "nope")
	pe, _ = wantCode(t, err, api.CodeExecutionTimeout)
	if !strings.Contains(pe.Message, "not SENSITIVE") {
		t.Errorf("message %q", pe.Message)
	}
}

func TestDesktopSelectTab(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{})
	ctx := context.Background()
	sid := mainSurface(t, a, widgetFactory)
	tabs, err := a.Find(ctx, Target{App: widgetFactory, Role: "page tab", Name: "page 2", States: []string{"showing"}})
	if err != nil || len(tabs) == 0 {
		t.Fatalf("Find: %v, %v", tabs, err)
	}
	tab := tabs[0]
	if _, err := act(ctx, a, sid, tab.ElementID, ActionSelect, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, a, widgetFactory, 3*time.Second, "page 2 is selected", func() (bool, string) {
		ms, err := a.Find(ctx, Target{App: widgetFactory, Role: "page tab", States: []string{"selected"}, Name: "page 2"})
		for _, m := range ms {
			if m.ElementID == tab.ElementID {
				return true, ""
			}
		}
		return false, fmt.Sprint(ms, err)
	})
	// Back to page 1: the tab list's own Selection, by index.
	lists, err := a.Find(ctx, Target{App: widgetFactory, Role: "page tab list", States: []string{"showing"}})
	if err != nil {
		t.Fatal(err)
	}
	var list string
	for _, l := range lists {
		if els, _ := a.Elements(ctx, &api.QueryElementsParams{SurfaceID: sid, FocusID: l.ElementID}); els != nil {
			for _, c := range els.Root.Children {
				if c.ID == tab.ElementID {
					list = l.ElementID
				}
			}
		}
	}
	if list == "" {
		t.Fatalf("no tab list holds %s", tab.ElementID)
	}
	if _, err := act(ctx, a, sid, list, ActionSelect, map[string]int{"index": 0}); err != nil {
		t.Fatal(err)
	}
	eventually(t, a, widgetFactory, 3*time.Second, "page 2 is no longer selected", func() (bool, string) {
		ms, err := a.Find(ctx, Target{App: widgetFactory, Role: "page tab", States: []string{"!selected"}, Name: "page 2"})
		for _, m := range ms {
			if m.ElementID == tab.ElementID {
				return true, ""
			}
		}
		return false, fmt.Sprint(ms, err)
	})
}

func TestDesktopSurfaces(t *testing.T) {
	testkit.CheckGoroutines(t)
	var mu sync.Mutex
	var focus []string
	a := desktop(t, Config{OnEvent: func(typ, app, surface string, data map[string]any) {
		if typ == api.EventSurfaceFocusChanged {
			mu.Lock()
			focus = append(focus, surface)
			mu.Unlock()
		}
	}})
	ctx := context.Background()
	sc, err := a.Context(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calc := mainSurface(t, a, calculator)
	wf := mainSurface(t, a, widgetFactory)
	if !hasState(sc.ActiveSurfaces, calc) || !hasState(sc.ActiveSurfaces, wf) {
		t.Errorf("active surfaces %v lack %s and %s", sc.ActiveSurfaces, calc, wf)
	}
	s, err := a.Surface(ctx, calc)
	if err != nil {
		t.Fatal(err)
	}
	if s.AppID != calculator || s.Title != "Calculator" || s.Geometry == nil || s.Geometry.W <= 0 || s.Tier != 2 {
		t.Errorf("surface %+v", s)
	}
	for _, id := range []string{"atspi.gnome-calculator/99", "x11:42", "atspi.no-such-app/1"} {
		_, err := a.Surface(ctx, id)
		wantCode(t, err, api.CodeSurfaceNotFound)
	}
	res, err := a.Elements(ctx, &api.QueryElementsParams{SurfaceID: calc})
	if err != nil {
		t.Fatal(err)
	}
	buttons := 0
	var walk func(e *api.Element)
	walk = func(e *api.Element) {
		if e.Role == "push button" && len(e.Actions) > 0 && e.Actions[0] == ActionActivate {
			buttons++
		}
		for i := range e.Children {
			walk(&e.Children[i])
		}
	}
	walk(&res.Root)
	if buttons < 20 {
		t.Errorf("the calculator shows %d activatable buttons", buttons)
	}
	// Detection.
	if r, err := a.DetectApp(ctx, calculator); err != nil || !r.Detected || r.Tier != 2 || r.Via != ID {
		t.Errorf("DetectApp(%s) = %+v, %v", calculator, r, err)
	}
	if r, err := a.DetectApp(ctx, "atspi.no-such-app"); err != nil || r.Detected {
		t.Errorf("DetectApp(no such app) = %+v, %v", r, err)
	}
	for capID, want := range map[string]bool{
		calculator + ".activate":          true,
		calculator + ".activate.equals":   true,
		calculator + ".compose":           false,
		"atspi.no-such-app.activate":      false,
		"org.example.mail.compose":        false,
		widgetFactory + ".set_value.spin": true,
	} {
		app, ok, err := a.Detect(ctx, capID, "")
		if err != nil || ok != want || ok && !strings.HasPrefix(capID, app+".") {
			t.Errorf("Detect(%s) = %q, %v, %v; want %v", capID, app, ok, err, want)
		}
	}
	if _, ok, _ := a.Detect(ctx, calculator+".activate", widgetFactory); ok {
		t.Error("Detect claimed a capability for another target app")
	}
	// An alias lets an app registered under its own id use its tree.
	b := desktop(t, Config{Aliases: map[string]string{"org.gnome.Calculator": calculator}})
	if r, err := b.DetectApp(ctx, "org.gnome.Calculator"); err != nil || !r.Detected || r.AppID != "org.gnome.Calculator" {
		t.Errorf("DetectApp through an alias = %+v, %v", r, err)
	}
	raw, _ := json.Marshal(map[string]any{"role": "push button", "name": "Undo"})
	ex := &core.Execution{Capability: api.Capability{ID: "org.gnome.Calculator.undo", AppID: "org.gnome.Calculator", Name: "undo", Tier: 2}, Params: raw}
	if el, err := b.ResolveElement(ctx, ex); err != nil || el.BusName == "" {
		t.Errorf("ResolveElement through an alias = %v, %v", el, err)
	}
	if _, err := a.ResolveElement(ctx, ex); err == nil {
		t.Error("ResolveElement without the alias found an element of another app")
	}
	st := a.Stats()
	if !st.Connected || len(st.Apps) < 2 {
		t.Errorf("stats %+v", st)
	}
	if err := a.Healthy(ctx); err != nil {
		t.Error(err)
	}
}

func TestDesktopErrors(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{MaxTextBytes: 1024})
	ctx := context.Background()
	_, err := a.ElementTree(ctx, "atspi.no-such-app")
	wantCode(t, err, api.CodeNoATSPI2Support)

	sid := mainSurface(t, a, widgetFactory)
	els, err := a.ElementTree(ctx, widgetFactory)
	if err != nil {
		t.Fatal(err)
	}
	bus := els[0].BusName
	missing := ElementID(bus, "/org/a11y/atspi/accessible/987654")
	_, err = act(ctx, a, sid, missing, ActionActivate, nil)
	if _, data := wantCode(t, err, api.CodeElementNotFound); data["element_id"] != missing {
		t.Errorf("data %v lacks element_id", data)
	}
	_, err = act(ctx, a, sid, "garbage", ActionActivate, nil)
	wantCode(t, err, api.CodeElementNotFound)

	button, err := a.Resolve(ctx, Target{App: widgetFactory, Role: "push button", Name: "Sans Regular"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = act(ctx, a, sid, button.ElementID, ActionSetValue, "text")
	_, d := wantCode(t, err, api.CodeActionNotSupported)
	if d["element_id"] != button.ElementID || d["action"] != ActionSetValue || d["supported"] == nil {
		t.Errorf("ACTION_NOT_SUPPORTED data %v", d)
	}
	_, err = act(ctx, a, sid, button.ElementID, "explode", nil)
	wantCode(t, err, api.CodeActionNotSupported)
	_, err = act(ctx, a, sid, button.ElementID, ActionSetValue, nil)
	wantCode(t, err, api.CodeInvalidParams)
	// GTK3 widgets do not implement Component.ScrollTo: the toolkit says
	// no, nothing was done, and the answer says so.
	if _, err := act(ctx, a, sid, button.ElementID, ActionScroll, "top_edge"); err != nil {
		if _, data := wantCode(t, err, api.CodeActionNotSupported); data["reason"] == nil {
			t.Errorf("scroll refused without a reason: %v", data)
		}
	}
	_, err = act(ctx, a, sid, button.ElementID, ActionScroll, "sideways")
	wantCode(t, err, api.CodeInvalidParams)

	// Long text: TEXT_TOO_LARGE past MaxTextBytes, readable in pages.
	ms, err := a.Find(ctx, Target{App: widgetFactory, Role: "text", States: []string{"editable", "sensitive", "multi-line", "showing"}})
	if err != nil || len(ms) == 0 {
		t.Fatalf("no multi-line text view: %v", err)
	}
	view := ms[0].ElementID
	long := strings.Repeat("0123456789", 300)
	_, err = act(ctx, a, sid, view, ActionSetValue, long)
	wantCode(t, err, api.CodeTextTooLarge) // writes are bounded too
	writer := desktop(t, Config{})
	if _, err := act(ctx, writer, sid, view, ActionSetValue, long); err != nil {
		t.Fatal(err)
	}
	_, err = act(ctx, a, sid, view, ActionReadText, nil)
	if _, data := wantCode(t, err, api.CodeTextTooLarge); data["characters"] != 3000.0 {
		t.Errorf("TEXT_TOO_LARGE data %v", data)
	}
	page, err := act(ctx, a, sid, view, ActionReadText, map[string]int{"offset": 995, "length": 10})
	if err != nil || page["text"] != "5678901234" || page["characters"] != 3000.0 {
		t.Errorf("a page: %v, %v", page, err)
	}
	if _, err := act(ctx, a, sid, view, ActionSetValue, ""); err != nil {
		t.Fatal(err)
	}

	// No bus at all.
	b := New(Config{BusAddress: "unix:path=/nonexistent/pcp-test-bus"})
	defer b.Close()
	_, err = b.ElementTree(ctx, widgetFactory)
	wantCode(t, err, api.CodeNoATSPI2Support)
	if err := b.Healthy(ctx); err == nil {
		t.Error("Healthy without a bus")
	}
	if st := b.Stats(); st.Connected || st.Error == "" {
		t.Errorf("stats without a bus %+v", st)
	}
}

// TestDesktopWarmCacheIsEventDriven checks the warm tree costs no D-Bus
// call while nothing changes, and follows a change through events.
func TestDesktopWarmCacheIsEventDriven(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{})
	ctx := context.Background()
	if _, err := a.ElementTree(ctx, widgetFactory); err != nil {
		t.Fatal(err)
	}
	// The load's own events (a toolkit that creates accessibles as they
	// are first read reports them) make the next reads fetch again: read
	// until one read costs no call.
	eventually(t, a, widgetFactory, 3*time.Second, "a read costs no D-Bus call", func() (bool, string) {
		before := a.Stats().Calls
		_, err := a.ElementTree(ctx, widgetFactory)
		calls := a.Stats().Calls - before
		return err == nil && calls == 0, fmt.Sprintf("%d calls, %v", calls, err)
	})
	before := a.Stats().Calls
	for i := 0; i < 20; i++ {
		if _, err := a.ElementTree(ctx, widgetFactory); err != nil {
			t.Fatal(err)
		}
	}
	if calls := a.Stats().Calls - before; calls > 4 {
		t.Errorf("20 warm reads made %d D-Bus calls", calls)
	}
}

// TestDesktopWindowLifecycle opens the About dialog (through a button of
// a closed popover menu, not SHOWING yet activatable) and closes it: the
// events report the surface created and destroyed, and the warm cache
// follows.
func TestDesktopWindowLifecycle(t *testing.T) {
	testkit.CheckGoroutines(t)
	events := newRecorder(func(typ, app, surface string, data map[string]any) string {
		if strings.HasPrefix(typ, "surface.") {
			return typ + " " + surface
		}
		return ""
	})
	a := desktop(t, Config{OnEvent: events.onEvent})
	ctx := context.Background()
	before, err := a.ElementTree(ctx, widgetFactory)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dispatch(ctx, a, widgetFactory+".activate.about", map[string]any{"role": "push button", "name": "About Widget Factory"}); err != nil {
		t.Fatal(err)
	}
	var dialog string
	eventually(t, a, widgetFactory, 5*time.Second, "a second surface", func() (bool, string) {
		ids, err := a.surfacesOf(ctx, widgetFactory)
		if len(ids) >= 2 {
			dialog = ids[len(ids)-1]
		}
		return len(ids) >= 2, fmt.Sprint(ids, err)
	})
	events.waitFor(t, 3*time.Second, api.EventSurfaceCreated+" "+dialog)
	after, err := a.ElementTree(ctx, widgetFactory)
	if err != nil || len(after) <= len(before) {
		t.Errorf("the tree has %d nodes with the dialog open, %d before (%v)", len(after), len(before), err)
	}
	s, err := a.Surface(ctx, dialog)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dialog: %+v", s)
	res, err := a.Elements(ctx, &api.QueryElementsParams{SurfaceID: dialog})
	if err != nil {
		t.Fatal(err)
	}
	// Close it with its own close button.
	var closeID string
	var walk func(e *api.Element)
	walk = func(e *api.Element) {
		if e.Role == "push button" && e.Label == "Close" && slices.Contains(e.Actions, ActionActivate) {
			closeID = e.ID
		}
		for i := range e.Children {
			walk(&e.Children[i])
		}
	}
	walk(&res.Root)
	if closeID == "" {
		t.Fatalf("no Close button in the dialog %s", dialog)
	}
	if _, err := act(ctx, a, dialog, closeID, ActionActivate, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, a, widgetFactory, 5*time.Second, "the dialog's surface is gone", func() (bool, string) {
		ids, err := a.surfacesOf(ctx, widgetFactory)
		return err == nil && !slices.Contains(ids, dialog), fmt.Sprint(ids, err)
	})
	events.waitFor(t, 3*time.Second, api.EventSurfaceDestroyed+" "+dialog)
	_, err = a.Surface(ctx, dialog)
	wantCode(t, err, api.CodeSurfaceNotFound)
}
