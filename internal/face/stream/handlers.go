package stream

import (
	"context"

	"github.com/pcp-dev/pcp/api"
)

func (s *Server) pong(ctx context.Context) (*api.Pong, error) {
	h, err := s.b.Health(ctx)
	if err != nil {
		return nil, err
	}
	return &api.Pong{CapabilityCount: h.Capabilities, AppCount: h.Apps, SubscriptionCount: h.Subscriptions,
		JournalLength: h.JournalLength, UptimeSecs: h.UptimeMS / 1000}, nil
}

func (s *Server) registry(ctx context.Context, payload []byte) (*api.RegistryResponse, error) {
	var q api.RegistryQuery
	if err := decode(payload, &q); err != nil {
		return nil, err
	}
	switch q.Kind {
	case api.KindCapabilities:
		p := &api.QueryCapabilitiesParams{}
		if q.Filter != nil {
			p.AppID, p.Tier = q.Filter.AppID, q.Filter.Tier
		}
		r, err := s.b.QueryCapabilities(ctx, p)
		if err != nil {
			return nil, err
		}
		return &api.RegistryResponse{Kind: api.KindCapabilities, Caps: nonNil(r.Capabilities)}, nil
	case api.KindCapabilityByID:
		if q.ID == "" {
			return nil, api.MissingParam("id")
		}
		c, err := s.b.Capability(ctx, q.ID)
		if err != nil {
			return nil, err
		}
		return &api.RegistryResponse{Kind: api.KindCapabilities, Caps: nonNil([]api.Capability{*c})}, nil
	case api.KindApps:
		r, err := s.b.Apps(ctx)
		if err != nil {
			return nil, err
		}
		return &api.RegistryResponse{Kind: api.KindApps, Apps: nonNil(r.Apps)}, nil
	case api.KindEventHistory:
		limit := 0
		if q.Limit != nil {
			if *q.Limit < 0 {
				return nil, api.InvalidParam("limit", "must not be negative")
			}
			limit = *q.Limit
		}
		r, err := s.b.EventHistory(ctx, &api.EventsHistoryParams{Limit: limit, Before: q.Before})
		if err != nil {
			return nil, err
		}
		return &api.RegistryResponse{Kind: api.KindEvents, Events: nonNil(r.Events), Next: r.Next}, nil
	case api.KindHealth:
		p, err := s.pong(ctx)
		if err != nil {
			return nil, err
		}
		return &api.RegistryResponse{Kind: api.KindHealth, Health: p}, nil
	case api.KindElementTree:
		els, err := s.b.ElementTree(ctx, q.AppID)
		if err != nil {
			return nil, err
		}
		return &api.RegistryResponse{Kind: api.KindElements, Elements: nonNil(els)}, nil
	case "":
		return nil, api.MissingParam("kind")
	}
	return nil, api.InvalidParam("kind", "unknown registry query kind %q (Capabilities, CapabilityById, Apps, EventHistory, Health, ElementTree)", q.Kind)
}

// nonNil points at s, or at an empty list.
func nonNil[T any](s []T) *[]T {
	if s == nil {
		s = []T{}
	}
	return &s
}

func (s *Server) detect(ctx context.Context, payload []byte) (*api.DetectResponse, error) {
	var p api.DetectRequest
	if err := decode(payload, &p); err != nil {
		return nil, err
	}
	res, err := s.b.Detect(ctx, p.AppID)
	if err != nil {
		return nil, err
	}
	return &api.DetectResponse{Result: *res}, nil
}

// execute runs an ExecuteRequest through the core's dispatch
// (core.Broker.Execute): the target app, the registry's owner of the
// capability, or the app an accessibility adapter detects. The result's
// attachments are encoded as the request's attachments member chooses
// (attachments.go).
func (s *Server) execute(ctx context.Context, payload []byte) (*executeReply, error) {
	var p api.ExecuteRequest
	if err := decode(payload, &p); err != nil {
		return nil, err
	}
	budget := budgetOf(ctx)
	if err := checkMode(p.Attachments, budget != nil); err != nil {
		return nil, err
	}
	res, err := s.b.Execute(ctx, &p)
	if err != nil {
		return nil, err
	}
	return encodeAttachments(res, p.Attachments, budget)
}

func (s *Server) subscribe(ctx context.Context, payload []byte) (*api.SubscribeEventsResult, error) {
	var p api.StreamSubscribe
	if err := decode(payload, &p); err != nil {
		return nil, err
	}
	// What an empty filter means is the core's rule, the same on every face.
	return s.b.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: p.Filter.EventTypes, AppID: p.Filter.AppID, SurfaceID: p.Filter.SurfaceID})
}

func (s *Server) unsubscribe(ctx context.Context, payload []byte) (*api.UnsubscribeEventsResult, error) {
	var p api.UnsubscribeEventsParams
	if err := decode(payload, &p); err != nil {
		return nil, err
	}
	return s.b.Unsubscribe(ctx, &api.UnsubscribeEventsParams{SubscriptionID: p.SubscriptionID})
}
