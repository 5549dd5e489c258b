package core

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/pcp-dev/pcp/api"
)

// EventSink delivers a session's subscribed events to its connection
// (Endpoint.Events); each face encodes them in its own wire format. One
// subscription's calls come from its own goroutine, in order; the calls
// of a session's different subscriptions may be concurrent. A call may
// block while the peer is slow, which holds up that subscription alone;
// an error (the connection is gone) ends its delivery.
type EventSink interface {
	// Event delivers ev to subscription subID. ev is shared by every
	// subscriber: read it, never modify it. ev.Data is the event's own
	// members as one JSON object.
	Event(subID string, ev *api.Event) error
	// EventsLost reports events dropped since the last delivery because
	// the subscription's queue was full.
	EventsLost(m *api.EventsLost) error
	// SubscriptionEnded reports that the daemon ended the subscription.
	SubscriptionEnded(m *api.SubscriptionEnded) error
}

// subscription delivers matching events to one session. Publishers never
// block on it: events go into a bounded queue, and when the queue is full
// they are counted as lost. A pump goroutine, owned by the subscription,
// drains the queue into the session's EventSink and reports losses with
// EventsLost before the next event it delivers.
type subscription struct {
	id        string
	sess      *Session
	all       bool
	types     map[string]bool
	appID     string
	surfaceID string

	queue    chan *api.Event
	lost     atomic.Int64
	stopOnce sync.Once
	quit     chan struct{}
	// endReason, when set before stop, is sent as subscription.ended.
	endReason string
}

func (s *subscription) matches(ev *api.Event) bool {
	if !s.all && !s.types[ev.Type] {
		return false
	}
	if s.appID != "" && ev.AppID != s.appID {
		return false
	}
	if s.surfaceID != "" && ev.SurfaceID != s.surfaceID {
		return false
	}
	return true
}

func (s *subscription) offer(ev *api.Event) {
	select {
	case s.queue <- ev:
	default:
		s.lost.Add(1)
	}
}

func (s *subscription) stop() { s.stopOnce.Do(func() { close(s.quit) }) }

// end stops the subscription and tells the peer why.
func (s *subscription) end(reason string) {
	s.stopOnce.Do(func() {
		s.endReason = reason
		close(s.quit)
	})
}

func (s *subscription) pump(now func() int64) {
	for {
		select {
		case <-s.quit:
			if s.endReason != "" {
				s.drain()
				s.sess.ep.Events.SubscriptionEnded(&api.SubscriptionEnded{SubscriptionID: s.id, Reason: s.endReason, Timestamp: now()})
			}
			return
		case ev := <-s.queue:
			if s.deliver(ev) != nil {
				return
			}
		}
	}
}

// drain delivers the events queued before the subscription ended.
func (s *subscription) drain() {
	for {
		select {
		case ev := <-s.queue:
			if s.deliver(ev) != nil {
				return
			}
		default:
			return
		}
	}
}

// deliver sends one event, preceded by events.lost if events were dropped
// since the last delivery.
func (s *subscription) deliver(ev *api.Event) error {
	if n := s.lost.Swap(0); n > 0 {
		if err := s.sess.ep.Events.EventsLost(&api.EventsLost{SubscriptionID: s.id, Lost: n, Timestamp: ev.Timestamp}); err != nil {
			return err
		}
	}
	return s.sess.ep.Events.Event(s.id, ev)
}

// maxSubscriptionsPerSession bounds one connection's subscriptions (each
// has a queue and a goroutine).
const maxSubscriptionsPerSession = 64

