package core

import (
	"context"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/manifest"
)

// Detect reports what the daemon knows of an app (spec 001's detect()).
// An app registered by a manifest is detected at tier 1. Otherwise the
// accessibility adapters that implement
// DetectApp(ctx, appID) (*api.DetectionResult, error) are asked in
// priority order; the first that detects the app answers, with Via its
// adapter id and tier 2 unless it says otherwise. A revoked app is not
// detected.
func (b *Broker) Detect(ctx context.Context, appID string) (*api.DetectionResult, error) {
	if appID == "" {
		return nil, api.MissingParam("app_id")
	}
	if err := manifest.ValidateAppID(appID); err != nil {
		return nil, err
	}
	res := &api.DetectionResult{AppID: appID}
	for _, a := range b.registeredApps() {
		if a.AppID != appID {
			continue
		}
		if a.State == api.AppRevoked {
			return res, nil
		}
		res.Detected, res.Via, res.Tier, res.State, res.Capabilities = true, "manifest", 1, a.State, a.Capabilities
		return res, nil
	}
	found, via, _, err := firstAccess(ctx, b, func(ctx context.Context, d appDetector) (*api.DetectionResult, error) {
		r, err := d.DetectApp(ctx, appID)
		if err == nil && (r == nil || !r.Detected) {
			// Not this adapter's: ask the next one.
			return nil, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": appID}, "not detected")
		}
		return r, err
	})
	if err != nil {
		return nil, err
	}
	if via != "" {
		out := *found
		out.AppID, out.Detected, out.Via = appID, true, via
		if out.Tier == 0 {
			out.Tier = 2
		}
		return &out, nil
	}
	return res, nil
}

// ElementTree returns the flat accessibility tree of an app (spec 001's
// ElementTree query) from the first accessibility adapter, in priority
// order, that implements ElementTree(ctx, appID) ([]api.ElementInfo,
// error) and answers. An adapter that declines (see AccessibilityAdapter)
// passes the question on. When none answers, the first decline more
// telling than NO_ATSPI2_SUPPORT (APP_NOT_FOUND, say) is returned, else
// NO_ATSPI2_SUPPORT.
func (b *Broker) ElementTree(ctx context.Context, appID string) ([]api.ElementInfo, error) {
	if appID == "" {
		return nil, api.MissingParam("app_id")
	}
	els, id, declined, err := firstAccess(ctx, b, func(ctx context.Context, t elementTreer) ([]api.ElementInfo, error) {
		return t.ElementTree(ctx, appID)
	})
	switch {
	case err != nil:
		return nil, err
	case id != "":
		return els, nil
	case declined != nil:
		return nil, declined
	}
	return nil, api.Errorf(api.CodeNoATSPI2Support, map[string]any{"app_id": appID},
		"no accessibility adapter can give the element tree of %s", appID)
}
