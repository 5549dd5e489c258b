package atspi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
)

// The structural actions, and when an element is actionable for them.
//
// Toolkits differ in what they report, so actionable is defined by what
// each exposes (measured on GTK 3.24 and GTK 4.8):
//
//   - SENSITIVE, not ENABLED, says a widget takes input: GTK 4.8 never sets
//     ENABLED, GTK3 sets both.
//   - SHOWING is not required: GTK 4.8 sets it on windows only, and the
//     items of a closed menu are not SHOWING yet can be activated.
//   - A toolkit's own answer is not trusted: DoAction returns true on a
//     disabled widget (doing nothing), and a disabled entry may accept
//     SetTextContents. The adapter checks the states itself, live (not
//     from the cache), before it acts.
//
//	action     interface needed                     states needed
//	activate   Action, with at least one action     SENSITIVE
//	select     Selection on the parent (or on the   SENSITIVE
//	           element, choosing a child by value)
//	set_value  EditableText (a string value) or     SENSITIVE; EDITABLE for text
//	           Value (a number value)
//	scroll     Component                            none
//	read_text  Text                                 none
//
// A missing interface is ACTION_NOT_SUPPORTED at once. A state not met is
// waited for, up to the action's timeout, by checking again whenever the
// application reports a change (and at short intervals); then it is
// EXECUTION_TIMEOUT naming the states that were not met.

// supportedActions lists the structural actions a node supports,
// judged from the cache.
func supportedActions(n *node, parent *node, underScroll bool) []string {
	var out []string
	if n.ifaces.has(ifAction) && (!n.nActionsOK || n.nActions > 0) {
		out = append(out, ActionActivate)
	}
	if n.ifaces.has(ifSelection) || parent != nil && parent.ifaces.has(ifSelection) {
		out = append(out, ActionSelect)
	}
	if n.ifaces.has(ifEditableText) || n.ifaces.has(ifValue) && isSettableRange(n.role) {
		out = append(out, ActionSetValue)
	}
	if n.ifaces.has(ifComponent) && underScroll {
		out = append(out, ActionScroll)
	}
	if n.ifaces.has(ifText) {
		out = append(out, ActionReadText)
	}
	return out
}

// liveNode is what an action learns of its element from the application.
type liveNode struct {
	node
	parentIfaces ifaceSet
}

// actionable checks the conditions of action on a live node: missing
// interfaces (unsupported, final) and states not met (may change).
func actionable(action string, n *liveNode, value json.RawMessage) (unsupported string, unmet []string) {
	st := n.states
	if st.has(stDefunct) {
		return "", []string{"DEFUNCT"}
	}
	sensitive := func() {
		if !st.has(stSensitive) {
			unmet = append(unmet, "not SENSITIVE")
		}
	}
	switch action {
	case ActionActivate:
		if !n.ifaces.has(ifAction) {
			return "it has no Action interface", nil
		}
		sensitive()
	case ActionSelect:
		if !n.parentIfaces.has(ifSelection) && !n.ifaces.has(ifSelection) {
			return "neither it nor its parent has a Selection interface", nil
		}
		sensitive()
	case ActionSetValue:
		switch kind := valueKind(value); {
		case kind == "string" && n.ifaces.has(ifEditableText):
			sensitive()
			if !st.has(stEditable) {
				unmet = append(unmet, "not EDITABLE")
			}
			if st.has(stReadOnly) {
				unmet = append(unmet, "READ_ONLY")
			}
		case kind == "number" && n.ifaces.has(ifValue) && isSettableRange(n.role):
			sensitive()
		case kind == "string":
			return "it has no EditableText interface (for a string value)", nil
		case kind == "number":
			return "it has no settable Value interface (for a number value)", nil
		default:
			return "set_value takes a string (text) or a number (a range's value)", nil
		}
	case ActionScroll:
		if !n.ifaces.has(ifComponent) {
			return "it has no Component interface", nil
		}
	case ActionReadText:
		if !n.ifaces.has(ifText) {
			return "it has no Text interface", nil
		}
	default:
		return fmt.Sprintf("%q is not a structural action (want one of %s)", action, strings.Join(Actions, ", ")), nil
	}
	return "", unmet
}

func valueKind(v json.RawMessage) string {
	var x any
	if len(v) == 0 || json.Unmarshal(v, &x) != nil {
		return ""
	}
	switch x := x.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case map[string]any:
		if _, ok := x["text"].(string); ok {
			return "string"
		}
		if _, ok := x["value"].(float64); ok {
			return "number"
		}
	}
	return ""
}

