package atspi

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
)

// Applications that leave the bus.
//
// Reading or watching an application must never crash or hang it: every
// call goes through app.run, which sends only what the toolkit's quirks
// allow, each call bounded by CallTimeout. Should an application still
// die while it is being asked (the bus answers the pending call with
// NoReply, "recipient disconnected", or the peer-to-peer connection
// closes), the adapter
//
//   - logs it at error level (Config.Log) with the app id, bus name,
//     toolkit and version, and the call and object path it was answering;
//   - answers the read that was in progress APP_UNRESPONSIVE with data
//     {"app_id", "reason": "crashed", "call", "accessible_path"};
//   - forgets the application and reports it through Config.OnEvent:
//     surface.destroyed for each of its windows, then app.disconnected
//     with {"app_id", "bus_name", "reason": "crashed", "call",
//     "accessible_path", "toolkit"}.
//
// An application that leaves the bus otherwise (it quits) is reported the
// same way with reason "exited" and no call; either way it is never
// dropped silently.

// sigAppGone is the name of the signal queued for the event loop to
// report an application gone (departed), once the calls in flight to it
// have ended; its Sender is empty, which no signal from the bus has.
const sigAppGone = "pcp.atspi.AppGone"

// isDisconnected reports whether err says the application left the bus
// before it answered the call.
func isDisconnected(err error) bool {
	var de dbus.Error
	if !errors.As(err, &de) || de.Name != "org.freedesktop.DBus.Error.NoReply" || len(de.Body) == 0 {
		return false
	}
	msg, _ := de.Body[0].(string)
	return strings.Contains(strings.ToLower(msg), "disconnected")
}

// isCrashed reports whether err is reportCrash's.
func isCrashed(err error) bool {
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != api.CodeAppUnresponsive {
		return false
	}
	m, _ := pe.Data.(map[string]any)
	return m["reason"] == "crashed"
}

func (a *Adapter) log() *slog.Logger {
	if a.cfg.Log != nil {
		return a.cfg.Log
	}
	return slog.Default()
}

// beginRun and endRun count the batches in flight to the application, so
// that its departure is reported after their answers said why.
func (ap *app) beginRun() {
	ap.mu.Lock()
	ap.running++
	ap.mu.Unlock()
}

func (ap *app) endRun() {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	ap.running--
	if ap.running == 0 && ap.idle != nil {
		close(ap.idle)
		ap.idle = nil
	}
}

// whenIdle is closed once no batch is in flight to the application; nil
// if none is now.
func (ap *app) whenIdle() <-chan struct{} {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	if ap.running == 0 {
		return nil
	}
	if ap.idle == nil {
		ap.idle = make(chan struct{})
	}
	return ap.idle
}

// reportCrash records that ap died while answering r, logs it, and
// returns the error of the read in progress. The departure is reported
// by the event loop: now, if the bus has not said yet that the
// application left, else when that news is handled (gone).
func (a *Adapter) reportCrash(ap *app, r *req) error {
	ap.mu.Lock()
	first := ap.crashed == ""
	if first {
		ap.crashed, ap.crashedPath = r.method, string(r.path)
	}
	ap.mu.Unlock()
	if first {
		a.log().Error("atspi: application crashed during a call", "app_id", ap.id, "bus_name", ap.bus,
			"toolkit", ap.toolkit, "toolkit_version", ap.version, "call", r.method, "accessible_path", string(r.path), "error", r.err)
		a.mu.Lock()
		still := a.apps[ap.bus] == ap
		if still {
			a.dropLocked(ap)
		}
		a.mu.Unlock()
		if still {
			a.queue.DeliverSignal("", "", &dbus.Signal{Name: sigAppGone, Body: []any{ap}})
		}
	}
	return api.Errorf(api.CodeAppUnresponsive, map[string]any{"app_id": ap.id, "reason": "crashed", "call": r.method, "accessible_path": string(r.path)},
		"%s crashed while answering %s on %s", ap.id, r.method, r.path)
}

// gone reports ap, which the bus said left it and which the adapter has
// dropped. With calls in flight the report waits for their answers (at
// most twice CallTimeout), which say whether it crashed during one.
// Called from the event loop.
func (a *Adapter) gone(ap *app) {
	idle := ap.whenIdle()
	if idle == nil {
		a.departed(ap)
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTimer(2 * a.cfg.CallTimeout)
		defer t.Stop()
		select {
		case <-idle:
		case <-t.C:
		case <-a.life.Done():
			return
		}
		a.queue.DeliverSignal("", "", &dbus.Signal{Name: sigAppGone, Body: []any{ap}})
	}()
}

// departed reports an application that left the bus: its windows
// destroyed, then app.disconnected. Called from the event loop.
func (a *Adapter) departed(ap *app) {
	ap.mu.Lock()
	var evs []pcpEvent
	for p, n := range ap.surfaces {
		evs = append(evs, ap.surfaceEventLocked(api.EventSurfaceDestroyed, p, n))
	}
	data := map[string]any{"app_id": ap.id, "bus_name": ap.bus, "reason": "exited", "toolkit": ap.toolkit}
	if ap.crashed != "" {
		data["reason"], data["call"], data["accessible_path"] = "crashed", ap.crashed, ap.crashedPath
	}
	ap.mu.Unlock()
	evs = append(evs, pcpEvent{typ: api.EventAppDisconnected, app: ap.id, data: data})
	a.emit(evs)
}

// goneSignal handles a signal of sigAppGone.
func (a *Adapter) goneSignal(s *dbus.Signal) {
	if len(s.Body) == 1 {
		if ap, ok := s.Body[0].(*app); ok {
			a.departed(ap)
		}
	}
}
