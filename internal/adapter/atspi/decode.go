package atspi

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"
)

// Decoding of what applications send. Everything here takes data an
// application chose (names, texts, states, object references, whole
// cache items) and must neither panic nor let an oversized or malformed
// value through: strings are made valid UTF-8 and cut to a bound, object
// paths and bus names are checked, lists are cut to a bound. The fuzz
// tests hold it to that.

// Bounds on decoded values.
const (
	maxNameBytes  = 1024 // accessible names and descriptions
	maxChildren   = 4096 // children one GetChildren or cache item may list
	maxInterfaces = 64   // interface names of one node
)

// ref is an object reference, AT-SPI2's (so): a bus name and a path.
type ref struct {
	bus  string
	path dbus.ObjectPath
}

// nullPath is AT-SPI2's null object.
const nullPath dbus.ObjectPath = "/org/a11y/atspi/null"

func (r ref) isNull() bool { return r.path == nullPath || r.path == "" }

// decodeRef decodes a (so) as godbus hands it over: a []interface{} of a
// string and an object path.
func decodeRef(v any) (ref, error) {
	s, ok := v.([]any)
	if !ok || len(s) != 2 {
		return ref{}, fmt.Errorf("object reference: want (so), got %T", v)
	}
	bus, ok := s[0].(string)
	if !ok {
		return ref{}, fmt.Errorf("object reference: bus name is %T", s[0])
	}
	var path dbus.ObjectPath
	switch p := s[1].(type) {
	case dbus.ObjectPath:
		path = p
	case string:
		path = dbus.ObjectPath(p)
	default:
		return ref{}, fmt.Errorf("object reference: path is %T", s[1])
	}
	if !path.IsValid() {
		return ref{}, fmt.Errorf("object reference: invalid path %q", clean(string(path), 128))
	}
	if bus != "" && !validBusName(bus) {
		return ref{}, fmt.Errorf("object reference: invalid bus name %q", clean(bus, 128))
	}
	return ref{bus: bus, path: path}, nil
}

// decodeRefs decodes an a(so); malformed entries are skipped, and at most
// maxChildren are kept (truncated reports a cut).
func decodeRefs(v any) (refs []ref, truncated bool, err error) {
	elems, ok := anySlice(v)
	if !ok {
		return nil, false, fmt.Errorf("object references: want a(so), got %T", v)
	}
	if len(elems) > maxChildren {
		elems, truncated = elems[:maxChildren], true
	}
	refs = make([]ref, 0, len(elems))
	for _, e := range elems {
		if r, err := decodeRef(e); err == nil {
			refs = append(refs, r)
		}
	}
	return refs, truncated, nil
}