// fetchLive reads the node's role, states, interfaces and name, and its
// parent's interfaces, from the application.
func (ap *app) fetchLive(ctx context.Context, p dbus.ObjectPath) (*liveNode, error) {
	rs := infoReqs(p)
	rs[3] = getAllProps(p, ifaceAccessible, "Name", "ChildCount", "Parent")
	if err := ap.run(ctx, rs); err != nil {
		return nil, err
	}
	ln := &liveNode{node: node{path: p}}
	if !applyInfo(&ln.node, rs) {
		if isGone(rs[0].err) {
			return nil, errGone
		}
		return nil, api.Errorf(api.CodeAppUnresponsive, map[string]any{"app_id": ap.id}, "%s does not answer: %v", ap.id, rs[0].err)
	}
	if ni, err := decodeAccessibleProps(rs[3].value()); err == nil && ni.parent.bus == ap.bus && !ni.parent.isNull() {
		ln.parent = ni.parent.path
		pr := newReq(ln.parent, ifaceAccessible+".GetInterfaces")
		if ap.call(ctx, pr) == nil {
			ln.parentIfaces, _ = decodeIfaces(pr.value())
		}
	}
	return ln, nil
}

// perform waits until the element is actionable and does the action.
func (a *Adapter) perform(ctx context.Context, ap *app, p dbus.ObjectPath, action string, value json.RawMessage, timeout time.Duration) (map[string]any, error) {
	id := ElementID(ap.bus, p)
	if err := a.refuseProtected(ctx, ap); err != nil {
		return nil, err
	}
	if action == ActionSetValue && valueKind(value) == "" {
		return nil, api.InvalidParam("value", "set_value takes a string (text) or a number (a range's value)")
	}
	start := time.Now()
	deadline := start.Add(timeout)
	var ln *liveNode
	for attempt := 0; ; attempt++ {
		var err error
		ln, err = ap.fetchLive(ctx, p)
		if err == errGone {
			return nil, api.Errorf(api.CodeElementNotFound, map[string]any{"element_id": id}, "element %s no longer exists", id)
		}
		if err != nil {
			return nil, err
		}
		unsupported, unmet := actionable(action, ln, value)
		if unsupported != "" {
			return nil, api.Errorf(api.CodeActionNotSupported,
				map[string]any{"element_id": id, "action": action, "supported": ap.supportedLive(ln), "reason": unsupported},
				"%s on %s: %s", action, describeNode(&ln.node), unsupported)
		}
		if len(unmet) == 0 {
			break
		}
		now := time.Now()
		if !now.Before(deadline) {
			return nil, api.Errorf(api.CodeExecutionTimeout,
				map[string]any{"element_id": id, "action": action, "not_actionable": unmet, "states": ln.states.names(), "waited_ms": now.Sub(start).Milliseconds()},
				"%s on %s: not actionable after %s: %s", action, describeNode(&ln.node), now.Sub(start).Round(time.Millisecond), strings.Join(unmet, ", "))
		}
		if err := a.waitChange(ctx, ap.id, min(deadline.Sub(now), pollInterval(attempt))); err != nil {
			return nil, err
		}
	}
	res := map[string]any{"element_id": id, "action": action}
	var err error
	switch action {
	case ActionActivate:
		err = ap.activate(ctx, ln, value, res)
	case ActionSelect:
		err = ap.selectEl(ctx, ln, value, res)
	case ActionSetValue:
		err = ap.setValue(ctx, ln, value, res)
	case ActionScroll:
		err = ap.scroll(ctx, ln, value, res)
	case ActionReadText:
		err = ap.readText(ctx, ln, value, res)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

func describeNode(n *node) string {
	if n.name != "" {
		return fmt.Sprintf("%s %q (%s)", RoleName(n.role), n.name, n.path)
	}
	return fmt.Sprintf("%s %s", RoleName(n.role), n.path)
}

func (ap *app) supportedLive(ln *liveNode) []string {
	parent := &node{ifaces: ln.parentIfaces}
	return supportedActions(&ln.node, parent, ln.ifaces.has(ifComponent))
}

// callErr translates the failure of the call that performs an action.
// Not implemented means nothing was done (ACTION_NOT_SUPPORTED); gone is
// ELEMENT_NOT_FOUND; anything else may have happened after the
// application acted, so it is never one of the codes that let the core
// try another adapter.
func (ap *app) callErr(ln *liveNode, action, method string, err error) error {
	id := ElementID(ap.bus, ln.path)
	var pe *api.Error
	switch {
	case errors.As(err, &pe):
		return err
	case isUnknownMethod(err):
		return api.Errorf(api.CodeActionNotSupported, map[string]any{"element_id": id, "action": action, "reason": method + " is not implemented"},
			"%s on %s: the application does not implement %s", action, describeNode(&ln.node), method)
	case isGone(err):
		return api.Errorf(api.CodeElementNotFound, map[string]any{"element_id": id}, "element %s no longer exists", id)
	case errors.Is(err, context.DeadlineExceeded):
		return api.Errorf(api.CodeAppUnresponsive, map[string]any{"element_id": id, "app_id": ap.id, "action": action},
			"%s on %s: %s did not answer %s in time", action, describeNode(&ln.node), ap.id, method)
	}
	var de dbus.Error
	if errors.As(err, &de) {
		msg := de.Name
		if len(de.Body) > 0 {
			msg = fmt.Sprintf("%s: %v", de.Name, de.Body[0])
		}
		if strings.HasSuffix(de.Name, ".NotSupported") {
			return api.Errorf(api.CodeActionNotSupported, map[string]any{"element_id": id, "action": action, "reason": msg},
				"%s on %s: %s is not supported (%s)", action, describeNode(&ln.node), method, msg)
		}
		err = errors.New(clean(msg, 512))
	}
	return api.Errorf(api.CodeInternalError, map[string]any{"element_id": id, "action": action}, "%s on %s: %s: %v", action, describeNode(&ln.node), method, err)
}

// refused is the error for an application that said no: nothing was
// done, so it is ACTION_NOT_SUPPORTED.
func (ap *app) refused(ln *liveNode, action, method string) error {
	return api.Errorf(api.CodeActionNotSupported,
		map[string]any{"element_id": ElementID(ap.bus, ln.path), "action": action, "reason": method + " returned false"},
		"%s on %s: the application refused (%s returned false)", action, describeNode(&ln.node), method)
}

// activate runs the default action (index 0), or the one value names:
// "name" or {"name": "name"}.
func (ap *app) activate(ctx context.Context, ln *liveNode, value json.RawMessage, res map[string]any) error {
	want := ""
	if len(value) > 0 && string(value) != "null" {
		var v struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(value, &want) != nil {
			if err := json.Unmarshal(value, &v); err != nil {
				return api.InvalidParam("value", "activate takes an action name or {\"name\": ...}")
			}
			want = v.Name
		}
	}
	r := newReq(ln.path, ifaceAction+".GetActions")
	if err := ap.call(ctx, r); err != nil && !isUnknownMethod(err) {
		return ap.callErr(ln, ActionActivate, "GetActions", err)
	}
	names, _ := decodeActionNames(r.value())
	if r.err != nil {
		// No GetActions (an old toolkit): count, then name each.
		cnt := getProp(ln.path, ifaceAction, "NActions")
		if err := ap.call(ctx, cnt); err != nil {
			return ap.callErr(ln, ActionActivate, "NActions", err)
		}
		n, _ := cnt.value().(int32)
		reqs := make([]*req, 0, min(n, 64))
		for i := int32(0); i < min(n, 64); i++ {
			reqs = append(reqs, newReq(ln.path, ifaceAction+".GetName", i))
		}
		if err := ap.run(ctx, reqs); err != nil {
			return err
		}
		for _, q := range reqs {
			s, _ := q.value().(string)
			names = append(names, clean(s, maxNameBytes))
		}
	}
	if len(names) == 0 {
		return api.Errorf(api.CodeActionNotSupported, map[string]any{"element_id": ElementID(ap.bus, ln.path), "action": ActionActivate, "reason": "it has no actions"},
			"activate on %s: it has no actions", describeNode(&ln.node))
	}
	idx := 0
	if want != "" {
		idx = -1
		for i, n := range names {
			if n == want {
				idx = i
				break
			}
		}
		for i, n := range names {
			if idx < 0 && strings.EqualFold(n, want) {
				idx = i
			}
		}
		if idx < 0 {
			return api.Errorf(api.CodeActionNotSupported, map[string]any{"element_id": ElementID(ap.bus, ln.path), "action": ActionActivate, "toolkit_actions": names},
				"activate on %s: no action %q (it has %s)", describeNode(&ln.node), want, strings.Join(names, ", "))
		}
	}
	do := newReq(ln.path, ifaceAction+".DoAction", int32(idx))
	if err := ap.call(ctx, do); err != nil {
		return ap.callErr(ln, ActionActivate, "DoAction", err)
	}
	if ok, _ := do.value().(bool); !ok {
		return ap.refused(ln, ActionActivate, "DoAction")
	}
	res["toolkit_action"] = names[idx]
	return nil
}

// selectEl selects the element in its parent's Selection, or, when the
// element has a Selection itself and value names a child ({"index": n}),
// that child.
func (ap *app) selectEl(ctx context.Context, ln *liveNode, value json.RawMessage, res map[string]any) error {
	var v struct {
		Index *int32 `json:"index"`
	}
	if len(value) > 0 && string(value) != "null" {
		if err := json.Unmarshal(value, &v); err != nil {
			return api.InvalidParam("value", "select takes nothing (select this element) or {\"index\": n} (select this element's child n)")
		}
	}
	owner, idx := ln.parent, int32(-1)
	if v.Index != nil {
		if !ln.ifaces.has(ifSelection) {
			return api.InvalidParam("value.index", "%s has no Selection interface of its own", describeNode(&ln.node))
		}
		owner, idx = ln.path, *v.Index
	} else {
		if !ln.parentIfaces.has(ifSelection) {
			return api.Errorf(api.CodeActionNotSupported, map[string]any{"element_id": ElementID(ap.bus, ln.path), "action": ActionSelect},
				"select on %s: its parent has no Selection interface; pass {\"index\": n} to select one of its children", describeNode(&ln.node))
		}
		r := newReq(ln.path, ifaceAccessible+".GetIndexInParent")
		if err := ap.call(ctx, r); err != nil {
			return ap.callErr(ln, ActionSelect, "GetIndexInParent", err)
		}
		idx, _ = r.value().(int32)
		if idx < 0 {
			return api.Errorf(api.CodeElementNotFound, map[string]any{"element_id": ElementID(ap.bus, ln.path)}, "select on %s: it is no longer in its parent", describeNode(&ln.node))
		}
	}
	r := newReq(owner, ifaceSelection+".SelectChild", idx)
	if err := ap.call(ctx, r); err != nil {
		return ap.callErr(ln, ActionSelect, "SelectChild", err)
	}
	if ok, _ := r.value().(bool); !ok {
		return ap.refused(ln, ActionSelect, "SelectChild")
	}
	res["index"] = idx
	ap.touch(ln.path)
	return nil
}

// setValue writes text (EditableText.SetTextContents) or a range's value
// (the Value interface's CurrentValue).
func (ap *app) setValue(ctx context.Context, ln *liveNode, value json.RawMessage, res map[string]any) error {
	var x any
	_ = json.Unmarshal(value, &x)
	if m, ok := x.(map[string]any); ok {
		if t, ok := m["text"]; ok {
			x = t
		} else {
			x = m["value"]
		}
	}
	switch v := x.(type) {
	case string:
		if len(v) > ap.a.cfg.MaxTextBytes {
			return api.Errorf(api.CodeTextTooLarge, map[string]any{"element_id": ElementID(ap.bus, ln.path), "bytes": len(v), "limit": ap.a.cfg.MaxTextBytes},
				"set_value: the text is %d bytes, at most %d", len(v), ap.a.cfg.MaxTextBytes)
		}
		if !utf8.ValidString(v) {
			return api.InvalidParam("value", "text must be valid UTF-8")
		}
		r := newReq(ln.path, ifaceEditableText+".SetTextContents", v)
		if err := ap.call(ctx, r); err != nil {
			return ap.callErr(ln, ActionSetValue, "SetTextContents", err)
		}
		if ok, _ := r.value().(bool); !ok {
			return ap.refused(ln, ActionSetValue, "SetTextContents")
		}
		res["text"] = v
	case float64:
		vr := getAllProps(ln.path, ifaceValue)
		if err := ap.call(ctx, vr); err != nil {
			return ap.callErr(ln, ActionSetValue, "the Value properties", err)
		}
		if rv, err := decodeValue(vr.value()); err == nil && rv.Max > rv.Min && (v < rv.Min || v > rv.Max) {
			return api.Errorf(api.CodeInvalidParams, map[string]any{"field": "value", "min": rv.Min, "max": rv.Max},
				"value: %v is outside %s's range [%v, %v]", v, describeNode(&ln.node), rv.Min, rv.Max)
		}
		r := newReq(ln.path, ifaceProperties+".Set", ifaceValue, "CurrentValue", dbus.MakeVariant(v))
		if err := ap.call(ctx, r); err != nil {
			return ap.callErr(ln, ActionSetValue, "Value.CurrentValue", err)
		}
		rb := getProp(ln.path, ifaceValue, "CurrentValue")
		if ap.call(ctx, rb) == nil {
			if got, ok := rb.value().(float64); ok && !math.IsNaN(got) && !math.IsInf(got, 0) {
				res["value"] = got
			}
		}
	default:
		return api.InvalidParam("value", "set_value takes a string (text) or a number (a range's value)")
	}
	ap.touch(ln.path)
	return nil
}

// scroll types of Component.ScrollTo (AtspiScrollType).
var scrollTypes = map[string]uint32{
	"top_left": 0, "bottom_right": 1, "top_edge": 2, "bottom_edge": 3, "left_edge": 4, "right_edge": 5, "anywhere": 6,
}

// scroll brings the element into view: Component.ScrollTo, "anywhere"
// unless value names another type ("top_edge", {"to": "top_edge"}).
func (ap *app) scroll(ctx context.Context, ln *liveNode, value json.RawMessage, res map[string]any) error {
	to := "anywhere"
	if len(value) > 0 && string(value) != "null" {
		var v struct {
			To string `json:"to"`
		}
		if json.Unmarshal(value, &to) != nil {
			if err := json.Unmarshal(value, &v); err != nil {
				return api.InvalidParam("value", "scroll takes a scroll type or {\"to\": type}")
			}
			to = v.To
		}
	}
	typ, ok := scrollTypes[to]
	if !ok {
		return api.InvalidParam("value", "unknown scroll type %q (want top_left, bottom_right, top_edge, bottom_edge, left_edge, right_edge or anywhere)", to)
	}
	r := newReq(ln.path, ifaceComponent+".ScrollTo", typ)
	if err := ap.call(ctx, r); err != nil {
		return ap.callErr(ln, ActionScroll, "ScrollTo", err)
	}
	if ok, _ := r.value().(bool); !ok {
		return ap.refused(ln, ActionScroll, "ScrollTo")
	}
	res["to"] = to
	return nil
}

// textChunk is how many characters one GetText call reads.
const textChunk = 32 << 10

// readText reads the element's text in chunks. value may give {"offset":
// o, "length": n} (characters) to read part of it; the answer carries the
// total length. More than MaxTextBytes is TEXT_TOO_LARGE.
func (ap *app) readText(ctx context.Context, ln *liveNode, value json.RawMessage, res map[string]any) error {
	var v struct {
		Offset *int64 `json:"offset"`
		Length *int64 `json:"length"`
	}
	if len(value) > 0 && string(value) != "null" {
		if err := json.Unmarshal(value, &v); err != nil {
			return api.InvalidParam("value", "read_text takes nothing or {\"offset\": o, \"length\": n}")
		}
	}
	cnt := getProp(ln.path, ifaceText, "CharacterCount")
	if err := ap.call(ctx, cnt); err != nil {
		return ap.callErr(ln, ActionReadText, "CharacterCount", err)
	}
	total, _ := cnt.value().(int32)
	total = max(total, 0)
	off, end := int64(0), int64(total)
	if v.Offset != nil {
		off = min(max(*v.Offset, 0), int64(total))
	}
	if v.Length != nil {
		if *v.Length < 0 {
			return api.InvalidParam("value.length", "must not be negative")
		}
		end = min(off+*v.Length, int64(total))
	}
	limit := ap.a.cfg.MaxTextBytes
	id := ElementID(ap.bus, ln.path)
	tooLarge := func() error {
		return api.Errorf(api.CodeTextTooLarge,
			map[string]any{"element_id": id, "characters": total, "offset": off, "limit_bytes": limit},
			"read_text: the text of %s from character %d is more than %d bytes; read it in parts with {\"offset\": o, \"length\": n}", describeNode(&ln.node), off, limit)
	}
	// Each character is at least one byte: a range longer than the limit
	// is too large before anything is read.
	if end-off > int64(limit) {
		return tooLarge()
	}
	var b strings.Builder
	for pos := off; pos < end; pos += textChunk {
		r := newReq(ln.path, ifaceText+".GetText", int32(pos), int32(min(pos+textChunk, end)))
		if err := ap.call(ctx, r); err != nil {
			return ap.callErr(ln, ActionReadText, "GetText", err)
		}
		s, _ := r.value().(string)
		if b.Len()+len(s) > limit {
			return tooLarge()
		}
		b.WriteString(s)
	}
	res["text"] = clean(b.String(), limit)
	res["offset"], res["length"], res["characters"] = off, end-off, total
	return nil
}

// touch marks the element an action changed as stale in the cache, so the
// next read does not depend on an event to see its text, value or states.
// (Other elements an action changes, a selection's siblings say, report
// themselves through events.)
func (ap *app) touch(p dbus.ObjectPath) {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	if n := ap.nodes[p]; n != nil {
		n.gen++
		n.textOK, n.valueOK, n.infoStale = false, false, true
	}
	ap.changedLocked()
}
