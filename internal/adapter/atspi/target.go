package atspi

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
)

// Target describes an element by what a person sees rather than by id.
// Every field given must match; empty fields match anything.
type Target struct {
	// Role is an AT-SPI2 role name ("push button", "check box"; "_" and
	// "-" may stand for spaces) or an alias ("button", "checkbox",
	// "textbox", "tab", "menuitem", ...).
	Role string `json:"role,omitempty"`
	// Name matches the accessible name (what a label or button says).
	Name string `json:"name,omitempty"`
	// Text matches the text content of a text field or document.
	Text string `json:"text,omitempty"`
	// States must all be set; "!state" must be clear ("!checked").
	States []string `json:"states,omitempty"`
	// Ancestor, when set, must match some ancestor of the element.
	Ancestor *Target `json:"ancestor,omitempty"`
	// App restricts the search to one application (a PCP app id).
	App string `json:"app,omitempty"`
}

// Match is an element a Target resolved to.
type Match struct {
	ElementID string `json:"element_id"`
	AppID     string `json:"app_id"`
	SurfaceID string `json:"surface_id,omitempty"`
	BusName   string `json:"bus_name"`
	Path      string `json:"accessible_path"`
	Role      string `json:"role"`
	Name      string `json:"name"`
	// Score is the strength of the string matches: 3 per exact match, 2
	// per match ignoring case, spacing and GTK4's doubled labels, 1 per
	// substring match.
	Score int `json:"score"`
	// Visible: 2 on screen (SHOWING, and VISIBLE up to the window), 1
	// VISIBLE up to the window, 0 hidden.
	Visible int `json:"visible"`
}

// Strengths of a string match.
const (
	matchNone   = 0
	matchSubstr = 1
	matchFolded = 2
	matchExact  = 3
)

// maxAncestorDepth bounds the nesting of Target.Ancestor.
const maxAncestorDepth = 8

// validate checks a target before it is used.
func (t *Target) validate(field string, depth int) error {
	if depth > maxAncestorDepth {
		return api.InvalidParam(field, "ancestors nest deeper than %d", maxAncestorDepth)
	}
	for i, s := range t.States {
		name := strings.TrimPrefix(strings.TrimSpace(s), "!")
		if stateBit(name) <= 0 {
			return api.InvalidParam(fmt.Sprintf("%s.states[%d]", field, i), "unknown state %q", s)
		}
	}
	if t.Role != "" && !knownRole(t.Role) {
		return api.InvalidParam(field+".role", "unknown role %q", t.Role)
	}
	if t.Ancestor != nil {
		return t.Ancestor.validate(field+".ancestor", depth+1)
	}
	return nil
}

// empty reports whether the target names nothing to match.
func (t *Target) empty() bool {
	return t.Role == "" && t.Name == "" && t.Text == "" && len(t.States) == 0 && t.Ancestor == nil
}

func (t *Target) wantsText() bool {
	for ; t != nil; t = t.Ancestor {
		if t.Text != "" {
			return true
		}
	}
	return false
}

func knownRole(r string) bool {
	w := normRole(r)
	for _, n := range roleNames {
		if n == w {
			return true
		}
	}
	_, ok := roleAliases[strings.ReplaceAll(w, " ", "")]
	return ok
}

// fold lowers case and collapses white space.
func fold(s string) string { return strings.Join(strings.Fields(strings.ToLower(s)), " ") }

// undouble undoes GTK 4.8's habit of naming a button after both its own
// label and its child label's: "2 2" is "2", "mod mod" is "mod".
func undouble(folded string) string {
	f := strings.Fields(folded)
	if n := len(f); n >= 2 && n%2 == 0 && strings.Join(f[:n/2], " ") == strings.Join(f[n/2:], " ") {
		return strings.Join(f[:n/2], " ")
	}
	return folded
}

// strMatch rates how well have matches want.
func strMatch(have, want string) int {
	if have == want {
		return matchExact
	}
	fh, fw := fold(have), fold(want)
	if fw == "" {
		return matchNone
	}
	if fh == fw || undouble(fh) == fw {
		return matchFolded
	}
	if strings.Contains(fh, fw) {
		return matchSubstr
	}
	return matchNone
}

// tree is the read-only view of one application's nodes matching works on.
type tree struct {
	bus   string
	appID string
	nodes map[dbus.ObjectPath]*node
	// surface maps a node to its surface id (may be nil).
	surface func(dbus.ObjectPath) string
	maxUp   int
}

