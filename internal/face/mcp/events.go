package mcp

import (
	"context"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
)

// sink is a caller's core.EventSink. Its subscriptions live only while a
// pcp_events call waits: each has a one-event slot; the first matching
// event fills it and the rest are dropped (the call returns at the
// first).
//
// Concurrency: mu guards slots; the core calls Event from the
// subscription's pump while the waiting handler reads its slot.
type sink struct {
	mu    sync.Mutex
	slots map[string]chan *api.Event
}

func newSink() *sink { return &sink{slots: map[string]chan *api.Event{}} }

// slot returns the slot of subscription id, making it.
func (s *sink) slot(id string) chan *api.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.slots[id]
	if ch == nil {
		ch = make(chan *api.Event, 1)
		s.slots[id] = ch
	}
	return ch
}

func (s *sink) forget(id string) {
	s.mu.Lock()
	delete(s.slots, id)
	s.mu.Unlock()
}

// maxSlots bounds the slots of one caller: a slot made by an event that
// came after its waiter left is never read.
const maxSlots = 64

// Event implements core.EventSink. An event that arrives before its
// waiter has looked is kept in the slot.
func (s *sink) Event(subID string, ev *api.Event) error {
	s.mu.Lock()
	ch := s.slots[subID]
	if ch == nil && len(s.slots) < maxSlots {
		ch = make(chan *api.Event, 1)
		s.slots[subID] = ch
	}
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- ev:
		default:
		}
	}
	return nil
}

func (s *sink) EventsLost(*api.EventsLost) error               { return nil }
func (s *sink) SubscriptionEnded(*api.SubscriptionEnded) error { return nil }

type eventsArgs struct {
	Types     []string `json:"types,omitempty"`
	AppID     string   `json:"app_id,omitempty"`
	SurfaceID string   `json:"surface_id,omitempty"`
	Limit     int      `json:"limit,omitempty"`
	WaitMS    int64    `json:"wait_ms,omitempty"`
}

type eventsResult struct {
	Events []api.Event `json:"events"`
	// TimedOut is set when wait_ms passed with no matching event.
	TimedOut bool `json:"timed_out,omitempty"`
}

// events is events.history, filtered; or, with wait_ms, a subscription
// held until the first matching event or the wait's end.
func events(ctx context.Context, c *call) (any, error) {
	p, err := decode[eventsArgs](c)
	if err != nil {
		return nil, err
	}
	if p.Limit == 0 {
		p.Limit = 20
	}
	if p.WaitMS > 0 {
		return waitEvent(ctx, c, p)
	}
	want := map[string]bool{}
	for _, t := range p.Types {
		want[t] = true
	}
	out := &eventsResult{Events: []api.Event{}}
	var before int64
	// Read back at most a few pages of the journal to fill the limit.
	for page := 0; page < 5 && len(out.Events) < p.Limit; page++ {
		h, err := c.s.b.EventHistory(ctx, &api.EventsHistoryParams{Limit: 100, Before: before})
		if err != nil {
			return nil, err
		}
		var kept []api.Event
		for _, ev := range h.Events {
			if (len(want) == 0 || want[ev.Type]) && (p.AppID == "" || ev.AppID == p.AppID) && (p.SurfaceID == "" || ev.SurfaceID == p.SurfaceID) {
				kept = append(kept, ev)
			}
		}
		out.Events = append(kept, out.Events...)
		if h.Next == 0 {
			break
		}
		before = h.Next
	}
	if n := len(out.Events); n > p.Limit {
		out.Events = out.Events[n-p.Limit:]
	}
	return out, nil
}

func waitEvent(ctx context.Context, c *call, p *eventsArgs) (any, error) {
	types := p.Types
	if len(types) == 0 {
		types = []string{api.EventAll}
	}
	sub, err := c.s.b.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: types, AppID: p.AppID, SurfaceID: p.SurfaceID})
	if err != nil {
		return nil, err
	}
	defer func() {
		c.s.b.Unsubscribe(ctx, &api.UnsubscribeEventsParams{SubscriptionID: sub.SubscriptionID})
		c.cl.sink.forget(sub.SubscriptionID)
	}()
	// A client that gave a progress token learns that the wait is armed:
	// events published from now on are seen.
	if token := c.req.Params.GetProgressToken(); token != nil && c.req.Session != nil {
		c.req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: 0,
			Message: "waiting for the next matching event"})
	}
	t := time.NewTimer(time.Duration(p.WaitMS) * time.Millisecond)
	defer t.Stop()
	select {
	case ev := <-c.cl.sink.slot(sub.SubscriptionID):
		return &eventsResult{Events: []api.Event{*ev}}, nil
	case <-t.C:
		return &eventsResult{Events: []api.Event{}, TimedOut: true}, nil
	case <-ctx.Done():
		return nil, api.Errorf(api.CodeInternalError, nil, "the call was cancelled while waiting for an event")
	}
}
