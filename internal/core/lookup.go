package core

import (
	"context"

	"github.com/pcp-dev/pcp/api"
)

// Capability returns a capability by id as query.capabilities
// shows it (available while its app is served, the trust level the
// user's policy gives it), or CAPABILITY_NOT_FOUND. Every face's and
// service's lookup by id is this one, so each answers an unknown id alike;
// each names its own wire field when the id is missing.
func (b *Broker) Capability(ctx context.Context, id string) (*api.Capability, error) {
	c, ok := b.LookupCapability(id)
	if !ok {
		c, ok = b.reachedCapability(ctx, id)
	}
	if !ok {
		return nil, api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": id}, "no capability %s", id)
	}
	return &c, nil
}
