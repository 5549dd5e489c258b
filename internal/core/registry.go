package core

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/manifest"
	"github.com/pcp-dev/pcp/internal/stored"
)

// ReservedPrefix is the app-id namespace of the daemon's own services.
const ReservedPrefix = "pcp."

// Provider executes capabilities of one app: an in-process service or a
// connection that serves the app.
type Provider interface {
	Invoke(ctx context.Context, c *api.Capability, source api.InvocationSource, params json.RawMessage) (*api.CapabilityResult, error)
}

type appEntry struct {
	id        string
	manifest  *api.Manifest
	raw       json.RawMessage
	publisher string
	signed    bool
	builtin   bool
	// provider executes the app's capabilities; nil while the app is not
	// running. owner is the session serving it, nil for builtins.
	provider Provider
	owner    *Session
	capIDs   []string
}

type capEntry struct {
	api.Capability
	app *appEntry
}

// indexAppLocked adds a to the registry. b.mu must be held (or the broker
// not yet shared).
func (b *Broker) indexAppLocked(a *appEntry) {
	a.capIDs = a.capIDs[:0]
	for _, d := range a.manifest.Capabilities {
		id := a.id + "." + d.Name
		b.caps[id] = &capEntry{Capability: api.Capability{
			ID: id, Name: d.Name, Tier: d.Tier, TrustLevel: d.TrustLevel, AppID: a.id,
			Description: d.Description, Parameters: d.Parameters,
			ConfirmationType: d.ConfirmationType, UndoWindowMS: d.UndoWindowMS, TimeoutMS: d.TimeoutMS,
		}, app: a}
		a.capIDs = append(a.capIDs, id)
	}
	b.apps[a.id] = a
}

func (b *Broker) unindexAppLocked(a *appEntry) {
	for _, id := range a.capIDs {
		delete(b.caps, id)
	}
	delete(b.apps, a.id)
}

// Service is a capability provider compiled into the daemon (spec 001's
// in-process dispatcher). Its app id must start with ReservedPrefix.
type Service interface {
	Provider
	AppID() string
	Manifest() *api.Manifest
}

// AddService registers an in-process service. Its capabilities are
// available at once and are not persisted.
func (b *Broker) AddService(svc Service) error {
	m := svc.Manifest()
	if !strings.HasPrefix(svc.AppID(), ReservedPrefix) {
		return api.Errorf(api.CodeManifestInvalid, nil, "service %s: app id must start with %q", svc.AppID(), ReservedPrefix)
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := manifest.Parse(svc.AppID(), raw); err != nil {
		return err
	}
	a := &appEntry{id: svc.AppID(), manifest: m, raw: raw, builtin: true, signed: true, publisher: "pcpd", provider: svc}
	b.mu.Lock()
	b.indexAppLocked(a)
	b.mu.Unlock()
	return nil
}

// RegisterCapability validates, verifies and registers a manifest. The
// calling session serves the capabilities unless params.Serve is false.
//
// Its stages: check the request's shape (not audited), the audit gate,
// the connection's rate limit, verify the manifest, check that the app
// may be registered by this caller, save it, index it, audit and
// announce. A registration refused at any stage is audited in aggregate,
// as the invocation pipeline's refusals are (see record).
func (b *Broker) RegisterCapability(ctx context.Context, p *api.RegisterCapabilityParams) (*api.RegisterCapabilityResult, error) {
	if err := checkRegistration(p); err != nil {
		return nil, err
	}
	if err := b.auditAvailable(); err != nil {
		return nil, err
	}
	r := &registration{p: p, sess: SessionFrom(ctx), start: b.now()}
	if err := b.register(ctx, r); err != nil {
		return nil, b.refuseRegistration(ctx, r, err)
	}
	rec := audit.Record{Kind: api.AuditRegister, Actor: r.sess.Actor(), AppID: p.AppID, Outcome: api.AuditSuccess, Duration: b.now().Sub(r.start),
		Detail: detailOf(&api.AuditRegisterDetail{CapabilityIDs: r.ids, Signed: r.signed, Publisher: r.publisher, Serve: r.serve})}
	if err := b.audit(ctx, rec); err != nil {
		return nil, err
	}
	b.announceRegistration(r)
	return &api.RegisterCapabilityResult{Registered: true, CapabilityIDs: r.ids}, nil
}

// registration is one register.capability as it moves through its
// stages; each fills in what it learns.
type registration struct {
	p     *api.RegisterCapabilityParams
	sess  *Session
	start time.Time

	m             *api.Manifest
	signed, serve bool
	publisher     string
	wasRunning    bool
	ids, removed  []string
	caps          []api.Capability
}

// checkRegistration checks what a request must carry.
func checkRegistration(p *api.RegisterCapabilityParams) error {
	if p.AppID == "" {
		return api.MissingParam("app_id")
	}
	if len(p.Manifest) == 0 || string(p.Manifest) == "null" {
		return api.MissingParam("manifest")
	}
	return manifest.ValidateAppID(p.AppID)
}

// register runs the stages from the rate limit to indexing.
func (b *Broker) register(ctx context.Context, r *registration) error {
	if err := b.limits.connection(r.sess, r.start); err != nil {
		return err
	}
	var err error
	if r.m, r.signed, r.publisher, err = b.checkManifest(r.p.AppID, r.p.Manifest); err != nil {
		return err
	}
	r.serve = (r.p.Serve == nil || *r.p.Serve) && r.sess != nil && r.sess.ep.App != nil
	if err := b.mayRegister(r); err != nil {
		return err
	}
	if err := b.store.SaveApp(ctx, stored.App{AppID: r.p.AppID, Manifest: r.p.Manifest, Publisher: r.publisher, Signed: r.signed, UpdatedAt: b.now()}); err != nil {
		return &api.Error{Code: api.CodeInternalError, Message: "saving manifest: " + err.Error()}
	}
	return b.indexRegistration(ctx, r)
}

// mayRegister refuses a revoked app, and an app another connection
// serves.
func (b *Broker) mayRegister(r *registration) error {
	appID := r.p.AppID
	b.mu.RLock()
	defer b.mu.RUnlock()
	if rev, ok := b.revoked[appID]; ok {
		return api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": appID, "revoked": true, "reason": rev.Reason},
			"app %s is revoked; the user must allow it again", appID)
	}
	if old := b.apps[appID]; old != nil && old.owner != nil && old.owner != r.sess {
		return api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": appID}, "app %s is served by another connection", appID)
	}
	return nil
}

