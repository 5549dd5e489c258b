package core

import (
	"context"
	"encoding/json"

	"github.com/pcp-dev/pcp/api"
)

// Optional parts of the PcpServer contract (spec 001) that a Peer may
// implement. A connection on a Tier 1 per-app socket implements all of
// them; a JSON-RPC connection serving an app implements none, and the
// broker does without.

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

// Shutdowner tells the app to shut down, saying why (AppShutdown), and
// closes the connection. The broker uses it when the user revokes the app.
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
	v, ok := sp.s.peer.(ParamsValidator)
	if !ok {
		return nil
	}
	vctx, cancel := context.WithTimeout(ctx, AdapterTimeout)
	defer cancel()
	return v.ValidateParams(vctx, c.ID, params)
}
