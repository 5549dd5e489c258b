package x11

import (
	"context"

	"github.com/jezek/xgb/xproto"
)

// Event types, as Watch delivers them. The daemon publishes the first
// four as surface.created, surface.destroyed, surface.title_changed and
// surface.focus_changed.
const (
	EventCreated      = "created"
	EventDestroyed    = "destroyed"
	EventTitleChanged = "title_changed"
	EventFocusChanged = "focus_changed"
	EventStateChanged = "state_changed"
)

// Event is one change of the top-level windows.
type Event struct {
	Type string
	// Surface is the window as it is now; for EventDestroyed, as it was
	// last seen. For EventFocusChanged it is the newly focused window,
	// nil when no window has the focus.
	Surface *Surface
	// Previous is the old title (EventTitleChanged), the previously
	// focused surface's id (EventFocusChanged, "" for none), or the old
	// state (EventStateChanged).
	Previous string
}

// watchBuffer is a subscriber's buffer; a subscriber that falls this far
// behind loses events (counted in the log).
const watchBuffer = 256

// Watch delivers the changes of the top-level windows until ctx ends or
// the connection closes; the channel is then closed. The first snapshot
// is the state at Open: windows that exist then are not reported as
// created.
func (c *Conn) Watch(ctx context.Context) <-chan Event {
	ch := make(chan Event, watchBuffer)
	c.mu.Lock()
	select {
	case <-c.done:
		c.mu.Unlock()
		close(ch)
		return ch
	default:
	}
	id := c.nextSub
	c.nextSub++
	c.subs[id] = ch
	c.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-c.done:
		}
		c.mu.Lock()
		if _, ok := c.subs[id]; ok {
			delete(c.subs, id)
			close(ch)
		}
		c.mu.Unlock()
	}()
	return ch
}

// events is the connection's one event reader. It only classifies
// events, so xgb's reader never waits for it (a reply cannot be stuck
// behind a full event queue, whatever another client makes the server
// send), and kicks the rescanner, which coalesces a burst of changes into
// one rescan.
func (c *Conn) events() {
	defer c.wg.Done()
	defer close(c.evDone)
	for {
		ev, xerr := c.xc.WaitForEvent()
		if ev == nil && xerr == nil {
			return // connection closed
		}
		if ev == nil {
			continue
		}
		c.pendMu.Lock()
		relevant := c.relevant(ev, c.pendDestroyed)
		c.pendMu.Unlock()
		if relevant {
			select {
			case c.kick <- struct{}{}:
			default:
			}
		}
	}
}

// rescanner rescans after each kick: the windows destroyed since the last
// rescan go with it.
func (c *Conn) rescanner() {
	defer c.wg.Done()
	for {
		select {
		case <-c.kick:
		case <-c.evDone:
			return
		}
		c.pendMu.Lock()
		destroyed := c.pendDestroyed
		c.pendDestroyed = map[xproto.Window]bool{}
		c.pendMu.Unlock()
		c.rescan(destroyed)
	}
}

// relevant reports whether an event may change what Surfaces returns.
// A keyboard mapping change marks the keymap for rereading. Windows
// destroyed are added to destroyed: the server may hand a destroyed
// window's id to a new window at once, and that one is another surface.
func (c *Conn) relevant(ev any, destroyed map[xproto.Window]bool) bool {
	switch e := ev.(type) {
	case xproto.MappingNotifyEvent:
		if e.Request == xproto.MappingKeyboard {
			c.keymapStale.Store(true)
		}
		return false
	case xproto.DestroyNotifyEvent:
		destroyed[e.Window] = true
		return true
	case xproto.PropertyNotifyEvent:
		switch e.Atom {
		case c.atoms["_NET_CLIENT_LIST"], c.atoms["_NET_ACTIVE_WINDOW"], c.atoms["_NET_WM_NAME"], xproto.AtomWmName,
			c.atoms["_NET_WM_STATE"], c.atoms["WM_STATE"]:
			return true
		}
	case xproto.CreateNotifyEvent, xproto.MapNotifyEvent, xproto.UnmapNotifyEvent, xproto.ReparentNotifyEvent:
		return true
	case xproto.FocusInEvent:
		return true
	}
	return false
}

// rescan takes a snapshot of the top-level windows and sends the changes
// since the last one to the subscribers. destroyed are the windows
// destroyed since: one listed again is a new window with a reused id.
func (c *Conn) rescan(destroyed map[xproto.Window]bool) {
	all, err := c.Surfaces(context.Background())
	if err != nil {
		return
	}
	active := c.activeWindow()
	now := make(map[xproto.Window]*Surface, len(all))
	for _, s := range all {
		now[xproto.Window(s.Window)] = s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var evs []Event
	for w := range destroyed {
		if old := c.known[w]; old != nil {
			evs = append(evs, Event{Type: EventDestroyed, Surface: old})
			delete(c.known, w)
			delete(c.watched, w)
		}
		if c.active == w {
			c.active = 0
		}
	}
	for w, s := range now {
		if !c.watched[w] {
			// Titles, states and destruction of each client window.
			xproto.ChangeWindowAttributes(c.xc, w, xproto.CwEventMask,
				[]uint32{xproto.EventMaskPropertyChange | xproto.EventMaskStructureNotify})
			c.watched[w] = true
		}
		old := c.known[w]
		switch {
		case old == nil:
			evs = append(evs, Event{Type: EventCreated, Surface: s})
		default:
			if old.Title != s.Title {
				evs = append(evs, Event{Type: EventTitleChanged, Surface: s, Previous: old.Title})
			}
			if old.Minimized != s.Minimized || old.Maximized != s.Maximized || old.Fullscreen != s.Fullscreen || old.Mapped != s.Mapped {
				evs = append(evs, Event{Type: EventStateChanged, Surface: s, Previous: old.State})
			}
		}
	}
	for w, s := range c.known {
		if now[w] == nil {
			evs = append(evs, Event{Type: EventDestroyed, Surface: s})
			delete(c.watched, w)
		}
	}
	// The focus moved, or the focused window became a surface (the
	// window manager focuses a window before it lists it).
	if active != c.active || (now[active] != nil) != c.activeKnown {
		prev := ""
		if c.active != 0 && c.activeKnown {
			prev = SurfaceID(uint32(c.active))
		}
		if active != c.active || now[active] != nil {
			evs = append(evs, Event{Type: EventFocusChanged, Surface: now[active], Previous: prev})
		}
		c.active, c.activeKnown = active, now[active] != nil
	}
	c.known = now
	if !c.primed {
		// The first snapshot is the state at Open.
		c.primed = true
		evs = nil
	}
	for _, e := range evs {
		for _, ch := range c.subs {
			select {
			case ch <- e:
			default:
				c.log.Warn("x11: a surface watcher fell behind; event dropped", "type", e.Type)
			}
		}
	}
}