// indexRegistration puts the saved manifest in the registry in place of
// the app's previous one, unless the app was revoked meanwhile.
func (b *Broker) indexRegistration(ctx context.Context, r *registration) error {
	appID, sess := r.p.AppID, r.sess
	a := &appEntry{id: appID, manifest: r.m, raw: r.p.Manifest, publisher: r.publisher, signed: r.signed}
	if r.serve {
		a.owner = sess
		a.provider = sessionProvider{sess}
	}
	b.mu.Lock()
	if rev, ok := b.revoked[appID]; ok {
		// Revoked while we saved: the revocation wins.
		b.mu.Unlock()
		b.store.DeleteApp(context.WithoutCancel(ctx), appID)
		return revokedError(appID, rev.Reason)
	}
	if r.serve {
		// A connection that closed while we saved must not be left
		// serving: closeSession has already run for it.
		sess.mu.Lock()
		gone := sess.closed
		sess.mu.Unlock()
		if gone {
			r.serve, a.owner, a.provider = false, nil, nil
		}
	}
	old := b.apps[appID]
	if old != nil {
		r.wasRunning = old.provider != nil
		b.unindexAppLocked(old)
	}
	b.indexAppLocked(a)
	if old != nil {
		for _, id := range old.capIDs {
			if _, still := b.caps[id]; !still {
				r.removed = append(r.removed, id)
			}
		}
	}
	if r.serve {
		sess.mu.Lock()
		sess.apps[appID] = true
		sess.mu.Unlock()
		sess.watchLiveness()
	}
	r.ids = append([]string(nil), a.capIDs...)
	r.caps = make([]api.Capability, 0, len(r.ids))
	for _, id := range r.ids {
		r.caps = append(r.caps, b.caps[id].Capability)
	}
	b.mu.Unlock()
	return nil
}

// refuseRegistration audits a refused registration in aggregate (see
// record) and returns the error to answer.
func (b *Broker) refuseRegistration(ctx context.Context, r *registration, err error) error {
	e := api.AsError(err)
	rec := audit.Record{Time: r.start, Kind: api.AuditRegister, Actor: r.sess.Actor(), AppID: r.p.AppID, Outcome: e.Code.Name(),
		Duration: b.now().Sub(r.start), Detail: detailOf(&api.AuditErrorDetail{Error: e.Message})}
	write, suppressed := b.limits.shouldAudit(refusalKey(r.sess, "register", e), r.start, rec)
	if !write {
		return e
	}
	rec.Detail = withSuppressed(rec.Detail, suppressed)
	if aerr := b.audit(ctx, rec); aerr != nil {
		return aerr
	}
	return e
}

// announceRegistration publishes what a registration changed.
func (b *Broker) announceRegistration(r *registration) {
	appID := r.p.AppID
	for _, id := range r.removed {
		b.publish(api.EventCapabilityUnregistered, appID, "", map[string]any{"capability_id": id, "app_id": appID, "reason": "removed from manifest"})
	}
	for _, c := range r.caps {
		b.publish(api.EventCapabilityRegistered, appID, "", map[string]any{
			"capability_id": c.ID, "app_id": appID, "name": c.Name, "tier": c.Tier, "trust_level": c.TrustLevel,
		})
	}
	if r.serve && !r.wasRunning {
		b.publish(api.EventAppConnected, appID, "", map[string]any{"app_id": appID})
	}
	b.aliasAccessible(appID, r.m.AccessibleName)
}

