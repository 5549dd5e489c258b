package atspi

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
)

// The event loop: one goroutine, started with the first bus connection
// and ended by Close, takes the bus's signals in order, applies each to
// the cache of the application that sent it, and hands the PCP events it
// derives to Config.OnEvent.
//
// What an event does to the cache:
//
//	object:state-changed:<state>     sets or clears the state bit in place
//	object:property-change:accessible-name / -description   replaces it in place
//	object:property-change:accessible-value, object:value-changed   value refetched on the next read
//	object:text-changed               text refetched on the next read
//	object:children-changed           the node's children listed again on the next read
//	                                  (a removed child's subtree is dropped at once)
//	object:bounds-changed             bounds refetched on the next read that wants them
//	object:model-changed              as children-changed
//
// Signals dropped by a full queue make every cache fetch its tree again.
func (a *Adapter) eventLoop() {
	defer a.wg.Done()
	for {
		select {
		case <-a.life.Done():
			return
		case <-a.queue.notify:
		}
		sigs, overflow := a.queue.take()
		if overflow {
			a.mu.Lock()
			apps := make([]*app, 0, len(a.apps))
			for _, ap := range a.apps {
				apps = append(apps, ap)
			}
			a.appsFresh = false
			a.mu.Unlock()
			for _, ap := range apps {
				ap.invalidate()
			}
		}
		for _, s := range sigs {
			a.handleSignal(s)
		}
	}
}

// pcpEvent is an event for Config.OnEvent.
type pcpEvent struct {
	typ, app, surface string
	data              map[string]any
}

func (a *Adapter) emit(evs []pcpEvent) {
	if a.cfg.OnEvent == nil {
		return
	}
	for _, e := range evs {
		a.cfg.OnEvent(e.typ, e.app, e.surface, e.data)
	}
}

func (a *Adapter) handleSignal(s *dbus.Signal) {
	if s.Sender == "" && s.Name == sigAppGone {
		a.goneSignal(s)
		return
	}
	if s.Name == "org.freedesktop.DBus.NameOwnerChanged" {
		if s.Sender == "org.freedesktop.DBus" {
			a.nameOwnerChanged(s.Body)
		}
		return
	}
	ev, ok := decodeEvent(s.Name, s.Sender, s.Path, s.Body)
	if !ok {
		return
	}
	// Events are applied to the cache of the application that sent them:
	// the bus daemon sets the sender, so no application can change
	// another's cache.
	a.mu.Lock()
	ap := a.apps[ev.sender]
	if ap == nil {
		// The registry announces applications as children of its root;
		// anything else is from an application not listed yet.
		a.appsFresh = false
		fromRegistry := ev.sender != "" && ev.sender == a.registry
		a.mu.Unlock()
		if fromRegistry && ev.kind == "object:children-changed" && ev.path == rootPath {
			a.announceApps()
		}
		return
	}
	a.mu.Unlock()
	a.emit(ap.apply(ev))
}

// announceApps lists the applications again after the registry said they
// changed, and reports the windows of new ones as created.
func (a *Adapter) announceApps() {
	a.mu.Lock()
	before := map[string]bool{}
	for b := range a.apps {
		before[b] = true
	}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(a.life, 2*a.cfg.CallTimeout)
	defer cancel()
	apps, err := a.appList(ctx)
	if err != nil {
		return
	}
	for _, ap := range apps {
		if before[ap.bus] {
			continue
		}
		if ap.toplevels(ctx) != nil {
			continue
		}
		ap.mu.Lock()
		var evs []pcpEvent
		for p, n := range ap.surfaces {
			evs = append(evs, ap.surfaceEventLocked(api.EventSurfaceCreated, p, n))
		}
		ap.mu.Unlock()
		a.emit(evs)
	}
}

func (a *Adapter) nameOwnerChanged(body []any) {
	if len(body) != 3 {
		return
	}
	name, _ := body[0].(string)
	newOwner, _ := body[2].(string)
	if newOwner != "" || !strings.HasPrefix(name, ":") {
		return
	}
	a.mu.Lock()
	ap := a.apps[name]
	if ap != nil {
		a.dropLocked(ap)
	}
	a.mu.Unlock()
	if ap == nil {
		return
	}
	a.gone(ap)
}

// invalidate makes the next read fetch the whole tree again.
func (ap *app) invalidate() {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	ap.loaded = false
	if ap.loading {
		ap.touched = map[dbus.ObjectPath]bool{rootPath: true}
	}
	ap.changedLocked()
}

func (ap *app) surfaceEventLocked(typ string, p dbus.ObjectPath, num int) pcpEvent {
	sid := SurfaceID(ap.id, num)
	data := map[string]any{"surface_id": sid, "app_id": ap.id, "element_id": ElementID(ap.bus, p)}
	if n := ap.nodes[p]; n != nil {
		data["title"] = n.name
		data["role"] = RoleName(n.role)
	}
	return pcpEvent{typ, ap.id, sid, data}
}

