package core

import (
	"context"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/manifest"
)

// Detect reports what the daemon knows of an app (spec 001's detect()).
// An app registered by a manifest is detected at tier 1; detection
// through accessibility adapters comes with those adapters.
func (b *Broker) Detect(ctx context.Context, appID string) (*api.DetectionResult, error) {
	if appID == "" {
		return nil, api.MissingParam("app_id")
	}
	if err := manifest.ValidateAppID(appID); err != nil {
		return nil, err
	}
	res := &api.DetectionResult{AppID: appID}
	apps, err := b.Apps(ctx)
	if err != nil {
		return nil, err
	}
	for _, a := range apps.Apps {
		if a.AppID == appID && a.State != api.AppRevoked {
			res.Detected, res.Via, res.Tier, res.State, res.Capabilities = true, "manifest", 1, a.State, a.Capabilities
		}
	}
	return res, nil
}

// ElementTree returns the flat accessibility tree of an app (spec 001's
// ElementTree query). Element trees come from the AT-SPI2 adapter, which
// this daemon does not have yet, so it answers NO_ATSPI2_SUPPORT.
func (b *Broker) ElementTree(ctx context.Context, appID string) ([]api.ElementInfo, error) {
	if appID == "" {
		return nil, api.MissingParam("app_id")
	}
	return nil, api.Errorf(api.CodeNoATSPI2Support, map[string]any{"app_id": appID},
		"no accessibility adapter can give the element tree of %s", appID)
}

// CapabilityOwner finds the app that owns a capability in the registry
// (the first step of spec 001's dispatch, for requests that name only the
// capability).
func (b *Broker) CapabilityOwner(capabilityID string) (string, error) {
	if capabilityID == "" {
		return "", api.MissingParam("capability")
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if ce := b.caps[capabilityID]; ce != nil {
		return ce.AppID, nil
	}
	return "", api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": capabilityID}, "no capability %s", capabilityID)
}
