package core

import (
	"context"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pcp-dev/pcp/api"
)

// What a confirmation tells the user. describe (invoke.go) builds a
// description from the capability's own description and the parameters
// the caller sent; that is all a capability served by an app can be
// described by. An action on an accessibility tree is described by what
// it acts on instead: the accessibility adapter tells the broker which
// element the parameters name (its role, its name or label, its window)
// and the broker says it as a sentence, `Press the "7" button in
// Calculator`, `Set the "Name" text to "hello" in Preferences`. The Tier 3
// fallback's click says the same of the element it clicks on.

// ElementSummary is what an accessibility adapter tells the broker of the
// element an execution would act on, for the user to read.
type ElementSummary struct {
	// Action is the structural action (activate, select, set_value,
	// scroll, read_text), or the pointer action of a Tier 3 fallback
	// (click, double_click, right_click).
	Action string
	// Role is the element's role as the adapter names it ("push button").
	Role string
	// Name is its accessible name or label; empty when it has none.
	Name string
	// Window is the title of the window the element is in; App the
	// application's name, said when there is no title.
	Window, App string
	// Value is what set_value sets, or the activate action's choice
	// (`"toggle"`); nil when there is none.
	Value json.RawMessage
}

// ElementDescriber is implemented by accessibility adapters that can say
// which element an execution would act on, before it runs: the element
// named by ex.Element, else the one ResolveElement would find. It reads
// and never acts. An error that declines (see AccessibilityAdapter) lets
// the next adapter answer; with no answer the confirmation is described
// from the parameters.
type ElementDescriber interface {
	DescribeElement(ctx context.Context, ex *Execution) (*ElementSummary, error)
}

// maxSummaryText bounds each text a sentence quotes, in runes.
const maxSummaryText = 60

// Sentence says the summary as the user reads it in a confirmation.
func (s *ElementSummary) Sentence() string {
	role := roleWord(s.Role)
	what := "the unnamed " + role
	if s.Name != "" {
		what = "the " + quote(s.Name) + " " + role
	}
	var out string
	switch s.Action {
	case "activate", "press", "toggle":
		out = activateVerb(s.Role) + " " + what
		if choice := valueText(s.Value); choice != "" && s.Action == "activate" {
			out += " (its " + choice + " action)"
		}
	case "click":
		out = "Click " + what
	case "double_click":
		out = "Double-click " + what
	case "right_click":
		out = "Right-click " + what
	case "select":
		out = "Select " + what
	case "set_value":
		out = "Set " + what + " to " + orNothing(valueText(s.Value))
	case "scroll":
		out = "Scroll to " + what
	case "read_text":
		out = "Read the text of " + what
	default:
		out = "Act (" + quote(s.Action) + ") on " + what
	}
	switch {
	case s.Window != "":
		out += " in " + cut(s.Window)
	case s.App != "":
		out += " in " + cut(s.App)
	}
	return out
}

// roleWord is how a sentence names a role.
func roleWord(role string) string {
	switch role = strings.TrimSpace(role); role {
	case "":
		return "element"
	case "push button", "button":
		return "button"
	}
	return cut(role)
}

// activateVerb is the verb of activate for an element of this role.
func activateVerb(role string) string {
	switch role {
	case "push button", "button", "toggle button", "radio button", "spin button":
		return "Press"
	case "check box", "switch", "check menu item", "toggle":
		return "Toggle"
	case "menu item", "radio menu item", "menu", "list item", "page tab", "combo box":
		return "Choose"
	case "link":
		return "Follow"
	}
	return "Activate"
}

// valueText says a JSON value: a string quoted, anything else as JSON,
// cut to maxSummaryText.
func valueText(v json.RawMessage) string {
	if len(v) == 0 || string(v) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return quote(s)
	}
	var m struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(v, &m) == nil && m.Name != "" {
		return quote(m.Name)
	}
	return cut(string(v))
}

func orNothing(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}

// quote puts a text in double quotes, cut to maxSummaryText, with its
// control characters and quotes escaped so that a name cannot end the
// quotation or draw on the user's terminal.
func quote(s string) string {
	b, _ := json.Marshal(cut(s))
	// json.Marshal escapes <, > and & for HTML; a prompt is not HTML.
	r := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&")
	return r.Replace(string(b))
}

// cut shortens s to maxSummaryText runes, marking the cut with "…", and
// shows control characters, bidi controls and line separators as spaces:
// an application's name must not reorder or break the user's prompt.
func cut(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
	if utf8.RuneCountInString(s) <= maxSummaryText {
		return s
	}
	rs := []rune(s)
	return strings.TrimSpace(string(rs[:maxSummaryText-1])) + "…"
}

// describeOverride, in a context, replaces the description of the
// confirmation capability capID would ask for: the Tier 3 fallback's,
// which names the element it clicks on. Only the core sets it.
type describeOverride struct{ capID, description string }

type describeOverrideKey struct{}

func overriddenDescription(ctx context.Context, capID string) (string, bool) {
	o, ok := ctx.Value(describeOverrideKey{}).(describeOverride)
	if !ok || o.capID != capID || o.description == "" {
		return "", false
	}
	return o.description, true
}

// describeInvocation is the description of the confirmation an invocation
// asks for: the Tier 3 fallback's when it is one; for an action on an
// accessibility tree that is not described by its publisher, the sentence
// of the element it acts on; else describe's.
func (b *Broker) describeInvocation(ctx context.Context, inv *invocation) string {
	c, p := inv.c, inv.p
	if d, ok := overriddenDescription(ctx, c.ID); ok {
		return d
	}
	if inv.t.provider == nil && strings.HasPrefix(inv.t.route, routeAccessibility) && (!inv.t.registered || c.Description == "") {
		if s := elementSummary(ctx, c, inv.t, p.Source, p.Params); s != nil {
			return s.Sentence()
		}
	}
	return describe(c, p.Params)
}

// elementSummary asks the route's adapters, in order, which element an
// execution would act on; nil when none says.
func elementSummary(ctx context.Context, c *api.Capability, t dispatchTarget, source api.InvocationSource, params json.RawMessage) *ElementSummary {
	el, err := elementFromParams(params)
	if err != nil {
		return nil
	}
	for _, ae := range t.access {
		d, ok := ae.a.(ElementDescriber)
		if !ok {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, AdapterTimeout)
		s, err := d.DescribeElement(actx, &Execution{Capability: *c, Registered: t.registered, Source: source, Params: params, Element: el})
		cancel()
		switch {
		case err == nil && s != nil:
			return s
		case err != nil && declines(err):
			continue
		}
		return nil
	}
	return nil
}
