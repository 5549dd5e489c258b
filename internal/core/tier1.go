package core

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/manifest"
)

// AppSocketOpener opens Tier 1 per-app sockets (spec 001). The daemon
// provides it; a connection accepted on an app's socket becomes a Session
// whose Endpoint speaks the PcpServer contract.
type AppSocketOpener interface {
	// OpenAppSocket returns the path of appID's socket, opening it if
	// it is not open yet.
	OpenAppSocket(appID string) (string, error)
}

// SetAppSockets gives the broker the daemon's per-app sockets. Without
// them apps.socket answers that Tier 1 sockets are not offered.
func (b *Broker) SetAppSockets(o AppSocketOpener) {
	b.mu.Lock()
	b.appSockets = o
	b.mu.Unlock()
}

// AppSocket answers apps.socket: it checks the app's signed manifest as
// register.capability does, without registering anything, and returns the path
// of the app's per-app socket. The app registers by serving the manifest
// again on that socket, where the broker asks for it with GetManifest.
func (b *Broker) AppSocket(ctx context.Context, p *api.AppsSocketParams) (*api.AppsSocketResult, error) {
	if p.AppID == "" {
		return nil, api.MissingParam("app_id")
	}
	if len(p.Manifest) == 0 || string(p.Manifest) == "null" {
		return nil, api.MissingParam("manifest")
	}
	if _, _, _, err := b.checkManifest(p.AppID, p.Manifest); err != nil {
		return nil, err
	}
	b.mu.RLock()
	o := b.appSockets
	rev, revoked := b.revoked[p.AppID]
	b.mu.RUnlock()
	if revoked {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": p.AppID, "revoked": true, "reason": rev.Reason},
			"app %s is revoked; the user must allow it again", p.AppID)
	}
	if o == nil {
		return nil, api.Errorf(api.CodeActionNotSupported, map[string]any{"app_id": p.AppID},
			"this daemon offers no Tier 1 per-app sockets; register with register.capability instead")
	}
	path, err := o.OpenAppSocket(p.AppID)
	if err != nil {
		return nil, err
	}
	return &api.AppsSocketResult{AppID: p.AppID, Socket: path}, nil
}

// checkManifest validates an app's id and manifest and verifies its
// signature against the trust dir, or accepts it unsigned when the daemon
// allows that. It returns the parsed manifest, whether it was signed and
// by whom. register.capability and apps.socket share it.
func (b *Broker) checkManifest(appID string, raw json.RawMessage) (m *api.Manifest, signed bool, publisher string, err error) {
	if err := manifest.ValidateAppID(appID); err != nil {
		return nil, false, "", err
	}
	if strings.HasPrefix(appID, ReservedPrefix) {
		return nil, false, "", api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": appID}, "app id namespace %q is reserved for the daemon", ReservedPrefix)
	}
	if d := platformDomain(appID); d != "" {
		return nil, false, "", api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": appID, "domain": d}, "app id namespace %q is reserved for the platform adapter", d+".")
	}
	if m, err = manifest.Parse(appID, raw); err != nil {
		return nil, false, "", err
	}
	if m.Signature == "" && b.cfg.AllowUnsigned {
		return m, false, "", nil // development mode: accepted, recorded as unsigned
	}
	ts, _ := manifest.LoadTrustDir(b.cfg.TrustDir)
	if publisher, err = ts.Verify(appID, raw); err != nil {
		return nil, false, "", err
	}
	return m, true, publisher, nil
}

// AppState answers apps.state: the dynamic state of an app served on a
// Tier 1 socket (QueryState).
func (b *Broker) AppState(ctx context.Context, p *api.AppsStateParams) (*api.AppsStateResult, error) {
	if p.AppID == "" {
		return nil, api.MissingParam("app_id")
	}
	b.mu.RLock()
	a := b.apps[p.AppID]
	var owner *Session
	if a != nil {
		owner = a.owner
	}
	b.mu.RUnlock()
	switch {
	case a == nil:
		return nil, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": p.AppID}, "app %s is not registered", p.AppID)
	case owner == nil:
		return nil, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": p.AppID, "running": false}, "app %s is not running", p.AppID)
	}
	if err := b.limits.connection(SessionFrom(ctx), b.now()); err != nil {
		return nil, err
	}
	q := owner.ep.State
	if q == nil {
		return nil, api.Errorf(api.CodeActionNotSupported, map[string]any{"app_id": p.AppID},
			"app %s does not report its state: it is not served on a Tier 1 socket", p.AppID)
	}
	qctx, cancel := context.WithTimeout(ctx, AdapterTimeout)
	defer cancel()
	st, err := q.QueryState(qctx, p.Keys)
	if err != nil {
		if qctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return nil, api.Errorf(api.CodeAppUnresponsive, map[string]any{"app_id": p.AppID, "reason": "no answer to QueryState"},
				"app %s did not report its state within %s", p.AppID, AdapterTimeout)
		}
		return nil, err
	}
	return &api.AppsStateResult{AppID: p.AppID, State: st}, nil
}
