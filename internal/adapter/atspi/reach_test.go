package atspi

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// The adapter says which element an execution would act on, as the real
// applications show it, without acting: the calculator's "7" button in
// its window, and gtk3-widget-factory's entry with the text to set.
func TestDesktopDescribeElement(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{})
	ctx := context.Background()
	describe := func(capID, appID string, params any) *core.ElementSummary {
		t.Helper()
		raw, _ := json.Marshal(params)
		s, err := a.DescribeElement(ctx, &core.Execution{Capability: detectedCap(capID, appID), Source: api.SourceSystemIntelligence, Params: raw})
		if err != nil {
			t.Fatalf("DescribeElement(%s, %s): %v", capID, raw, err)
		}
		return s
	}
	s := describe(calculator+".activate", calculator, map[string]any{"role": "push button", "name": "7"})
	if s.Action != ActionActivate || s.Role != "push button" || s.Name != "7" || s.Window == "" || s.App != "gnome-calculator" {
		t.Errorf("the calculator's 7: %+v", s)
	}
	if got, want := s.Sentence(), `Press the "7" button in `+s.Window; got != want {
		t.Errorf("sentence %q, want %q", got, want)
	}
	ms, err := a.Find(ctx, Target{App: widgetFactory, Role: "text", States: []string{"editable", "sensitive", "single-line", "showing"}})
	if err != nil || len(ms) == 0 {
		t.Fatalf("Find: %v, %v", ms, err)
	}
	m := ms[0]
	s = describe(widgetFactory+".set_value", widgetFactory, map[string]any{"element_id": m.ElementID, "value": "hello"})
	// Its window is one of the app's surfaces; a window with no name
	// (gtk3-widget-factory's) is titled after the app, and so is the
	// sentence.
	var titles []string
	sids, _ := a.surfacesOf(ctx, widgetFactory)
	for _, sid := range sids {
		if sf, err := a.Surface(ctx, sid); err == nil {
			titles = append(titles, sf.Title)
		}
	}
	where := s.Window
	if where == "" {
		where = s.App
	}
	if s.Action != ActionSetValue || s.Role != "text" || string(s.Value) != `"hello"` || !slices.Contains(titles, where) || s.App != "gtk3-widget-factory" {
		t.Errorf("the entry: %+v; window titles %q", s, titles)
	}
	if got, want := s.Sentence(), `Set the unnamed text to "hello" in `+where; got != want {
		t.Errorf("sentence %q, want %q", got, want)
	}
	// Describing acted on nothing: the entry's text is what it was.
	if txt, err := a.ReadText(ctx, m.ElementID); err != nil || txt == "hello" {
		t.Errorf("after DescribeElement the entry reads %q, %v", txt, err)
	}
	// An element that is not there declines, so the broker falls back on
	// the parameters.
	raw, _ := json.Marshal(map[string]any{"element_id": m.BusName + "|/org/a11y/atspi/accessible/99999999"})
	_, err = a.DescribeElement(ctx, &core.Execution{Capability: detectedCap(widgetFactory+".activate", widgetFactory), Params: raw})
	if !errorsIsDecline(err) {
		t.Errorf("a gone element: %v, want a decline", err)
	}
}

// The applications on the bus are listed with the generic capabilities,
// each of a capability id Detect claims.
func TestDesktopReachableApps(t *testing.T) {
	testkit.CheckGoroutines(t)
	a := desktop(t, Config{})
	ctx := context.Background()
	apps, err := a.ReachableApps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range apps {
		ids = append(ids, r.AppID)
		if r.AppID != calculator {
			continue
		}
		var names []string
		for _, c := range r.Capabilities {
			names = append(names, c.Name)
			if owner, ok, err := a.Detect(ctx, api.CapabilityID(r.AppID, c.Name), ""); err != nil || !ok || owner != calculator {
				t.Errorf("Detect(%s.%s) = %q, %v, %v", r.AppID, c.Name, owner, ok, err)
			}
			if c.Tier != 2 || c.TrustLevel != api.TrustConfirm || c.Description == "" || len(c.Parameters) == 0 {
				t.Errorf("capability %+v", c)
			}
		}
		want := slices.Clone(Actions)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("capabilities %v, want %v", names, want)
		}
	}
	if !slices.Contains(ids, calculator) || !slices.Contains(ids, widgetFactory) {
		t.Errorf("reachable apps %v lack the test applications", ids)
	}
}

func detectedCap(id, appID string) api.Capability {
	return api.Capability{ID: id, AppID: appID, Name: id[len(appID)+1:], Tier: 2, TrustLevel: api.TrustConfirm}
}

func errorsIsDecline(err error) bool {
	switch api.AsError(err).Code {
	case api.CodeElementNotFound, api.CodeAppNotFound, api.CodeNoATSPI2Support, api.CodeActionNotSupported, api.CodeSurfaceNotFound:
		return err != nil
	}
	return false
}

func TestSpokenName(t *testing.T) {
	for in, want := range map[string]string{"7 7": "7", "mod mod": "mod", "÷ ÷": "÷", "7": "7", "Save As": "Save As", "a b a": "a b a", "": "", "ab ab": "ab", "x  x": "x  x"} {
		if got := spokenName(in); got != want {
			t.Errorf("spokenName(%q) = %q, want %q", in, got, want)
		}
	}
}