// Subscribe starts delivering events of the given types, optionally
// scoped to an app or a surface, to the calling session.
func (b *Broker) Subscribe(ctx context.Context, p *api.SubscribeEventsParams) (*api.SubscribeEventsResult, error) {
	sess := SessionFrom(ctx)
	if sess == nil || sess.ep.Events == nil {
		return nil, api.Errorf(api.CodeInvalidRequest, nil, "subscriptions need a connection to deliver events on")
	}
	if p.EventTypes == nil {
		return nil, api.MissingParam("event_types")
	}
	if len(p.EventTypes) == 0 {
		return nil, api.InvalidParam("event_types", "must name at least one event type")
	}
	sub := &subscription{sess: sess, types: map[string]bool{}, appID: p.AppID, surfaceID: p.SurfaceID,
		queue: make(chan *api.Event, b.cfg.SubscriberQueue), quit: make(chan struct{})}
	for i, t := range p.EventTypes {
		switch {
		case t == api.EventAll:
			sub.all = true
		case api.KnownEventType(t):
			sub.types[t] = true
		default:
			return nil, api.InvalidParam("event_types["+strconv.Itoa(i)+"]", "unknown event type %q", t)
		}
	}
	active := make([]string, 0, len(sub.types))
	if sub.all {
		active = append(active, api.EventTypes...)
	} else {
		for t := range sub.types {
			active = append(active, t)
		}
		sort.Strings(active)
	}
	sub.id = b.newID("sub")
	b.mu.Lock()
	sess.mu.Lock()
	closed := sess.closed
	sess.mu.Unlock()
	if closed {
		b.mu.Unlock()
		return nil, api.Errorf(api.CodeInvalidRequest, nil, "connection closed")
	}
	n := 0
	for _, s := range b.subs {
		if s.sess == sess {
			n++
		}
	}
	if n >= maxSubscriptionsPerSession {
		b.mu.Unlock()
		return nil, api.Errorf(api.CodeRateLimited, map[string]any{"scope": "subscriptions", "limit": maxSubscriptionsPerSession},
			"a connection may hold %d subscriptions; unsubscribe one first", maxSubscriptionsPerSession)
	}
	b.subs[sub.id] = sub
	b.mu.Unlock()
	go sub.pump(func() int64 { return b.now().Unix() })
	return &api.SubscribeEventsResult{SubscriptionID: sub.id, ActiveEvents: active}, nil
}

// Unsubscribe cancels one of the calling session's subscriptions.
func (b *Broker) Unsubscribe(ctx context.Context, p *api.UnsubscribeEventsParams) (*api.UnsubscribeEventsResult, error) {
	if p.SubscriptionID == "" {
		return nil, api.MissingParam("subscription_id")
	}
	sess := SessionFrom(ctx)
	b.mu.Lock()
	sub, ok := b.subs[p.SubscriptionID]
	if ok && sub.sess != sess {
		ok = false // another connection's subscription is not ours to cancel
	}
	if ok {
		delete(b.subs, p.SubscriptionID)
	}
	b.mu.Unlock()
	if !ok {
		return &api.UnsubscribeEventsResult{Cancelled: false}, nil
	}
	sub.stop()
	return &api.UnsubscribeEventsResult{Cancelled: true}, nil
}

// Publish records an event in the journal and offers it to every matching
// subscription. data must encode to a JSON object. It never blocks on a
// subscriber.
func (b *Broker) Publish(eventType, appID, surfaceID string, data any) {
	b.publish(eventType, appID, surfaceID, data)
}

func (b *Broker) publish(eventType, appID, surfaceID string, data any) {
	raw, err := json.Marshal(data)
	if err != nil || len(raw) < 2 || raw[0] != '{' {
		b.log.Error("event data is not an object; dropped", "type", eventType, "err", err)
		return
	}
	// One event value, encoded once, is shared by every subscriber.
	b.mu.RLock()
	defer b.mu.RUnlock()
	b.evMu.Lock()
	defer b.evMu.Unlock()
	b.evSeq++
	ev := &api.Event{Sequence: b.evSeq, Type: eventType, Timestamp: b.now().Unix(), AppID: appID, SurfaceID: surfaceID, Data: raw}
	b.store.AppendEvent(*ev)
	for _, s := range b.subs {
		if s.matches(ev) {
			s.offer(ev)
		}
	}
}

// EventHistory returns the newest events of the journal, oldest first, a
// page at a time (see api.EventsHistoryParams).
func (b *Broker) EventHistory(ctx context.Context, p *api.EventsHistoryParams) (*api.EventsHistoryResult, error) {
	evs, next, err := readPage(ctx, b, p.Limit, p.Before, 100, "the event journal", b.store.EventsBefore, func(ev *api.Event) int64 { return ev.Sequence })
	if err != nil {
		return nil, err
	}
	return &api.EventsHistoryResult{Events: evs, Next: next}, nil
}

// EventSequence is the sequence number of the newest event published, 0
// before the first: events published after the call have greater ones.
func (b *Broker) EventSequence() int64 {
	b.evMu.Lock()
	defer b.evMu.Unlock()
	return b.evSeq
}