// apply updates the cache for one event and returns the PCP events it
// means: the handler eventHandlers names for the event's kind does both.
func (ap *app) apply(ev event) []pcpEvent {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	defer ap.changedLocked()
	if ap.loading {
		ap.touched[ev.path] = true
	}
	n := ap.nodes[ev.path]
	if n != nil {
		n.gen++
	}
	h := eventHandlers[ev.kind]
	if h == nil {
		// Everything else (window:create and :destroy, which
		// children-changed on the root also reports; caret moves;
		// selection and active descendant changes, whose state changes
		// arrive on their own) leaves the cache as it is.
		return nil
	}
	return h(ap, &subject{ev: ev, n: n, id: ElementID(ap.bus, ev.path), sid: ap.surfaceIDLocked(ev.path)})
}

// subject is what an event handler works on: the event, the cached node it
// names (nil if the cache does not hold it), its element id and the id of
// the surface it is in ("" if none).
type subject struct {
	ev      event
	n       *node
	id, sid string
}

// eventHandler applies one kind of event to the cache and returns the PCP
// events it means. Called with ap.mu held.
type eventHandler func(ap *app, s *subject) []pcpEvent

// eventHandlers holds, per event kind, what it does to the cache (see the
// table at eventLoop).
var eventHandlers = map[string]eventHandler{
	"object:state-changed":    (*app).stateChangedLocked,
	"object:property-change":  (*app).propertyChangedLocked,
	"object:value-changed":    (*app).valueChangedLocked,
	"object:text-changed":     (*app).textChangedLocked,
	"object:children-changed": (*app).childrenChangedLocked,
	"window:activate":         (*app).windowActivatedLocked,
	"focus:":                  (*app).focusedLocked,
	"object:bounds-changed":   (*app).boundsChangedLocked,
	"object:model-changed":    (*app).modelChangedLocked,
}

// elementEventLocked is the PCP event typ about s's element, with data and
// the fields every element event carries.
func (ap *app) elementEventLocked(s *subject, typ string, data map[string]any) []pcpEvent {
	data["element_id"], data["app_id"] = s.id, ap.id
	if s.sid != "" {
		data["surface_id"] = s.sid
	}
	if s.n != nil {
		data["role"], data["name"] = RoleName(s.n.role), s.n.name
	}
	return []pcpEvent{{typ, ap.id, s.sid, data}}
}

// stateChangedLocked sets or clears the state bit; a state the adapter
// has no bit for makes the node's description stale. A window becoming
// active, or an element focused, may move the focus to another surface.
func (ap *app) stateChangedLocked(s *subject) []pcpEvent {
	on := s.ev.d1 != 0
	bit := stateBit(s.ev.detail)
	if s.n != nil {
		if bit > 0 {
			s.n.states = s.n.states.with(bit, on)
		} else {
			s.n.infoStale = true
		}
	}
	out := ap.elementEventLocked(s, api.EventElementStateChanged, map[string]any{"state": normState(s.ev.detail), "value": on})
	if (bit == stActive || bit == stFocused) && on {
		out = append(out, ap.focusEventLocked(s.sid, s.id, bit == stFocused)...)
	}
	return out
}

// propertyHandlers holds, per accessible property, what its change does to
// the cache.
var propertyHandlers = map[string]eventHandler{
	"accessible-name":        (*app).nameChangedLocked,
	"accessible-description": (*app).descriptionChangedLocked,
	"accessible-value":       (*app).valueChangedLocked,
	"accessible-parent":      (*app).parentChangedLocked,
}

func (ap *app) propertyChangedLocked(s *subject) []pcpEvent {
	if h := propertyHandlers[s.ev.detail]; h != nil {
		return h(ap, s)
	}
	if s.n != nil && strings.HasPrefix(s.ev.detail, "accessible-role") {
		s.n.infoStale = true
	}
	return nil
}

// nameChangedLocked replaces the name in place; a window's new name is its
// surface's new title.
func (ap *app) nameChangedLocked(s *subject) []pcpEvent {
	name, ok := eventString(s.ev.data)
	n := s.n
	if n == nil {
		return nil
	}
	if ok {
		n.name = name
	} else {
		n.infoStale = true
	}
	if n.parent == rootPath && s.sid != "" {
		return []pcpEvent{{api.EventSurfaceTitleChanged, ap.id, s.sid, map[string]any{"surface_id": s.sid, "app_id": ap.id, "title": name, "element_id": s.id}}}
	}
	return nil
}

func (ap *app) descriptionChangedLocked(s *subject) []pcpEvent {
	if desc, ok := eventString(s.ev.data); ok && s.n != nil {
		s.n.desc = desc
	}
	return nil
}

