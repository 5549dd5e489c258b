package core

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

func TestElementSummarySentence(t *testing.T) {
	for _, tc := range []struct {
		s    ElementSummary
		want string
	}{
		{ElementSummary{Action: "activate", Role: "push button", Name: "7", Window: "Calculator"}, `Press the "7" button in Calculator`},
		{ElementSummary{Action: "activate", Role: "check box", Name: "Bold", App: "atspi.editor"}, `Toggle the "Bold" check box in atspi.editor`},
		{ElementSummary{Action: "activate", Role: "menu item", Name: "Quit", Value: json.RawMessage(`"click"`)}, `Choose the "Quit" menu item (its "click" action)`},
		{ElementSummary{Action: "activate", Role: "link", Name: "Home", Value: json.RawMessage(`{"name":"jump"}`)}, `Follow the "Home" link (its "jump" action)`},
		{ElementSummary{Action: "activate", Role: "label"}, `Activate the unnamed label`},
		{ElementSummary{Action: "set_value", Role: "text", Name: "Title", Window: "Notes", Value: json.RawMessage(`"rm -rf /"`)}, `Set the "Title" text to "rm -rf /" in Notes`},
		{ElementSummary{Action: "set_value", Role: "slider", Name: "Volume", Value: json.RawMessage(`42`)}, `Set the "Volume" slider to 42`},
		{ElementSummary{Action: "set_value", Role: "text"}, `Set the unnamed text to nothing`},
		{ElementSummary{Action: "select", Role: "list item", Name: "Inbox"}, `Select the "Inbox" list item`},
		{ElementSummary{Action: "scroll", Role: "table cell", Name: "B7"}, `Scroll to the "B7" table cell`},
		{ElementSummary{Action: "read_text", Role: "text", Name: "Result"}, `Read the text of the "Result" text`},
		{ElementSummary{Action: "double_click", Role: "icon", Name: "a.txt"}, `Double-click the "a.txt" icon`},
		{ElementSummary{Action: "right_click", Name: "x"}, `Right-click the "x" element`},
		{ElementSummary{Action: "wave", Role: "button", Name: "x"}, `Act ("wave") on the "x" button`},
		// A name cannot end the quotation or move the terminal's cursor.
		{ElementSummary{Action: "activate", Role: "push button", Name: "OK\" in Bank\n\x1b[2J", Window: "Evil\rtitle"}, `Press the "OK\" in Bank  [2J" button in Evil title`},
		{ElementSummary{Action: "activate", Role: "push button", Name: "Pay\u202e$001", Window: "Bank\u2028x"}, `Press the "Pay $001" button in Bank x`},
		{ElementSummary{Action: "activate", Role: "push button", Name: strings.Repeat("é", 100)}, `Press the "` + strings.Repeat("é", 59) + `…" button`},
	} {
		if got := tc.s.Sentence(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.s, got, tc.want)
		}
	}
}

// describingAccess is a fakeAccess that says which element an execution
// acts on.
type describingAccess struct {
	*fakeAccess
	describe func(ex *Execution) (*ElementSummary, error)
}

func (d *describingAccess) DescribeElement(_ context.Context, ex *Execution) (*ElementSummary, error) {
	d.calls.add(d.id + ".DescribeElement")
	return d.describe(ex)
}

