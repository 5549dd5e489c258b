package rpc

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// endpoint is what a JSON-RPC connection offers the core: the core's
// typed roles, each encoded as spec 000's requests and notifications on
// the same connection (JSON-RPC allows requests both ways). A connection
// may serve apps and adapters and hold subscriptions all at once.
func endpoint(c *jsonrpc.Conn) core.Endpoint {
	return core.Endpoint{App: appChannel{c}, Shutdown: appChannel{c}, Adapter: adapter{c}, Events: events{c}, Closer: c}
}

// appChannel calls an app that registered its capabilities on this
// connection.
type appChannel struct{ c *jsonrpc.Conn }

func (a appChannel) Invoke(ctx context.Context, p *api.InvokeCapabilityParams) (*api.CapabilityResult, error) {
	var res api.CapabilityResult
	if err := a.c.Call(ctx, api.MethodInvokeCapability, p, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Ping is a health.check call; the answer, an error included, is not read.
func (a appChannel) Ping(ctx context.Context) error {
	return a.c.Call(ctx, api.MethodHealthCheck, nil, nil)
}

// Shutdown closes the connection once the requests it has in flight are
// answered (the revoking reply included). JSON-RPC carries no reason.
func (a appChannel) Shutdown(string) error {
	a.c.CloseWhenIdle()
	return nil
}

// adapter calls an adapter that called register.adapter on this
// connection, with the spec's query methods.
type adapter struct{ c *jsonrpc.Conn }

func (a adapter) Surface(ctx context.Context, id string) (*api.Surface, error) {
	return call[api.Surface](ctx, a.c, api.MethodQuerySurface, &api.QuerySurfaceParams{SurfaceID: id})
}

func (a adapter) Elements(ctx context.Context, p *api.QueryElementsParams) (*api.QueryElementsResult, error) {
	return call[api.QueryElementsResult](ctx, a.c, api.MethodQueryElements, p)
}

func (a adapter) Action(ctx context.Context, p *api.InvokeActionParams) (*api.InvokeActionResult, error) {
	return call[api.InvokeActionResult](ctx, a.c, api.MethodInvokeAction, p)
}

func (a adapter) Context(ctx context.Context) (*api.SessionContext, error) {
	return call[api.SessionContext](ctx, a.c, api.MethodQuerySessionContext, nil)
}

func call[R any](ctx context.Context, c *jsonrpc.Conn, method string, params any) (*R, error) {
	out := new(R)
	if err := c.Call(ctx, method, params, out); err != nil {
		return nil, err
	}
	return out, nil
}

// events pushes a subscription's events as notifications whose method is
// the event type.
type events struct{ c *jsonrpc.Conn }

// Event sends params of subscription_id, sequence and timestamp, then the
// event's own members: ev.Data, an encoded object shared by every
// subscriber, is spliced in after its opening brace, not re-encoded.
func (e events) Event(subID string, ev *api.Event) error {
	buf := make([]byte, 0, len(ev.Data)+96)
	buf = append(buf, `{"subscription_id":`...)
	buf = strconv.AppendQuote(buf, subID)
	buf = append(buf, `,"sequence":`...)
	buf = strconv.AppendInt(buf, ev.Sequence, 10)
	buf = append(buf, `,"timestamp":`...)
	buf = strconv.AppendInt(buf, ev.Timestamp, 10)
	if tail := ev.Data[1:]; len(tail) > 1 { // more than the closing brace
		buf = append(buf, ',')
		buf = append(buf, tail...)
	} else {
		buf = append(buf, '}')
	}
	return e.c.Notify(ev.Type, json.RawMessage(buf))
}

func (e events) EventsLost(m *api.EventsLost) error {
	return e.c.Notify(api.NotifyEventsLost, m)
}

func (e events) SubscriptionEnded(m *api.SubscriptionEnded) error {
	return e.c.Notify(api.NotifySubscriptionEnded, m)
}