// clean makes s valid UTF-8 without NULs and cuts it to at most max bytes
// on a character boundary.
func clean(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// ifaceSet is the set of AT-SPI2 interfaces a node implements.
type ifaceSet uint32

const (
	ifAccessible ifaceSet = 1 << iota
	ifAction
	ifApplication
	ifCollection
	ifComponent
	ifDocument
	ifEditableText
	ifHyperlink
	ifHypertext
	ifImage
	ifSelection
	ifTable
	ifTableCell
	ifText
	ifValue
)

var ifaceByName = map[string]ifaceSet{
	"org.a11y.atspi.Accessible":   ifAccessible,
	"org.a11y.atspi.Action":       ifAction,
	"org.a11y.atspi.Application":  ifApplication,
	"org.a11y.atspi.Collection":   ifCollection,
	"org.a11y.atspi.Component":    ifComponent,
	"org.a11y.atspi.Document":     ifDocument,
	"org.a11y.atspi.EditableText": ifEditableText,
	"org.a11y.atspi.Hyperlink":    ifHyperlink,
	"org.a11y.atspi.Hypertext":    ifHypertext,
	"org.a11y.atspi.Image":        ifImage,
	"org.a11y.atspi.Selection":    ifSelection,
	"org.a11y.atspi.Table":        ifTable,
	"org.a11y.atspi.TableCell":    ifTableCell,
	"org.a11y.atspi.Text":         ifText,
	"org.a11y.atspi.Value":        ifValue,
}

func (s ifaceSet) has(i ifaceSet) bool { return s&i != 0 }

// decodeIfaces decodes an "as" of interface names; unknown names are
// ignored.
func decodeIfaces(v any) (ifaceSet, error) {
	names, ok := v.([]string)
	if !ok {
		return 0, fmt.Errorf("interfaces: want as, got %T", v)
	}
	if len(names) > maxInterfaces {
		names = names[:maxInterfaces]
	}
	var s ifaceSet
	for _, n := range names {
		s |= ifaceByName[n]
	}
	return s, nil
}

// decodeStates decodes an "au" state set.
func decodeStates(v any) (stateSet, error) {
	w, ok := v.([]uint32)
	if !ok {
		return 0, fmt.Errorf("states: want au, got %T", v)
	}
	return statesFromWords(w), nil
}

// cacheItem is one entry of Cache.GetItems (or of an AddAccessible
// signal).
type cacheItem struct {
	obj, app, parent ref
	// index is the node's index in its parent, -1 when not given (the
	// older item layout lists children instead).
	index      int32
	childCount int32
	// children is set only by the older layout, a((so)(so)(so)a(so)assusau).
	children      []ref
	childrenGiven bool
	ifaces        ifaceSet
	name          string
	role          uint32
	desc          string
	states        stateSet
}

// decodeCacheItem decodes one cache item in either layout AT-SPI2 has
// used: ((so)(so)(so)iiassusau) since 2.x, ((so)(so)(so)a(so)assusau)
// before.
func decodeCacheItem(v any) (cacheItem, error) {
	f, ok := v.([]any)
	if !ok {
		return cacheItem{}, fmt.Errorf("cache item: want a struct, got %T", v)
	}
	var it cacheItem
	var rest []any
	switch len(f) {
	case 10:
		idx, ok1 := f[3].(int32)
		cc, ok2 := f[4].(int32)
		if !ok1 || !ok2 {
			return cacheItem{}, errors.New("cache item: index and child count must be int32")
		}
		it.index, it.childCount = idx, cc
		rest = f[5:]
	case 9:
		kids, truncated, err := decodeRefs(f[3])
		if err != nil {
			return cacheItem{}, fmt.Errorf("cache item: %w", err)
		}
		it.index, it.children, it.childrenGiven = -1, kids, !truncated
		it.childCount = int32(len(kids))
		rest = f[4:]
	default:
		return cacheItem{}, fmt.Errorf("cache item: want 9 or 10 fields, got %d", len(f))
	}
	var err error
	if it.obj, err = decodeRef(f[0]); err != nil {
		return cacheItem{}, fmt.Errorf("cache item: %w", err)
	}
	if it.obj.isNull() || it.obj.bus == "" {
		return cacheItem{}, errors.New("cache item: null object")
	}
	if it.app, err = decodeRef(f[1]); err != nil {
		return cacheItem{}, fmt.Errorf("cache item: %w", err)
	}
	if it.parent, err = decodeRef(f[2]); err != nil {
		return cacheItem{}, fmt.Errorf("cache item: %w", err)
	}
	if it.ifaces, err = decodeIfaces(rest[0]); err != nil {
		return cacheItem{}, fmt.Errorf("cache item: %w", err)
	}
	name, ok := rest[1].(string)
	role, ok2 := rest[2].(uint32)
	desc, ok3 := rest[3].(string)
	if !ok || !ok2 || !ok3 {
		return cacheItem{}, errors.New("cache item: name, role and description must be s, u, s")
	}
	it.name, it.role, it.desc = clean(name, maxNameBytes), role, clean(desc, maxNameBytes)
	if it.states, err = decodeStates(rest[4]); err != nil {
		return cacheItem{}, fmt.Errorf("cache item: %w", err)
	}
	if it.childCount < 0 {
		it.childCount = 0
	}
	return it, nil
}

// decodeItems decodes a GetItems reply body. Malformed items are counted
// in bad and skipped; at most limit items are kept.
func decodeItems(body []any, limit int) (items []cacheItem, bad int, truncated bool, err error) {
	if len(body) != 1 {
		return nil, 0, false, fmt.Errorf("GetItems: want one value, got %d", len(body))
	}
	elems, ok := anySlice(body[0])
	if !ok {
		return nil, 0, false, fmt.Errorf("GetItems: want an array of items, got %T", body[0])
	}
	if len(elems) > limit {
		elems, truncated = elems[:limit], true
	}
	items = make([]cacheItem, 0, len(elems))
	for _, e := range elems {
		it, err := decodeCacheItem(e)
		if err != nil {
			bad++
			continue
		}
		items = append(items, it)
	}
	return items, bad, truncated, nil
}

// event is an AT-SPI2 event signal, decoded.
type event struct {
	// kind is "<class>:<member>" as the registry names events, e.g.
	// "object:state-changed", "window:activate", "focus:".
	kind   string
	detail string
	d1, d2 int32
	data   any // the any_data variant's value
	sender string
	path   dbus.ObjectPath
}

// eventClasses maps the signal interfaces to the registry's event
// classes.
var eventClasses = map[string]string{
	"org.a11y.atspi.Event.Object":   "object",
	"org.a11y.atspi.Event.Window":   "window",
	"org.a11y.atspi.Event.Focus":    "focus",
	"org.a11y.atspi.Event.Document": "document",
}

// eventMember turns a signal member ("StateChanged") into the registry's
// spelling ("state-changed").
func eventMember(m string) string {
	var b strings.Builder
	for i, r := range m {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// decodeEvent decodes an event signal: (siiva{sv}) since AT-SPI2 2.x,
// (siiv(so)) before. ok is false for a signal that is not an event.
func decodeEvent(name string, sender string, path dbus.ObjectPath, body []any) (event, bool) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return event{}, false
	}
	class, ok := eventClasses[name[:i]]
	if !ok || len(body) < 4 {
		return event{}, false
	}
	ev := event{kind: class + ":", sender: sender, path: path}
	if class != "focus" {
		ev.kind += eventMember(name[i+1:])
	}
	detail, ok1 := body[0].(string)
	d1, ok2 := body[1].(int32)
	d2, ok3 := body[2].(int32)
	if !ok1 || !ok2 || !ok3 {
		return event{}, false
	}
	ev.detail, ev.d1, ev.d2 = clean(detail, 128), d1, d2
	if v, ok := body[3].(dbus.Variant); ok {
		ev.data = v.Value()
	}
	return ev, true
}

// eventString returns the any_data of an event as a string, cleaned.
func eventString(v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		return "", false
	}
	return clean(s, maxNameBytes), true
}

