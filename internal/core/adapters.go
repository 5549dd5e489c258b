package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

// Adapter reaches surfaces and their semantic elements: the AT-SPI2
// adapter, the platform adapter, or an external process bound with
// register.adapter. A surface the adapter does not know answers
// SURFACE_NOT_FOUND so the broker can ask the next adapter.
// Methods may be called concurrently.
type Adapter interface {
	Surface(ctx context.Context, surfaceID string) (*api.Surface, error)
	Elements(ctx context.Context, p *api.QueryElementsParams) (*api.QueryElementsResult, error)
	Action(ctx context.Context, p *api.InvokeActionParams) (*api.InvokeActionResult, error)
	// Context reports the surfaces the adapter sees and which has focus.
	Context(ctx context.Context) (*api.SessionContext, error)
}

// maxAdaptersPerSession bounds the adapters one connection serves: every
// surface query asks each adapter in turn.
const maxAdaptersPerSession = 16

type adapterEntry struct {
	info    api.RegisterAdapterParams
	adapter Adapter
	owner   *Session // nil for in-process adapters
}

// AddAdapter binds an in-process adapter. Adapters are asked in the order
// they were added.
func (b *Broker) AddAdapter(info api.RegisterAdapterParams, a Adapter) error {
	return b.bindAdapter(context.Background(), info, a, nil)
}

// RegisterAdapter binds the calling connection's adapter role
// (Endpoint.Adapter): the broker asks it for surfaces, elements, actions
// and its session context, and publishes the surface.* and element.*
// events it sends (AdapterEvent).
func (b *Broker) RegisterAdapter(ctx context.Context, p *api.RegisterAdapterParams) (*api.RegisterAdapterResult, error) {
	switch {
	case p.SurfaceType == "":
		return nil, api.MissingParam("surface_type")
	case p.AdapterID == "":
		return nil, api.MissingParam("adapter_id")
	case p.SupportedTiers == nil:
		return nil, api.MissingParam("supported_tiers")
	case len(p.SupportedTiers) == 0:
		return nil, api.InvalidParam("supported_tiers", "must list at least one tier")
	}
	for i, t := range p.SupportedTiers {
		if t < 1 || t > 3 {
			return nil, api.InvalidParam(fmt.Sprintf("supported_tiers[%d]", i), "must be 1, 2 or 3, got %d", t)
		}
	}
	sess := SessionFrom(ctx)
	if sess == nil || sess.ep.Adapter == nil {
		return nil, api.Errorf(api.CodeInvalidRequest, nil, "an adapter must be served on a connection")
	}
	// A binding is audited: the connection's limit bounds how many.
	if err := b.limits.connection(sess, b.now()); err != nil {
		return nil, err
	}
	if err := b.bindAdapter(ctx, *p, sess.ep.Adapter, sess); err != nil {
		return nil, err
	}
	return &api.RegisterAdapterResult{Bound: true, AdapterID: p.AdapterID}, nil
}

func (b *Broker) bindAdapter(ctx context.Context, info api.RegisterAdapterParams, a Adapter, owner *Session) error {
	b.mu.Lock()
	for _, ad := range b.adapters {
		if ad.info.AdapterID == info.AdapterID {
			b.mu.Unlock()
			return api.Errorf(api.CodeInvalidParams, map[string]any{"field": "adapter_id", "adapter_id": info.AdapterID}, "adapter_id: %s is already bound", info.AdapterID)
		}
	}
	if owner != nil {
		owner.mu.Lock()
		gone, n := owner.closed, len(owner.adapters)
		owner.mu.Unlock()
		if gone {
			b.mu.Unlock()
			return api.Errorf(api.CodeInvalidRequest, nil, "connection closed")
		}
		if n >= maxAdaptersPerSession {
			b.mu.Unlock()
			return api.Errorf(api.CodeRateLimited, map[string]any{"scope": "adapters", "limit": maxAdaptersPerSession},
				"a connection may serve %d adapters", maxAdaptersPerSession)
		}
	}
	b.adapters = append(b.adapters, &adapterEntry{info: info, adapter: a, owner: owner})
	b.mu.Unlock()
	if owner != nil {
		owner.mu.Lock()
		owner.adapters[info.AdapterID] = true
		owner.mu.Unlock()
	}
	err := b.audit(ctx, audit.Record{Kind: api.AuditAdapter, Actor: owner.Actor(), Outcome: api.AuditSuccess,
		Detail: detailOf(&api.AuditAdapterDetail{AdapterID: info.AdapterID, SurfaceType: info.SurfaceType, SupportedTiers: info.SupportedTiers})})
	if err != nil {
		return err
	}
	b.publish(api.EventAdapterRegistered, "", "", map[string]any{"adapter_id": info.AdapterID, "surface_type": info.SurfaceType, "supported_tiers": info.SupportedTiers})
	return nil
}

