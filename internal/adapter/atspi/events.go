package atspi

import (
	"context"
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
	ap.mu.Lock()
	var evs []pcpEvent
	for p, n := range ap.surfaces {
		evs = append(evs, ap.surfaceEventLocked(api.EventSurfaceDestroyed, p, n))
	}
	ap.mu.Unlock()
	a.emit(evs)
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
// means.
func (ap *app) apply(ev event) []pcpEvent {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	if ap.loading {
		ap.touched[ev.path] = true
	}
	n := ap.nodes[ev.path]
	if n != nil {
		n.gen++
	}
	id := ElementID(ap.bus, ev.path)
	sid := ap.surfaceIDLocked(ev.path)
	elem := func(typ string, data map[string]any) []pcpEvent {
		data["element_id"], data["app_id"] = id, ap.id
		if sid != "" {
			data["surface_id"] = sid
		}
		if n != nil {
			data["role"], data["name"] = RoleName(n.role), n.name
		}
		return []pcpEvent{{typ, ap.id, sid, data}}
	}
	defer ap.changedLocked()

	switch ev.kind {
	case "object:state-changed":
		on := ev.d1 != 0
		bit := stateBit(ev.detail)
		if n != nil {
			if bit > 0 {
				n.states = n.states.with(bit, on)
			} else {
				n.infoStale = true
			}
		}
		out := elem(api.EventElementStateChanged, map[string]any{"state": normState(ev.detail), "value": on})
		if (bit == stActive || bit == stFocused) && on {
			if f := ap.focusEventLocked(sid, id, bit == stFocused); f != nil {
				out = append(out, *f)
			}
		}
		return out

	case "object:property-change":
		switch ev.detail {
		case "accessible-name":
			s, ok := eventString(ev.data)
			if n != nil {
				if ok {
					n.name = s
				} else {
					n.infoStale = true
				}
			}
			if n != nil && n.parent == rootPath && sid != "" {
				return []pcpEvent{{api.EventSurfaceTitleChanged, ap.id, sid, map[string]any{"surface_id": sid, "app_id": ap.id, "title": s, "element_id": id}}}
			}
			return nil
		case "accessible-description":
			if s, ok := eventString(ev.data); ok && n != nil {
				n.desc = s
			}
			return nil
		case "accessible-value":
			if n != nil {
				n.valueOK = false
			}
			return elem(api.EventElementValueChanged, map[string]any{"kind": "value"})
		case "accessible-parent":
			if n != nil {
				ap.staleKids[n.parent] = true
				n.infoStale = true
			}
			return nil
		}
		if n != nil && strings.HasPrefix(ev.detail, "accessible-role") {
			n.infoStale = true
		}
		return nil

	case "object:value-changed":
		if n != nil {
			n.valueOK = false
		}
		return elem(api.EventElementValueChanged, map[string]any{"kind": "value"})

	case "object:text-changed":
		if n != nil {
			n.textOK = false
		}
		return elem(api.EventElementValueChanged, map[string]any{"kind": "text", "change": ev.detail})

	case "object:children-changed":
		change, _, _ := strings.Cut(ev.detail, "/")
		var child dbus.ObjectPath
		if r, err := decodeRef(ev.data); err == nil && r.bus == ap.bus {
			child = r.path
		}
		if n != nil || ev.path == rootPath {
			ap.staleKids[ev.path] = true
		}
		var out []pcpEvent
		if ev.path == rootPath && child != "" {
			switch change {
			case "add":
				if _, ok := ap.surfaces[child]; !ok {
					ap.nextSurf++
					ap.surfaces[child] = ap.nextSurf
					out = append(out, ap.surfaceEventLocked(api.EventSurfaceCreated, child, ap.nextSurf))
				}
			case "remove":
				if num, ok := ap.surfaces[child]; ok {
					out = append(out, ap.surfaceEventLocked(api.EventSurfaceDestroyed, child, num))
					delete(ap.surfaces, child)
				}
			}
		}
		if change == "remove" && child != "" {
			if cn := ap.nodes[child]; cn != nil && cn.parent == ev.path {
				ap.pruneLocked(child)
				if n != nil {
					kids := n.children[:0:0]
					for _, c := range n.children {
						if c != child {
							kids = append(kids, c)
						}
					}
					n.children = kids
				}
			}
		}
		data := map[string]any{"change": change, "index": ev.d1}
		if child != "" {
			data["child_id"] = ElementID(ap.bus, child)
		}
		return append(out, elem(api.EventElementChildrenChanged, data)...)

	case "window:activate":
		if f := ap.focusEventLocked(sid, id, false); f != nil {
			return []pcpEvent{*f}
		}
		return nil

	case "focus:":
		if f := ap.focusEventLocked(sid, id, true); f != nil {
			return []pcpEvent{*f}
		}
		return nil

	case "object:bounds-changed":
		if n != nil {
			n.boundsAt = time.Time{}
		}
		return nil

	case "object:model-changed":
		if n != nil {
			ap.staleKids[ev.path] = true
		}
		return nil
	}
	// Everything else (window:create and :destroy, which children-changed
	// on the root also reports; caret moves; selection and active
	// descendant changes, whose state changes arrive on their own) leaves
	// the cache as it is.
	return nil
}

// focusEventLocked reports a surface.focus_changed when the focused
// surface is not the one last reported.
func (ap *app) focusEventLocked(sid, elementID string, isElement bool) *pcpEvent {
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
	return &pcpEvent{api.EventSurfaceFocusChanged, ap.id, sid, data}
}
