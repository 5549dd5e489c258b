package scomp

import (
	"context"

	"encoding/json"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
)

// A builtin is a server binding of the face's own, beside the
// capabilities: the agent's Tier 2 reach (the session context, a
// surface's metadata and element tree, actions on elements) and the
// events. Their names have no "_" and no "$", which a capability's
// binding name always has (an id holds a "."), so the two never meet.
// Each is one core call with the session's identity, checked, limited
// and audited as on the JSON-RPC face.
type builtin struct {
	description   string
	input, output string
	effects       []string
	call          func(b *sandbox, params json.RawMessage) (any, error)
}

// builtinInputs are the builtins' input schemas, compiled: a call's
// parameters are checked against them before the core sees them.
var builtinInputs = func() map[string]*jsonschema.Schema {
	m := map[string]*jsonschema.Schema{}
	for name, bi := range builtins {
		sch, err := compileSchema(json.RawMessage(bi.input))
		if err != nil {
			panic("scomp: builtin " + name + ": " + err.Error())
		}
		m[name] = sch
	}
	return m
}()

// callBuiltin checks params against the builtin's input schema, then
// calls it.
func (b *sandbox) callBuiltin(name string, bi builtin, params json.RawMessage) (any, error) {
	if err := validate(builtinInputs[name], string(params)); err != nil {
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"binding": name, "param": "input"},
			"%s: the argument does not match its input schema: %v", name, err)
	}
	return bi.call(b, params)
}

var builtins = map[string]builtin{
	"sessionContext": {
		description: "The desktop session: the surfaces the adapters see, the focused one, and the session's state (query.session_context).",
		input:       `{"type":"object","properties":{},"additionalProperties":false}`,
		output:      `{"type":"object","properties":{"session_id":{"type":"string"},"focused_surface":{},"active_surfaces":{"type":"array","items":{"type":"string"}},"system_state":{"type":"object"}},"required":["session_id","active_surfaces"]}`,
		effects:     []string{"read"},
		call: func(b *sandbox, _ json.RawMessage) (any, error) {
			return b.c.s.b.SessionContext(b.sessionCtx())
		},
	},
	"querySurface": {
		description: "A surface's metadata: its app, title, state and geometry (query.surface).",
		input:       `{"type":"object","properties":{"surface_id":{"type":"string"}},"required":["surface_id"]}`,
		output:      `{"type":"object","properties":{"surface_id":{"type":"string"},"app_id":{"type":"string"},"title":{"type":"string"},"state":{"type":"string"},"tier":{"type":"integer"}},"required":["surface_id"]}`,
		effects:     []string{"read"},
		call: func(b *sandbox, raw json.RawMessage) (any, error) {
			var p api.QuerySurfaceParams
			if err := decodeParams(raw, &p); err != nil {
				return nil, err
			}
			return b.c.s.b.QuerySurface(b.sessionCtx(), &p)
		},
	},
	"queryElements": {
		description: "A surface's element tree, or the subtree at focus_id, from its accessibility adapter (query.elements).",
		input:       `{"type":"object","properties":{"surface_id":{"type":"string"},"focus_id":{"type":"string"}},"required":["surface_id"]}`,
		output:      `{"type":"object","properties":{"root":{"type":"object","properties":{"id":{"type":"string"},"role":{"type":"string"},"label":{"type":"string"},"children":{"type":"array"}}}},"required":["root"]}`,
		effects:     []string{"read"},
		call: func(b *sandbox, raw json.RawMessage) (any, error) {
			var p api.QueryElementsParams
			if err := decodeParams(raw, &p); err != nil {
				return nil, err
			}
			return b.c.s.b.QueryElements(b.sessionCtx(), &p)
		},
	},
	"act": {
		description: "Act on an element of a surface: by element_id (from queryElements), or by a target {role, name, text, states} the adapter resolves, which waits for the user's confirmation unless the policy relaxes it.",
		input:       `{"type":"object","properties":{"surface_id":{"type":"string"},"action":{"type":"string"},"element_id":{"type":"string"},"target":{"type":"object","properties":{"role":{"type":"string"},"name":{"type":"string"},"text":{"type":"string"},"states":{"type":"array","items":{"type":"string"}}}},"value":{}},"required":["surface_id","action"]}`,
		output:      `{"type":"object"}`,
		effects:     []string{"write", "confirm"},
		call: func(b *sandbox, raw json.RawMessage) (any, error) {
			var p api.ActParams
			if err := decodeParams(raw, &p); err != nil {
				return nil, err
			}
			res, err := b.c.s.b.Act(b.sessionCtx(), &p, b.c.s.confirmWait(), b.pauseClock)
			b.clock.resume()
			return res, err
		},
	},
	"nextEvent": {
		description: "The next PCP event that matches: published after this eval began and after the event the previous nextEvent of this eval returned. Resolves to the event, or to null when none came within timeout_ms (default 10000).",
		input:       `{"type":"object","properties":{"types":{"type":"array","items":{"type":"string"}},"app_id":{"type":"string"},"surface_id":{"type":"string"},"timeout_ms":{"type":"integer","minimum":1}}}`,
		output:      `{"oneOf":[{"type":"null"},{"type":"object","properties":{"sequence":{"type":"integer"},"type":{"type":"string"},"timestamp":{"type":"integer"},"app_id":{"type":"string"},"surface_id":{"type":"string"},"data":{"type":"object"}},"required":["sequence","type","timestamp","data"]}]}`,
		effects:     []string{"read"},
		call:        nextEvent,
	},
}