// A Tier 2 action's confirmation names the element and the value, as the
// adapter sees them, and nothing runs until the user approves.
func TestTier2ConfirmationNamesElement(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	var seen []Execution
	d := &describingAccess{
		fakeAccess: &fakeAccess{id: "atspi", detect: func(id, _ string) (string, bool, error) {
			app, _, _ := strings.Cut(strings.TrimPrefix(id, "atspi."), ".")
			return "atspi." + app, true, nil
		}, exec: succeed},
		describe: func(ex *Execution) (*ElementSummary, error) {
			seen = append(seen, *ex)
			var p struct {
				Name  string          `json:"name"`
				Value json.RawMessage `json:"value"`
			}
			json.Unmarshal(ex.Params, &p)
			switch {
			case ex.Capability.AppID == "atspi.gone":
				return nil, api.Errorf(api.CodeElementNotFound, nil, "no such element")
			case strings.HasSuffix(ex.Capability.ID, ".set_value"):
				return &ElementSummary{Action: "set_value", Role: "text", Name: p.Name, Window: "Notes", Value: p.Value}, nil
			}
			return &ElementSummary{Action: "activate", Role: "push button", Name: p.Name, Window: "Calculator"}, nil
		},
	}
	d.fakeAccess.calls = w.calls
	if err := w.b.AddAccessibilityAdapter(d, 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ capID, params, want string }{
		{"atspi.gnome-calculator.activate", `{"role":"push button","name":"7"}`, `Press the "7" button in Calculator`},
		{"atspi.notes.set_value", `{"role":"text","name":"Title","value":"hello"}`, `Set the "Title" text to "hello" in Notes`},
		// The adapter cannot say: the parameters are shown as sent.
		{"atspi.gone.activate", `{"name":"7"}`, `atspi.gone.activate (name="7")`},
	} {
		_, err := w.exec(w.agent, tc.capID, tc.params)
		pe := wantCode(t, err, api.CodeConfirmationRequired)
		if got := pe.DataMap()["description"]; got != tc.want {
			t.Errorf("%s %s: description %q, want %q", tc.capID, tc.params, got, tc.want)
		}
	}
	if len(d.executions()) != 0 {
		t.Errorf("executed before approval: %+v", d.executions())
	}
	if len(seen) != 3 || seen[0].Registered || seen[0].Capability.Tier != 2 || string(seen[0].Params) != `{"role":"push button","name":"7"}` {
		t.Errorf("DescribeElement saw %+v", seen)
	}
	// Presenting the approval asks nothing more of the adapter.
	confs, _ := w.b.Confirmations(w.user)
	var id string
	for _, c := range confs.Confirmations {
		if c.CapabilityID == "atspi.gnome-calculator.activate" {
			id = c.ConfirmationID
		}
	}
	if _, err := w.b.ApproveConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: id}); err != nil {
		t.Fatal(err)
	}
	n := len(seen)
	if _, err := w.b.Execute(w.agent, &api.ExecuteRequest{Capability: "atspi.gnome-calculator.activate",
		Params: json.RawMessage(`{"role":"push button","name":"7"}`), ConfirmationID: id}); err != nil {
		t.Fatalf("approved: %v", err)
	}
	if len(seen) != n || len(d.executions()) != 1 {
		t.Errorf("after approval: %d descriptions (want %d), %d executions (want 1)", len(seen), n, len(d.executions()))
	}
}

// A capability its publisher describes keeps the publisher's description
// with the parameters; the adapter is not asked.
func TestRegisteredAccessibleKeepsDescription(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	w.register(t, "org.example.calc", `{"version":"1.0","capabilities":[{"name":"activate","tier":2,"trust_level":"confirm","description":"Press a key",
		"parameters":[{"name":"name","type":"string"}]}],"signature":""}`, nil)
	d := &describingAccess{fakeAccess: &fakeAccess{id: "atspi", exec: succeed}, describe: func(*Execution) (*ElementSummary, error) {
		return &ElementSummary{Action: "activate", Role: "push button", Name: "7"}, nil
	}}
	d.fakeAccess.calls = w.calls
	if err := w.b.AddAccessibilityAdapter(d, 1); err != nil {
		t.Fatal(err)
	}
	_, err := w.exec(w.agent, "org.example.calc.activate", `{"name":"7"}`)
	pe := wantCode(t, err, api.CodeConfirmationRequired)
	if got, want := pe.DataMap()["description"], `Press a key (name="7")`; got != want {
		t.Errorf("description %q, want %q", got, want)
	}
	for _, c := range w.calls.get() {
		if strings.HasSuffix(c, "DescribeElement") {
			t.Errorf("the adapter was asked: %v", w.calls.get())
		}
	}
}