// matchNode rates node n against t; ok is false when it does not match.
func (tr *tree) matchNode(n *node, t *Target) (score int, ok bool) {
	if t.Role != "" && !roleMatches(n.role, t.Role) {
		return 0, false
	}
	for _, s := range t.States {
		s = strings.TrimSpace(s)
		neg := strings.HasPrefix(s, "!")
		bit := stateBit(strings.TrimPrefix(s, "!"))
		if bit <= 0 || n.states.has(bit) == neg {
			return 0, false
		}
	}
	if t.Name != "" {
		m := strMatch(n.name, t.Name)
		if m == matchNone {
			return 0, false
		}
		score += m
	}
	if t.Text != "" {
		m := strMatch(n.text, t.Text)
		if m == matchNone {
			return 0, false
		}
		score += m
	}
	if t.Ancestor != nil {
		found := false
		p := n.parent
		for i := 0; i < tr.maxUp && p != ""; i++ {
			an := tr.nodes[p]
			if an == nil {
				break
			}
			if _, ok := tr.matchNode(an, t.Ancestor); ok {
				found = true
				break
			}
			p = an.parent
		}
		if !found {
			return 0, false
		}
	}
	return score, true
}

// visibility rates how visible n is: 2 showing, 1 visible up to its
// window, 0 hidden. GTK 4.8 sets SHOWING on windows only, so its widgets
// rate 1 at best.
func (tr *tree) visibility(n *node) int {
	p := n
	for i := 0; i < tr.maxUp && p != nil && p.parent != ""; i++ {
		if !p.states.has(stVisible) && !p.states.has(stShowing) {
			return 0
		}
		p = tr.nodes[p.parent]
	}
	if n.states.has(stShowing) {
		return 2
	}
	return 1
}

// find returns every node matching t.
func (tr *tree) find(t *Target) []Match {
	var out []Match
	for p, n := range tr.nodes {
		score, ok := tr.matchNode(n, t)
		if !ok {
			continue
		}
		m := Match{ElementID: ElementID(tr.bus, p), AppID: tr.appID, BusName: tr.bus, Path: string(p),
			Role: RoleName(n.role), Name: n.name, Score: score, Visible: tr.visibility(n)}
		if tr.surface != nil {
			m.SurfaceID = tr.surface(p)
		}
		out = append(out, m)
	}
	return out
}

// best keeps the matches of the highest score and, among those, of the
// highest visibility, in a stable order. One left is the answer; more are
// ambiguous.
func best(ms []Match) []Match {
	if len(ms) == 0 {
		return nil
	}
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].Score != ms[j].Score {
			return ms[i].Score > ms[j].Score
		}
		if ms[i].Visible != ms[j].Visible {
			return ms[i].Visible > ms[j].Visible
		}
		return ms[i].ElementID < ms[j].ElementID
	})
	n := 1
	for n < len(ms) && ms[n].Score == ms[0].Score && ms[n].Visible == ms[0].Visible {
		n++
	}
	return ms[:n]
}

// maxCandidates bounds the candidates TARGET_AMBIGUOUS lists.
const maxCandidates = 10

// ambiguous is the TARGET_AMBIGUOUS error for top, all matches of similar
// confidence.
func ambiguous(t *Target, top []Match) error {
	cands := make([]map[string]any, 0, min(len(top), maxCandidates))
	for _, m := range top[:min(len(top), maxCandidates)] {
		cands = append(cands, map[string]any{"element_id": m.ElementID, "role": m.Role, "name": m.Name,
			"accessible_path": m.Path, "bus_name": m.BusName, "app_id": m.AppID, "surface_id": m.SurfaceID})
	}
	return api.Errorf(api.CodeTargetAmbiguous, map[string]any{"target": t, "count": len(top), "candidates": cands},
		"target %s matches %d elements equally well (%s); add a role, an exact name, states or an ancestor",
		describeTarget(t), len(top), candidateList(top))
}