// builtinBindings are the builtins as server bindings, by name.
func builtinBindings() []serverBinding {
	var out []serverBinding
	for name, bi := range builtins {
		out = append(out, serverBinding{Binding: Binding{Name: name, Description: bi.description + " (pcpd)",
			Input: json.RawMessage(bi.input), Output: json.RawMessage(bi.output), Effects: bi.effects}})
	}
	slices.SortFunc(out, func(a, b serverBinding) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// sessionCtx is the eval's context carrying the session, for core calls.
func (b *sandbox) sessionCtx() context.Context { return b.sctx }

// Event buffering. A session subscribes to every event at its first
// nextEvent (a session that never asks costs the publishers nothing);
// the events arrive here (the connection's core.EventSink), and the
// newest maxBufferedEvents are kept for nextEvent. The events published
// after the eval began and before the subscription come from the
// journal. An eval sees only the events published after it began.

// maxBufferedEvents bounds the events a session keeps.
const maxBufferedEvents = 256

// Bounds of nextEvent's timeout_ms.
const (
	defaultEventWait = 10 * time.Second
	maxEventWait     = time.Hour
)

type eventBuffer struct {
	// subscribed is set once the session's subscription is open; only
	// the connection's worker uses it.
	subscribed bool

	mu   sync.Mutex
	evs  []*api.Event // by sequence, oldest first
	wake chan struct{}
}

// backfill merges evs (from the journal, oldest first) into the buffer,
// each sequence once, keeping the newest maxBufferedEvents.
func (e *eventBuffer) backfill(evs []*api.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	merged := make([]*api.Event, 0, len(evs)+len(e.evs))
	i, j := 0, 0
	for i < len(evs) || j < len(e.evs) {
		switch {
		case j == len(e.evs) || i < len(evs) && evs[i].Sequence < e.evs[j].Sequence:
			merged = append(merged, evs[i])
			i++
		case i < len(evs) && evs[i].Sequence == e.evs[j].Sequence:
			i++
		default:
			merged = append(merged, e.evs[j])
			j++
		}
	}
	if len(merged) > maxBufferedEvents {
		merged = merged[len(merged)-maxBufferedEvents:]
	}
	e.evs = merged
}

// subscribe opens the session's subscription, once, and fills the
// buffer from the journal with what was published since the eval began.
func (b *sandbox) subscribe() error {
	e := b.c.events
	if e.subscribed {
		return nil
	}
	ctx := b.sessionCtx()
	if _, err := b.c.s.b.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventAll}}); err != nil {
		return err
	}
	e.subscribed = true
	upto := b.c.s.b.EventSequence()
	if upto <= b.evCursor {
		return nil
	}
	h, err := b.c.s.b.EventHistory(ctx, &api.EventsHistoryParams{Limit: maxBufferedEvents, Before: upto + 1})
	if err != nil {
		return err
	}
	var since []*api.Event
	for i := range h.Events {
		if h.Events[i].Sequence > b.evCursor {
			since = append(since, &h.Events[i])
		}
	}
	e.backfill(since)
	return nil
}