func (b *Broker) adapterList() []*adapterEntry {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return append([]*adapterEntry(nil), b.adapters...)
}

// AdapterTimeout bounds one call to an adapter.
const AdapterTimeout = 10 * time.Second

// firstAdapter asks each adapter in order until one knows the surface. An
// adapter that does not answer in time is reported as unresponsive; one
// whose connection went away is skipped.
func firstAdapter[T any](ctx context.Context, b *Broker, surfaceID string, f func(context.Context, Adapter) (T, error)) (T, error) {
	var zero T
	for _, ad := range b.adapterList() {
		actx, cancel := context.WithTimeout(ctx, AdapterTimeout)
		v, err := f(actx, ad.adapter)
		timedOut := actx.Err() == context.DeadlineExceeded && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			return v, nil
		case errors.Is(err, api.ErrSurfaceNotFound), errors.Is(err, net.ErrClosed):
			continue
		case timedOut:
			return zero, api.Errorf(api.CodeAppUnresponsive, map[string]any{"adapter_id": ad.info.AdapterID},
				"adapter %s did not answer within %s", ad.info.AdapterID, AdapterTimeout)
		}
		return zero, err
	}
	return zero, api.Errorf(api.CodeSurfaceNotFound, map[string]any{"surface_id": surfaceID}, "surface %s does not exist", surfaceID)
}

// QuerySurface returns a surface's metadata from the adapter that has it.
func (b *Broker) QuerySurface(ctx context.Context, p *api.QuerySurfaceParams) (*api.Surface, error) {
	if p.SurfaceID == "" {
		return nil, api.MissingParam("surface_id")
	}
	return firstAdapter(ctx, b, p.SurfaceID, func(ctx context.Context, a Adapter) (*api.Surface, error) { return a.Surface(ctx, p.SurfaceID) })
}

// QueryElements returns a surface's semantic tree, or the subtree at
// focus_id.
func (b *Broker) QueryElements(ctx context.Context, p *api.QueryElementsParams) (*api.QueryElementsResult, error) {
	if p.SurfaceID == "" {
		return nil, api.MissingParam("surface_id")
	}
	return firstAdapter(ctx, b, p.SurfaceID, func(ctx context.Context, a Adapter) (*api.QueryElementsResult, error) { return a.Elements(ctx, p) })
}

// InvokeAction performs a structural action on an element. Every action
// is audited.
func (b *Broker) InvokeAction(ctx context.Context, p *api.InvokeActionParams) (*api.InvokeActionResult, error) {
	switch {
	case p.ElementID == "":
		return nil, api.MissingParam("element_id")
	case p.Action == "":
		return nil, api.MissingParam("action")
	case p.SurfaceID == "":
		return nil, api.MissingParam("surface_id")
	}
	if err := b.auditAvailable(); err != nil {
		return nil, err
	}
	start := b.now()
	if err := b.limits.connection(SessionFrom(ctx), start); err != nil {
		return nil, err
	}
	var res *api.InvokeActionResult
	approved, err := b.gateAction(ctx, p)
	if err == nil {
		if approved {
			ctx = context.WithValue(ctx, actionApprovedKey{}, true)
		}
		res, err = firstAdapter(ctx, b, p.SurfaceID, func(ctx context.Context, a Adapter) (*api.InvokeActionResult, error) { return a.Action(ctx, p) })
	}
	if err != nil {
		if r, used, ferr := b.tier3Action(ctx, p, err); used {
			res, err = r, ferr
		}
	}
	rec := audit.Record{Time: start, Kind: api.AuditAction, Actor: SessionFrom(ctx).Actor(), Source: string(api.SourceSystemIntelligence),
		ParamsDigest: actionDigest(p), Duration: b.now().Sub(start), Outcome: api.AuditSuccess,
		Detail: detailOf(&api.AuditActionDetail{SurfaceID: p.SurfaceID, ElementID: p.ElementID, Action: p.Action})}
	if err != nil {
		rec.Outcome = api.AsError(err).Code.Name()
	}
	if aerr := b.audit(ctx, rec); aerr != nil {
		return nil, aerr
	}
	return res, err
}