func candidateList(ms []Match) string {
	var b strings.Builder
	for i, m := range ms {
		if i == 3 {
			fmt.Fprintf(&b, ", and %d more", len(ms)-3)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %q at %s", m.Role, m.Name, m.Path)
	}
	return b.String()
}

func describeTarget(t *Target) string {
	var parts []string
	if t.Role != "" {
		parts = append(parts, "role="+t.Role)
	}
	if t.Name != "" {
		parts = append(parts, fmt.Sprintf("name=%q", t.Name))
	}
	if t.Text != "" {
		parts = append(parts, fmt.Sprintf("text=%q", t.Text))
	}
	if len(t.States) > 0 {
		parts = append(parts, "states="+strings.Join(t.States, ","))
	}
	if t.Ancestor != nil {
		parts = append(parts, "ancestor={"+describeTarget(t.Ancestor)+"}")
	}
	if t.App != "" {
		parts = append(parts, "app="+t.App)
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// Find returns every element matching t, best first, without waiting.
func (a *Adapter) Find(ctx context.Context, t Target) ([]Match, error) {
	if err := t.validate("target", 0); err != nil {
		return nil, err
	}
	all, err := a.findOnce(ctx, &t)
	if err != nil {
		return nil, err
	}
	best(all) // sorts all
	return all, nil
}

func (a *Adapter) findOnce(ctx context.Context, t *Target) ([]Match, error) {
	var apps []*app
	if t.App != "" {
		ap, err := a.appByID(ctx, t.App)
		if err != nil {
			return nil, err
		}
		apps = []*app{ap}
	} else {
		var err error
		if apps, err = a.appList(ctx); err != nil {
			return nil, err
		}
	}
	need := needs(0)
	if t.wantsText() {
		need = needText
	}
	var all []Match
	for _, ap := range apps {
		if err := ap.ensure(ctx, "", need); err != nil {
			if t.App != "" {
				return nil, err
			}
			continue
		}
		ap.mu.Lock()
		tr := &tree{bus: ap.bus, appID: ap.id, nodes: ap.nodes, surface: ap.surfaceIDLocked, maxUp: a.cfg.MaxDepth + 2}
		all = append(all, tr.find(t)...)
		ap.mu.Unlock()
	}
	return all, nil
}

// Resolve finds the one element t describes, waiting up to timeout for it
// to appear (never for an ambiguity to clear: more than one match of the
// best confidence is TARGET_AMBIGUOUS at once). Exact matches beat
// folded ones, folded ones beat substrings, and among equals a visible
// element beats a hidden one. Not found by the deadline is
// ELEMENT_NOT_FOUND.
func (a *Adapter) Resolve(ctx context.Context, t Target, timeout time.Duration) (Match, error) {
	if err := t.validate("target", 0); err != nil {
		return Match{}, err
	}
	if t.empty() {
		return Match{}, api.InvalidParam("target", "names nothing: give a role, name, text, states or an ancestor")
	}
	start := time.Now()
	deadline := start.Add(timeout)
	reloaded := false
	for attempt := 0; ; attempt++ {
		all, err := a.findOnce(ctx, &t)
		if err != nil {
			return Match{}, err
		}
		top := best(all)
		switch {
		case len(top) == 1:
			return top[0], nil
		case len(top) > 1:
			return Match{}, ambiguous(&t, top)
		}
		now := time.Now()
		if !now.Before(deadline) {
			return Match{}, api.Errorf(api.CodeElementNotFound, map[string]any{"target": t, "waited_ms": now.Sub(start).Milliseconds()},
				"no element matches %s (waited %s)", describeTarget(&t), now.Sub(start).Round(time.Millisecond))
		}
		// Events keep the caches current; a reload after a second of
		// waiting guards against a toolkit that failed to send one.
		if !reloaded && now.Sub(start) > time.Second {
			reloaded = true
			a.invalidateApps(t.App)
		}
		if err := a.waitChange(ctx, t.App, min(deadline.Sub(now), pollInterval(attempt))); err != nil {
			return Match{}, err
		}
	}
}

// pollInterval is the wait between checks: short first, since effects
// usually appear within a few hundred milliseconds.
func pollInterval(attempt int) time.Duration {
	d := 25 * time.Millisecond << min(attempt, 3)
	return min(d, 200*time.Millisecond)
}

// waitChange waits until the application appID (any, if empty) changes,
// or d passes, or ctx ends.
func (a *Adapter) waitChange(ctx context.Context, appID string, d time.Duration) error {
	ch := a.changes(appID)
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	case <-ch:
	}
	// Changes come in bursts (a keystroke is several events): look again
	// no sooner than minPoll after the last look.
	if rest := minPoll - time.Since(start); rest > 0 && rest < d {
		t.Reset(rest)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// changes returns a channel closed at the next change to the cache of
// the application appID, or nil if the adapter does not know it (or
// appID is empty).
func (a *Adapter) changes(appID string) <-chan struct{} {
	if appID == "" {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ap := a.byID[appID]
	if ap == nil {
		return nil
	}
	ap.mu.Lock()
	defer ap.mu.Unlock()
	return ap.changed
}

// minPoll is the shortest wait between two looks at an application.
const minPoll = 10 * time.Millisecond

func (a *Adapter) invalidateApps(appID string) {
	a.mu.Lock()
	var apps []*app
	for _, ap := range a.byID {
		if appID == "" || ap.id == appID {
			apps = append(apps, ap)
		}
	}
	a.mu.Unlock()
	for _, ap := range apps {
		ap.invalidate()
	}
}