func newEventBuffer() *eventBuffer { return &eventBuffer{wake: make(chan struct{})} }

// Event implements core.EventSink.
func (e *eventBuffer) Event(_ string, ev *api.Event) error {
	e.mu.Lock()
	if len(e.evs) == maxBufferedEvents {
		copy(e.evs, e.evs[1:])
		e.evs = e.evs[:len(e.evs)-1]
	}
	e.evs = append(e.evs, ev)
	close(e.wake)
	e.wake = make(chan struct{})
	e.mu.Unlock()
	return nil
}

// EventsLost implements core.EventSink: the events the core could not
// queue for the session are gone; nextEvent waits for the next.
func (e *eventBuffer) EventsLost(*api.EventsLost) error { return nil }

// SubscriptionEnded implements core.EventSink.
func (e *eventBuffer) SubscriptionEnded(*api.SubscriptionEnded) error { return nil }

// first is the oldest buffered event after sequence after that match
// passes, or nil and the channel closed at the next event.
func (e *eventBuffer) first(after int64, match func(*api.Event) bool) (*api.Event, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.evs {
		if ev.Sequence > after && match(ev) {
			return ev, nil
		}
	}
	return nil, e.wake
}

type nextEventParams struct {
	Types     []string `json:"types"`
	AppID     string   `json:"app_id"`
	SurfaceID string   `json:"surface_id"`
	TimeoutMS *int64   `json:"timeout_ms"`
}

func nextEvent(b *sandbox, raw json.RawMessage) (any, error) {
	var p nextEventParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	all := len(p.Types) == 0
	want := map[string]bool{}
	for i, t := range p.Types {
		switch {
		case t == api.EventAll:
			all = true
		case api.KnownEventType(t):
			want[t] = true
		default:
			return nil, api.InvalidParam("types["+strconv.Itoa(i)+"]", "unknown event type %q", t)
		}
	}
	wait := defaultEventWait
	if p.TimeoutMS != nil {
		if *p.TimeoutMS <= 0 || *p.TimeoutMS > maxEventWait.Milliseconds() {
			return nil, api.InvalidParam("timeout_ms", "must be 1 to %d", maxEventWait.Milliseconds())
		}
		wait = time.Duration(*p.TimeoutMS) * time.Millisecond
	}
	if b.c.events == nil {
		return nil, api.Errorf(api.CodeInternalError, nil, "the session receives no events")
	}
	if err := b.subscribe(); err != nil {
		return nil, err
	}
	match := func(ev *api.Event) bool {
		return (all || want[ev.Type]) && (p.AppID == "" || ev.AppID == p.AppID) && (p.SurfaceID == "" || ev.SurfaceID == p.SurfaceID)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		ev, next := b.c.events.first(b.evCursor, match)
		if ev != nil {
			b.evCursor = ev.Sequence
			return ev, nil
		}
		select {
		case <-next:
		case <-t.C:
			return nil, nil
		case <-b.ctx.Done():
			return nil, b.ctx.Err()
		}
	}
}
