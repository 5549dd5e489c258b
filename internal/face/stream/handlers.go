package stream

import (
	"context"

	"github.com/pcp-dev/pcp/api"
)

func (s *Server) pong(ctx context.Context) (*pong, error) {
	h, err := s.b.Health(ctx)
	if err != nil {
		return nil, err
	}
	return &pong{CapabilityCount: h.Capabilities, AppCount: h.Apps, SubscriptionCount: h.Subscriptions,
		JournalLength: h.JournalLength, UptimeSecs: h.UptimeMS / 1000}, nil
}

func (s *Server) registry(ctx context.Context, payload []byte) (*registryResponse, error) {
	var q registryQuery
	if err := decode(payload, &q); err != nil {
		return nil, err
	}
	switch q.Kind {
	case kindCapabilities:
		p := &api.QueryCapabilitiesParams{}
		if q.Filter != nil {
			p.AppID, p.Tier = q.Filter.AppID, q.Filter.Tier
		}
		r, err := s.b.QueryCapabilities(ctx, p)
		if err != nil {
			return nil, err
		}
		return &registryResponse{Kind: kindCapabilities, Caps: nonNil(r.Capabilities)}, nil
	case kindCapabilityByID:
		if q.ID == "" {
			return nil, api.MissingParam("id")
		}
		c, ok := s.b.LookupCapability(q.ID)
		if !ok {
			return nil, api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": q.ID}, "no capability %s", q.ID)
		}
		return &registryResponse{Kind: kindCapabilities, Caps: nonNil([]api.Capability{c})}, nil
	case kindApps:
		r, err := s.b.Apps(ctx)
		if err != nil {
			return nil, err
		}
		return &registryResponse{Kind: kindApps, Apps: nonNil(r.Apps)}, nil
	case kindEventHistory:
		limit := 0
		if q.Limit != nil {
			if *q.Limit < 0 {
				return nil, api.InvalidParam("limit", "must not be negative")
			}
			limit = *q.Limit
		}
		r, err := s.b.EventHistory(ctx, &api.EventsHistoryParams{Limit: limit})
		if err != nil {
			return nil, err
		}
		return &registryResponse{Kind: kindEvents, Events: nonNil(r.Events)}, nil
	case kindHealth:
		p, err := s.pong(ctx)
		if err != nil {
			return nil, err
		}
		return &registryResponse{Kind: kindHealth, Health: p}, nil
	case kindElementTree:
		if q.AppID == "" {
			return nil, api.MissingParam("app_id")
		}
		// Element trees come from the AT-SPI2 adapter, which is not
		// part of this daemon yet.
		return nil, api.Errorf(api.CodeNoATSPI2Support, map[string]any{"app_id": q.AppID}, "no accessibility adapter can give the element tree of %s", q.AppID)
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

// detect reports what the daemon knows of an app. Apps registered by a
// manifest are detected at tier 1; detection through accessibility
// adapters comes with them.
func (s *Server) detect(ctx context.Context, payload []byte) (*detectResponse, error) {
	var p detectRequest
	if err := decode(payload, &p); err != nil {
		return nil, err
	}
	if p.AppID == "" {
		return nil, api.MissingParam("app_id")
	}
	apps, err := s.b.Apps(ctx)
	if err != nil {
		return nil, err
	}
	res := detectionResult{AppID: p.AppID}
	for _, a := range apps.Apps {
		if a.AppID == p.AppID && a.State != api.AppRevoked {
			res.Detected, res.Via, res.Tier, res.State, res.Capabilities = true, "manifest", 1, a.State, a.Capabilities
		}
	}
	return &detectResponse{Result: res}, nil
}

// execute resolves the capability's owner in the registry and invokes it
// through the core pipeline, as spec 000's invoke.capability.
func (s *Server) execute(ctx context.Context, payload []byte) (*executeResponse, error) {
	var p executeRequest
	if err := decode(payload, &p); err != nil {
		return nil, err
	}
	if p.Capability == "" {
		return nil, api.MissingParam("capability")
	}
	appID := p.Target
	if appID == "" {
		c, ok := s.b.LookupCapability(p.Capability)
		if !ok {
			return nil, api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": p.Capability}, "no capability %s", p.Capability)
		}
		appID = c.AppID
	}
	res, err := s.b.InvokeCapability(ctx, &api.InvokeCapabilityParams{
		CapabilityID: p.Capability, AppID: appID, Source: api.SourceSystemIntelligence, Params: p.Params,
		Admin: p.Admin, ConfirmationID: p.ConfirmationID, WaitMS: p.WaitMS,
	})
	if err != nil {
		return nil, err
	}
	return &executeResponse{Result: res}, nil
}

func (s *Server) subscribe(ctx context.Context, payload []byte) (*api.SubscribeEventsResult, error) {
	var p subscribeRequest
	if err := decode(payload, &p); err != nil {
		return nil, err
	}
	types := p.Filter.EventTypes
	if len(types) == 0 {
		types = []string{api.EventAll}
	}
	return s.b.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: types, AppID: p.Filter.AppID, SurfaceID: p.Filter.SurfaceID})
}

func (s *Server) unsubscribe(ctx context.Context, payload []byte) (*api.UnsubscribeEventsResult, error) {
	var p unsubscribeRequest
	if err := decode(payload, &p); err != nil {
		return nil, err
	}
	return s.b.Unsubscribe(ctx, &api.UnsubscribeEventsParams{SubscriptionID: p.SubscriptionID})
}