// SessionContext merges what the adapters see with what the daemon knows
// of the desktop session.
func (b *Broker) SessionContext(ctx context.Context) (*api.SessionContext, error) {
	out := &api.SessionContext{SessionID: b.session, ActiveSurfaces: []string{}, SystemState: map[string]any{}}
	for k, env := range map[string]string{"session_type": "XDG_SESSION_TYPE", "desktop": "XDG_CURRENT_DESKTOP", "display": "DISPLAY", "wayland_display": "WAYLAND_DISPLAY"} {
		if v := os.Getenv(env); v != "" {
			out.SystemState[k] = v
		}
	}
	seen := map[string]bool{}
	var problems []string
	for _, ad := range b.adapterList() {
		actx, cancel := context.WithTimeout(ctx, AdapterTimeout)
		sc, err := ad.adapter.Context(actx)
		cancel()
		if err != nil {
			problems = append(problems, ad.info.AdapterID+": "+err.Error())
			continue
		}
		for _, id := range sc.ActiveSurfaces {
			if !seen[id] {
				seen[id] = true
				out.ActiveSurfaces = append(out.ActiveSurfaces, id)
			}
		}
		if out.FocusedSurface == nil && sc.FocusedSurface != nil {
			f := *sc.FocusedSurface
			out.FocusedSurface = &f
		}
		for k, v := range sc.SystemState {
			if _, taken := out.SystemState[k]; !taken {
				out.SystemState[k] = v
			}
		}
	}
	sort.Strings(out.ActiveSurfaces)
	if len(problems) > 0 {
		out.SystemState["adapter_errors"] = problems
	}
	return out, nil
}

// AdapterEvent publishes an event that an adapter served on a connection
// sent: a notification named by the event's type, with the event's
// members as params. It decides which notifications are adapter events:
// ok is false when method is outside the adapter events' namespaces
// (api.InAdapterEventNamespace), and the face serves the notification as
// any other message. Otherwise the notification is this call's, and it
// refuses with err (publishing nothing) an unknown event type, params that
// are not a JSON object, or a connection that serves no adapter.
func (b *Broker) AdapterEvent(ctx context.Context, method string, params json.RawMessage) (ok bool, err error) {
	if !api.InAdapterEventNamespace(method) {
		return false, nil
	}
	if !api.KnownEventType(method) {
		return true, api.Errorf(api.CodeInvalidParams, map[string]any{"event_type": method}, "unknown event type %q", method)
	}
	sess := SessionFrom(ctx)
	if sess == nil {
		return true, api.ErrPermissionDenied
	}
	sess.mu.Lock()
	isAdapter := len(sess.adapters) > 0
	sess.mu.Unlock()
	if !isAdapter {
		return true, api.Errorf(api.CodePermissionDenied, nil, "only adapters publish %s", method)
	}
	var data map[string]any
	if err := json.Unmarshal(params, &data); err != nil || data == nil {
		return true, api.InvalidParam("params", "%s: the event's members must be a JSON object", method)
	}
	appID, _ := data["app_id"].(string)
	surfaceID, _ := data["surface_id"].(string)
	// The daemon sets these when it delivers the event.
	delete(data, "subscription_id")
	delete(data, "sequence")
	delete(data, "timestamp")
	b.publish(method, appID, surfaceID, data)
	return true, nil
}

// Health reports the broker's state.
func (b *Broker) Health(ctx context.Context) (*api.HealthResult, error) {
	b.mu.RLock()
	res := &api.HealthResult{
		Status:               api.HealthOK,
		Adapters:             []api.AdapterHealth{},
		UptimeMS:             b.now().Sub(b.started).Milliseconds(),
		ActiveSessions:       len(b.sessions),
		PendingConfirmations: b.PendingConfirmations(),
		AllowUnsigned:        b.cfg.AllowUnsigned,
		Version:              Version,
		Capabilities:         len(b.caps),
		Apps:                 len(b.apps),
		Subscriptions:        len(b.subs),
	}
	ads := append([]*adapterEntry(nil), b.adapters...)
	b.mu.RUnlock()
	res.JournalLength = b.store.JournalLength()
	if res.AuditError = b.auditHealth(); res.AuditError != "" {
		res.Status = api.HealthDegraded
	}
	for _, ad := range ads {
		h := api.AdapterHealth{AdapterID: ad.info.AdapterID, SurfaceType: ad.info.SurfaceType, SupportedTiers: ad.info.SupportedTiers, Status: api.HealthOK}
		if hc, ok := ad.adapter.(interface{ Healthy(context.Context) error }); ok {
			if err := hc.Healthy(ctx); err != nil {
				h.Status, h.Detail = api.HealthDegraded, err.Error()
				res.Status = api.HealthDegraded
			}
		}
		res.Adapters = append(res.Adapters, h)
	}
	return res, nil
}