// QueryCapabilities lists capabilities, optionally of one app and tier,
// sorted by id: the registry's, and unless p.Registered the generic
// capabilities of the apps reached through accessibility (reach.go).
func (b *Broker) QueryCapabilities(ctx context.Context, p *api.QueryCapabilitiesParams) (*api.QueryCapabilitiesResult, error) {
	if p.Tier != nil && (*p.Tier < 1 || *p.Tier > 3) {
		return nil, api.InvalidParam("tier", "must be 1, 2 or 3, got %d", *p.Tier)
	}
	agent := SessionFrom(ctx).Agent()
	var reached []reachedApp
	extra := 0
	if !p.Registered && (p.Tier == nil || *p.Tier == 2) {
		reached = b.reachedApps(ctx)
		for _, r := range reached {
			if p.AppID == "" || r.AppID == p.AppID {
				extra += len(r.Capabilities)
			}
		}
	}
	b.mu.RLock()
	out := make([]api.Capability, 0, len(b.caps)+extra)
	for _, c := range b.caps {
		if p.AppID != "" && c.AppID != p.AppID {
			continue
		}
		if p.Tier != nil && c.Tier != *p.Tier {
			continue
		}
		cc := c.Capability
		cc.Available = c.app.provider != nil
		// The trust level the agent will meet, after the user's policy.
		cc.TrustLevel = b.effective(cc, api.SourceSystemIntelligence, agent).TrustLevel
		out = append(out, cc)
	}
	b.mu.RUnlock()
	// reachedApps leaves out the apps the registry holds.
	for _, r := range reached {
		if p.AppID == "" || r.AppID == p.AppID {
			out = b.appendReached(out, r, agent)
		}
	}
	slices.SortFunc(out, func(x, y api.Capability) int { return strings.Compare(x.ID, y.ID) })
	return &api.QueryCapabilitiesResult{Capabilities: out}, nil
}

// Apps lists registered, builtin and revoked applications, and those
// reached only through accessibility (reach.go).
func (b *Broker) Apps(ctx context.Context) (*api.AppsListResult, error) {
	out := b.registeredApps()
	for _, r := range b.reachedApps(ctx) {
		out = append(out, api.App{AppID: r.AppID, State: api.AppRunning, Tier: 2, Via: r.via, Capabilities: len(r.Capabilities)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AppID < out[j].AppID })
	return &api.AppsListResult{Apps: out}, nil
}

// registeredApps lists the registry's apps and the revoked ones, unsorted.
func (b *Broker) registeredApps() []api.App {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]api.App, 0, len(b.apps)+len(b.revoked))
	for _, a := range b.apps {
		st, tier := api.AppNotRunning, 1
		switch {
		case a.builtin:
			st, tier = api.AppBuiltin, 0
		case a.owner != nil && a.owner.unresponsive.Load():
			st = api.AppUnresponsive
		case a.provider != nil:
			st = api.AppRunning
		}
		out = append(out, api.App{AppID: a.id, State: st, Tier: tier, Capabilities: len(a.capIDs), Publisher: a.publisher, Signed: a.signed})
	}
	for _, r := range b.revoked {
		out = append(out, api.App{AppID: r.AppID, State: api.AppRevoked, RevokedAt: r.RevokedAt.UTC().Format(time.RFC3339), Reason: r.Reason})
	}
	return out
}