// parentChangedLocked has the old parent's children listed again.
func (ap *app) parentChangedLocked(s *subject) []pcpEvent {
	if s.n != nil {
		ap.staleKids[s.n.parent] = true
		s.n.infoStale = true
	}
	return nil
}

// valueChangedLocked has the value fetched again on the next read.
func (ap *app) valueChangedLocked(s *subject) []pcpEvent {
	if s.n != nil {
		s.n.valueOK = false
	}
	return ap.elementEventLocked(s, api.EventElementValueChanged, map[string]any{"kind": "value"})
}

// textChangedLocked has the text fetched again on the next read.
func (ap *app) textChangedLocked(s *subject) []pcpEvent {
	if s.n != nil {
		s.n.textOK = false
	}
	return ap.elementEventLocked(s, api.EventElementValueChanged, map[string]any{"kind": "text", "change": s.ev.detail})
}

// childrenChangedLocked has the node's children listed again on the next
// read and drops a removed child's subtree at once; a child added to or
// removed from the root is a surface created or destroyed.
func (ap *app) childrenChangedLocked(s *subject) []pcpEvent {
	change, _, _ := strings.Cut(s.ev.detail, "/")
	var child dbus.ObjectPath
	if r, err := decodeRef(s.ev.data); err == nil && r.bus == ap.bus {
		child = r.path
	}
	if s.n != nil || s.ev.path == rootPath {
		ap.staleKids[s.ev.path] = true
	}
	var out []pcpEvent
	if s.ev.path == rootPath && child != "" {
		out = ap.surfaceChangedLocked(change, child)
	}
	if change == "remove" && child != "" {
		ap.removeChildLocked(s.n, s.ev.path, child)
	}
	data := map[string]any{"change": change, "index": s.ev.d1}
	if child != "" {
		data["child_id"] = ElementID(ap.bus, child)
	}
	return append(out, ap.elementEventLocked(s, api.EventElementChildrenChanged, data)...)
}

// surfaceChangedLocked numbers a window added to the root, or forgets one
// removed, and returns the surface event that means.
func (ap *app) surfaceChangedLocked(change string, w dbus.ObjectPath) []pcpEvent {
	switch change {
	case "add":
		if _, ok := ap.surfaces[w]; !ok {
			ap.nextSurf++
			ap.surfaces[w] = ap.nextSurf
			return []pcpEvent{ap.surfaceEventLocked(api.EventSurfaceCreated, w, ap.nextSurf)}
		}
	case "remove":
		if num, ok := ap.surfaces[w]; ok {
			delete(ap.surfaces, w)
			return []pcpEvent{ap.surfaceEventLocked(api.EventSurfaceDestroyed, w, num)}
		}
	}
	return nil
}

// removeChildLocked drops child's subtree, if the cache has it under
// parent p (whose node is n, nil if not cached), and takes it out of n's
// children.
func (ap *app) removeChildLocked(n *node, p, child dbus.ObjectPath) {
	cn := ap.nodes[child]
	if cn == nil || cn.parent != p {
		return
	}
	ap.pruneLocked(child)
	if n != nil {
		n.children = slices.DeleteFunc(slices.Clone(n.children), func(c dbus.ObjectPath) bool { return c == child })
	}
}

func (ap *app) windowActivatedLocked(s *subject) []pcpEvent {
	return ap.focusEventLocked(s.sid, s.id, false)
}

func (ap *app) focusedLocked(s *subject) []pcpEvent {
	return ap.focusEventLocked(s.sid, s.id, true)
}

// boundsChangedLocked has the bounds fetched again on the next read that
// wants them.
func (ap *app) boundsChangedLocked(s *subject) []pcpEvent {
	if s.n != nil {
		s.n.boundsAt = time.Time{}
	}
	return nil
}

// modelChangedLocked is as children-changed, without the child.
func (ap *app) modelChangedLocked(s *subject) []pcpEvent {
	if s.n != nil {
		ap.staleKids[s.ev.path] = true
	}
	return nil
}

// focusEventLocked reports a surface.focus_changed when the focused
// surface is not the one last reported.
func (ap *app) focusEventLocked(sid, elementID string, isElement bool) []pcpEvent {
	if sid == "" {
		return nil
	}
	a := ap.a
	a.focusMu.Lock()
	same := a.focusSurf == sid
	a.focusSurf = sid
	a.focusMu.Unlock()
	if same {
		return nil
	}
	data := map[string]any{"surface_id": sid, "app_id": ap.id, "focused": true}
	if isElement {
		data["element_id"] = elementID
	}
	if w := ap.surfaceOfLocked(dbus.ObjectPath(strings.TrimPrefix(elementID, ap.bus+"|"))); w != "" {
		if n := ap.nodes[w]; n != nil {
			data["title"] = n.name
		}
	}
	return []pcpEvent{{api.EventSurfaceFocusChanged, ap.id, sid, data}}
}