// rangeValue is a node's Value interface.
type rangeValue struct {
	Current, Min, Max, Step float64
}

// decodeValue decodes Properties.GetAll("org.a11y.atspi.Value"). Values
// that are not finite numbers (JSON has no NaN) are reported as 0.
func decodeValue(v any) (rangeValue, error) {
	m, ok := v.(map[string]dbus.Variant)
	if !ok {
		return rangeValue{}, fmt.Errorf("value properties: want a{sv}, got %T", v)
	}
	num := func(k string) float64 {
		f, _ := m[k].Value().(float64)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0
		}
		return f
	}
	if _, ok := m["CurrentValue"].Value().(float64); !ok {
		return rangeValue{}, errors.New("value properties: no CurrentValue")
	}
	return rangeValue{Current: num("CurrentValue"), Min: num("MinimumValue"), Max: num("MaximumValue"), Step: num("MinimumIncrement")}, nil
}

// nodeInfo is what a walk learns of a node the cache left out, from
// Properties.GetAll("org.a11y.atspi.Accessible").
type nodeInfo struct {
	name, desc string
	childCount int32
	parent     ref
}

// decodeAccessibleProps decodes Properties.GetAll of the Accessible
// interface.
func decodeAccessibleProps(v any) (nodeInfo, error) {
	m, ok := v.(map[string]dbus.Variant)
	if !ok {
		return nodeInfo{}, fmt.Errorf("accessible properties: want a{sv}, got %T", v)
	}
	var ni nodeInfo
	if s, ok := m["Name"].Value().(string); ok {
		ni.name = clean(s, maxNameBytes)
	}
	if s, ok := m["Description"].Value().(string); ok {
		ni.desc = clean(s, maxNameBytes)
	}
	if c, ok := m["ChildCount"].Value().(int32); ok && c > 0 {
		ni.childCount = c
	}
	if p, ok := m["Parent"]; ok {
		if r, err := decodeRef(p.Value()); err == nil {
			ni.parent = r
		}
	}
	return ni, nil
}

// decodeExtents decodes Component.GetExtents's (iiii).
func decodeExtents(v any) (x, y, w, h int32, err error) {
	s, ok := v.([]any)
	if !ok || len(s) != 4 {
		return 0, 0, 0, 0, fmt.Errorf("extents: want (iiii), got %T", v)
	}
	var out [4]int32
	for i := range s {
		n, ok := s[i].(int32)
		if !ok {
			return 0, 0, 0, 0, fmt.Errorf("extents: field %d is %T", i, s[i])
		}
		out[i] = n
	}
	if out[2] < 0 || out[3] < 0 {
		out[2], out[3] = max(out[2], 0), max(out[3], 0)
	}
	return out[0], out[1], out[2], out[3], nil
}

// decodeActionNames decodes Action.GetActions's a(sss): each action's
// (localized) name, description and key binding. Names are cut to
// maxNameBytes; at most 64 actions are kept.
func decodeActionNames(v any) ([]string, error) {
	var elems []any
	switch s := v.(type) {
	case [][]any:
		for i := range s {
			elems = append(elems, s[i])
		}
	case []any:
		elems = s
	default:
		return nil, fmt.Errorf("actions: want a(sss), got %T", v)
	}
	if len(elems) > 64 {
		elems = elems[:64]
	}
	out := make([]string, 0, len(elems))
	for _, e := range elems {
		f, ok := e.([]any)
		if !ok || len(f) < 1 {
			continue
		}
		n, _ := f[0].(string)
		out = append(out, clean(n, maxNameBytes))
	}
	return out, nil
}

// anySlice returns an array of structs as godbus decodes it: []any, or
// [][]any when every element is a struct of the same signature.
func anySlice(v any) ([]any, bool) {
	switch s := v.(type) {
	case [][]any:
		elems := make([]any, len(s))
		for i := range s {
			elems[i] = s[i]
		}
		return elems, true
	case []any:
		return s, true
	}
	return nil, false
}
