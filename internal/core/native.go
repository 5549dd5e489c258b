package core

import (
	"context"
	"encoding/json"

	"github.com/pcp-dev/pcp/api"
)

// AppChannel is how the core reaches an app that serves its capabilities
// on its own connection (Endpoint.App): a JSON-RPC connection that called
// register.capability, or a Tier 1 per-app socket. Methods may be called
// concurrently.
type AppChannel interface {
	// Invoke runs one of the app's capabilities.
	Invoke(ctx context.Context, p *api.InvokeCapabilityParams) (*api.CapabilityResult, error)
	// Ping asks the app to answer, for the liveness checks. It returns
	// when the app answers (nil, or the error it answered with: either
	// shows it is alive), when ctx ends (ctx's error), or with an error
	// wrapping net.ErrClosed when the connection is gone.
	Ping(ctx context.Context) error
}

// Optional parts of the PcpServer contract (spec 001) that a connection
// serving an app may offer, each in its own Endpoint field. A connection
// on a Tier 1 per-app socket offers all of them; a JSON-RPC connection
// only Shutdown, and the broker does without the others.

// ParamsValidator asks the app whether params suit a capability without
// running it (ValidateParamsMsg). A nil error means valid.
type ParamsValidator interface {
	ValidateParams(ctx context.Context, capabilityID string, params json.RawMessage) error
}

// StateQuerier asks the app for its dynamic state (QueryState): a JSON
// object, narrowed to keys when any are given.
type StateQuerier interface {
	QueryState(ctx context.Context, keys []string) (json.RawMessage, error)
}

// Shutdowner tells the app to shut down, saying why where the wire can
// (AppShutdown), and ends the connection. The broker uses it when the
// user revokes the app.
type Shutdowner interface {
	Shutdown(reason string) error
}

// validateNative asks the app behind provider to check params, when the
// app can. It is called before the user is asked to confirm, so the user
// is not asked to approve what the app would refuse.
func validateNative(ctx context.Context, provider Provider, c *api.Capability, params json.RawMessage) error {
	sp, ok := provider.(sessionProvider)
	if !ok {
		return nil
	}
	v := sp.s.ep.Validate
	if v == nil {
		return nil
	}
	vctx, cancel := context.WithTimeout(ctx, AdapterTimeout)
	defer cancel()
	return v.ValidateParams(vctx, c.ID, params)
}