// RevokeApp removes an app's capabilities, ends its subscriptions and
// those scoped to it, closes its connections and keeps it revoked across
// restarts until the user allows it again.
func (b *Broker) RevokeApp(ctx context.Context, p *api.RevokeAppParams) (*api.RevokeAppResult, error) {
	if p.AppID == "" {
		return nil, api.MissingParam("app_id")
	}
	if err := manifest.ValidateAppID(p.AppID); err != nil {
		return nil, err
	}
	if strings.HasPrefix(p.AppID, ReservedPrefix) {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": p.AppID}, "the daemon's own services cannot be revoked")
	}
	if err := b.auditAvailable(); err != nil {
		return nil, err
	}
	start := b.now()
	// Every revocation is audited, even of an app already revoked: the
	// connection's limit bounds how many.
	if err := b.limits.connection(SessionFrom(ctx), start); err != nil {
		return nil, err
	}
	b.mu.RLock()
	_, known := b.apps[p.AppID]
	_, already := b.revoked[p.AppID]
	b.mu.RUnlock()
	if !known && !already {
		// An app reached through accessibility may be revoked too: then
		// no capability of it is detected until the user allows it.
		known = slices.ContainsFunc(b.reachedApps(ctx), func(r reachedApp) bool { return r.AppID == p.AppID })
	}
	if !known && !already {
		return nil, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": p.AppID}, "app %s is not registered", p.AppID)
	}
	at := b.now()
	if err := b.store.Revoke(ctx, p.AppID, p.Reason, at); err != nil {
		return nil, &api.Error{Code: api.CodeInternalError, Message: "recording revocation: " + err.Error()}
	}
	if err := b.store.DeleteApp(ctx, p.AppID); err != nil {
		return nil, &api.Error{Code: api.CodeInternalError, Message: "deleting manifest: " + err.Error()}
	}

	b.limits.forget(p.AppID)
	b.mu.Lock()
	b.revoked[p.AppID] = stored.Revocation{AppID: p.AppID, Reason: p.Reason, RevokedAt: at}
	var capIDs []string
	owners := map[*Session]bool{}
	if a := b.apps[p.AppID]; a != nil {
		capIDs = append(capIDs, a.capIDs...)
		b.unindexAppLocked(a)
		if a.owner != nil {
			owners[a.owner] = true
		}
	}
	b.mu.Unlock()

	b.mu.Lock()
	var ended []*subscription
	for _, sub := range b.subs {
		if sub.appID == p.AppID || owners[sub.sess] {
			ended = append(ended, sub)
		}
	}
	b.mu.Unlock()

	rec := audit.Record{Kind: api.AuditRevoke, Actor: SessionFrom(ctx).Actor(), AppID: p.AppID, Outcome: api.AuditSuccess, Duration: b.now().Sub(start),
		Detail: detailOf(&api.AuditRevokeDetail{Reason: p.Reason, CapabilityIDs: capIDs, TerminatedSubscriptions: len(ended)})}
	if err := b.audit(ctx, rec); err != nil {
		return nil, err
	}
	// Subscribers, those about to be ended included, learn of the
	// revocation before their subscriptions end.
	for _, id := range capIDs {
		b.publish(api.EventCapabilityUnregistered, p.AppID, "", map[string]any{"capability_id": id, "app_id": p.AppID, "reason": "revoked"})
	}
	b.publish(api.EventAppRevoked, p.AppID, "", map[string]any{"app_id": p.AppID, "reason": p.Reason})
	b.mu.Lock()
	for _, sub := range ended {
		delete(b.subs, sub.id)
	}
	b.mu.Unlock()
	for _, sub := range ended {
		if !owners[sub.sess] {
			sub.end("app " + p.AppID + " revoked")
		} else {
			sub.stop()
		}
	}
	b.aliasAccessible(p.AppID, "")
	for s := range owners {
		reason := "revoked by the user"
		if p.Reason != "" {
			reason += ": " + p.Reason
		}
		s.shutdown(reason)
	}
	return &api.RevokeAppResult{Revoked: true, TerminatedSubscriptions: len(ended)}, nil
}

// AllowApp lifts a revocation. Only the user may call it.
func (b *Broker) AllowApp(ctx context.Context, p *api.AppsAllowParams) (*api.AppsAllowResult, error) {
	if roleOf(ctx) != RoleUser {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"required_role": "user"}, "only the user may allow an app; use the control socket")
	}
	if p.AppID == "" {
		return nil, api.MissingParam("app_id")
	}
	if err := manifest.ValidateAppID(p.AppID); err != nil {
		return nil, err
	}
	if err := b.auditAvailable(); err != nil {
		return nil, err
	}
	was, err := b.store.Allow(ctx, p.AppID)
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternalError, Message: "lifting revocation: " + err.Error()}
	}
	b.mu.Lock()
	delete(b.revoked, p.AppID)
	b.mu.Unlock()
	rec := audit.Record{Kind: api.AuditAllow, Actor: SessionFrom(ctx).Actor(), AppID: p.AppID, Outcome: api.AuditSuccess,
		Detail: detailOf(&api.AuditAllowDetail{WasRevoked: was})}
	if err := b.audit(ctx, rec); err != nil {
		return nil, err
	}
	if was {
		b.publish(api.EventAppAllowed, p.AppID, "", map[string]any{"app_id": p.AppID})
	}
	return &api.AppsAllowResult{Allowed: true, WasRevoked: was}, nil
}

// LookupCapability returns a registered capability by id, with its
// effective trust level for the agent.
func (b *Broker) LookupCapability(id string) (api.Capability, bool) {
	b.mu.RLock()
	ce := b.caps[id]
	var c api.Capability
	if ce != nil {
		c = ce.Capability
		c.Available = ce.app.provider != nil
	}
	b.mu.RUnlock()
	if ce == nil {
		return c, false
	}
	c.TrustLevel = b.effective(c, api.SourceSystemIntelligence, "").TrustLevel
	return c, true
}
