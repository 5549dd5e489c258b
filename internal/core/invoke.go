package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/manifest"
)

// InvokeCapability runs a capability through the invocation pipeline
// (see pipeline): limit, resolve the capability, check its parameters,
// apply its trust level, dispatch (see dispatch.go) with a timeout, audit
// the outcome and publish capability.invoked. The reply is returned only
// after the audit entry is committed.
func (b *Broker) InvokeCapability(ctx context.Context, p *api.InvokeCapabilityParams) (*api.CapabilityResult, error) {
	switch {
	case p.CapabilityID == "":
		return nil, api.MissingParam("capability_id")
	case p.AppID == "":
		return nil, api.MissingParam("app_id")
	}
	return b.pipeline(ctx, p, false)
}

// Execute runs spec 001's ExecuteRequest: the owner is looked up in the registry (Target, when given, must be that owner, else CAPABILITY_NOT_FOUND), or detected for an unregistered capability.
//
// It is InvokeCapability's pipeline with the source SystemIntelligence;
// the audit entry names the owner found.
func (b *Broker) Execute(ctx context.Context, p *api.ExecuteRequest) (*api.CapabilityResult, error) {
	if p.Capability == "" {
		return nil, api.MissingParam("capability")
	}
	return b.pipeline(ctx, &api.InvokeCapabilityParams{
		CapabilityID: p.Capability, AppID: p.Target, Source: api.SourceSystemIntelligence, Params: p.Params,
		Admin: p.Admin, ConfirmationID: p.ConfirmationID, WaitMS: p.WaitMS,
	}, true)
}

// invocation is one call as it moves through the pipeline's stages
// (see pipeline); each stage fills in what it learns.
type invocation struct {
	p *api.InvokeCapabilityParams
	// anyOwner is set for Execute: p.AppID is then the optional target,
	// and empty means the registry's owner or the detected one.
	anyOwner bool
	sess     *Session
	start    time.Time
	// c is the capability in its effective form (the user's policy
	// applied); nil until resolved.
	c *api.Capability
	// t is where the invocation is sent, once resolved.
	t dispatchTarget
	// route is the route the audit entry names: the one chosen, then the
	// one taken; empty while none is.
	route string
	// ran is set once the invocation reached execution (dispatch, or a
	// job queued to run later). An invocation that fails before is a
	// refusal: nothing was done, and refusals are audited in aggregate.
	ran bool
}

// pipeline is the invocation pipeline shared by InvokeCapability and
// Execute. Its stages, in order: check the request's shape (not
// audited: nothing is known yet), the audit gate (fail closed), the
// connection's rate limit, resolve the capability and its route, the
// per-app rate limit, validate the parameters, apply the trust level,
// execute, and audit and publish the outcome.
func (b *Broker) pipeline(ctx context.Context, p *api.InvokeCapabilityParams, anyOwner bool) (*api.CapabilityResult, error) {
	if err := checkInvocation(ctx, p); err != nil {
		return nil, err
	}
	// Nothing runs while its audit entry could not be written.
	if err := b.auditAvailable(); err != nil {
		return nil, err
	}
	inv := &invocation{p: p, anyOwner: anyOwner, sess: SessionFrom(ctx), start: b.now()}
	res, err := b.run(ctx, inv)
	return b.record(ctx, inv, res, err)
}

// checkInvocation checks what a request must carry whatever it invokes.
func checkInvocation(ctx context.Context, p *api.InvokeCapabilityParams) error {
	switch {
	case p.Source == "":
		return api.MissingParam("source")
	case !p.Source.Valid():
		return api.InvalidParam("source", "unknown InvocationSource %q; the only source is %q", p.Source, api.SourceSystemIntelligence)
	}
	if len(p.Params) > 0 && string(p.Params) != "null" && firstByte(p.Params) != '{' {
		return api.InvalidParam("params", "must be an object")
	}
	if p.Admin && roleOf(ctx) != RoleUser {
		return api.Errorf(api.CodePermissionDenied, map[string]any{"field": "admin", "required_role": "user"},
			"admin: only the user may invoke as admin; use the control socket")
	}
	return nil
}

// run takes inv through the stages from the connection's limit to
// execution. The connection's limit comes first, so that no refusal,
// however early, costs more than a token: resolving may ask the
// accessibility adapters, which may walk a whole tree.
func (b *Broker) run(ctx context.Context, inv *invocation) (*api.CapabilityResult, error) {
	if err := b.limits.connection(inv.sess, inv.start); err != nil {
		return nil, err
	}
	if err := b.resolve(ctx, inv); err != nil {
		return nil, err
	}
	// The daemon's own services answer from memory; the connection limit
	// bounds them. The per-app limit protects apps and the platform.
	if inv.t.route != routeInProcess {
		if err := b.limits.app(inv.p.Source, inv.c.AppID, b.now()); err != nil {
			return nil, err
		}
	}
	if err := validate(inv); err != nil {
		return nil, err
	}
	if res, err := b.applyTrust(ctx, inv); res != nil || err != nil {
		return res, err
	}
	inv.ran = true
	res, route, err := b.dispatch(ctx, inv.c, inv.t, inv.p.Source, inv.p.Params)
	inv.route = route
	return res, err
}

// resolve finds the capability and its route: the registry's, or for an
// id the registry does not hold for the app named, the platform domain's
// refusal or the accessibility adapters' detection (see dispatch.go).
func (b *Broker) resolve(ctx context.Context, inv *invocation) error {
	p := inv.p
	b.mu.RLock()
	ce := b.caps[p.CapabilityID]
	appID := p.AppID
	if appID == "" && ce != nil {
		appID = ce.AppID
	}
	rev, revoked := b.revoked[appID]
	_, appKnown := b.apps[appID]
	owned := ce != nil && ce.AppID == appID
	var (
		c        api.Capability
		provider Provider
		builtin  bool
	)
	if owned {
		c, provider, builtin = ce.Capability, ce.app.provider, ce.app.builtin
	}
	access := b.access
	b.mu.RUnlock()

	switch {
	case revoked:
		return revokedError(appID, rev.Reason)
	case owned:
		// The user's policy decides the trust level and timeout.
		c = b.effective(c, p.Source, inv.sess.Agent())
		if level, ok := overriddenTrust(ctx, c.ID); ok {
			c.TrustLevel = level // the Tier 3 fallback's (tier3.go)
		}
		inv.c = &c
		t, err := routeOf(&c, provider, builtin, access)
		if err != nil {
			return err
		}
		inv.setTarget(t)
		return nil
	case ce != nil && !inv.anyOwner && !appKnown:
		return api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": appID}, "app %s is not registered", appID)
	case ce != nil:
		// Registered, but to another app than the one named.
		return api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": p.CapabilityID, "app_id": appID},
			"app %s has no capability %s", appID, p.CapabilityID)
	}
	c, t, err := b.unregistered(ctx, p, appID, appKnown, access)
	if err != nil {
		return err
	}
	inv.c = &c
	inv.setTarget(t)
	return nil
}

// setTarget records the route chosen. An accessibility route without
// adapters cannot be taken: the app is reported as not running, and no
// route is named.
func (inv *invocation) setTarget(t dispatchTarget) {
	inv.t, inv.route = t, t.route
	if t.route == routeAccessibility && len(t.access) == 0 {
		inv.route = ""
	}
}

func revokedError(appID, reason string) error {
	return api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": appID, "revoked": true, "reason": reason}, "app %s is revoked", appID)
}

// validate checks an invocation's parameters against the capability, and
// that its route can be taken. It runs before the trust level: the user
// is not asked to approve what cannot run.
func validate(inv *invocation) error {
	c, t := inv.c, inv.t
	// A detected capability declares no parameters: there is nothing to
	// check them against.
	if t.registered {
		if err := manifest.CheckParams(c.ID, c.Parameters, inv.p.Params); err != nil {
			return err
		}
	}
	if t.route == routeAccessibility && len(t.access) == 0 {
		return api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": c.AppID, "running": false}, "app %s is not running", c.AppID)
	}
	if t.provider == nil {
		if _, err := elementFromParams(inv.p.Params); err != nil {
			return err
		}
	}
	return nil
}

// applyTrust applies the capability's trust level: deny refuses; confirm
// asks the user, or consumes the approval the caller presents, and then
// queues a capability with an undo window as a job, whose deferred result
// it returns. A nil result and error mean: execute now.
func (b *Broker) applyTrust(ctx context.Context, inv *invocation) (*api.CapabilityResult, error) {
	c, p := inv.c, inv.p
	switch c.TrustLevel {
	case api.TrustDeny:
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"capability_id": c.ID, "trust_level": c.TrustLevel}, "capability %s is denied by its trust level", c.ID)
	case api.TrustConfirm:
		if p.Admin {
			// The user asked for it themselves: there is nobody else to ask.
			return nil, nil
		}
		if inv.t.route == routeNative {
			// The user is not asked to approve what the app would refuse.
			if err := validateNative(ctx, inv.t.provider, c, p.Params); err != nil {
				return nil, err
			}
		}
		if err := b.confirmGate(ctx, p, c, func() string { return b.describeInvocation(ctx, inv) }); err != nil {
			return nil, err
		}
		if c.UndoWindowMS > 0 {
			inv.ran = true
			return b.deferJob(ctx, p, c)
		}
	}
	return nil, nil
}

// record audits an invocation's outcome and publishes capability.invoked
// when a capability was resolved; the reply goes out only after the
// entry is committed. A refusal (an invocation that failed before it
// ran) is audited in aggregate: per connection, kind and error code, the
// first in each second is written, with the count of those suppressed
// since the last entry in "suppressed_since_last_entry"; the count of
// the others is written with the next entry, when the connection closes,
// or when the broker closes (see limits.go).
func (b *Broker) record(ctx context.Context, inv *invocation, res *api.CapabilityResult, err error) (*api.CapabilityResult, error) {
	p := inv.p
	appID := p.AppID
	if inv.c != nil {
		appID = inv.c.AppID
	}
	kind := api.AuditInvoke
	if p.Admin {
		kind = api.AuditInvokeAdmin
	}
	rec := audit.Record{
		Time: inv.start, Kind: kind, Source: string(p.Source), Actor: inv.sess.Actor(),
		AppID: appID, CapabilityID: p.CapabilityID, ParamsDigest: audit.ParamsDigest(p.Params),
		Duration: b.now().Sub(inv.start),
	}
	detail := api.AuditInvokeDetail{Route: inv.route}
	var e *api.Error
	if err != nil {
		e = api.AsError(err)
		err = e
		rec.Outcome = e.Code.Name()
		detail.Error = e.Message
	} else {
		rec.Outcome = res.Status
	}
	if detail != (api.AuditInvokeDetail{}) {
		rec.Detail = detailOf(&detail)
	}
	publish := inv.c != nil
	if e != nil && !inv.ran {
		write, suppressed := b.limits.shouldAudit(refusalKey(inv.sess, kind, e), inv.start, rec)
		switch {
		case !write && e.Code == api.CodeRateLimited:
			// A flood of refusals publishes no flood of events either.
			return nil, err
		case write:
			rec.Detail = withSuppressed(rec.Detail, suppressed)
			if aerr := b.audit(ctx, rec); aerr != nil {
				return nil, aerr
			}
		}
	} else if aerr := b.audit(ctx, rec); aerr != nil {
		return nil, aerr
	}
	if publish {
		b.publish(api.EventCapabilityInvoked, appID, "", &invokedEvent{
			Actor: rec.Actor, AppID: appID, CapabilityID: p.CapabilityID, DurationMS: rec.Duration.Milliseconds(),
			Outcome: rec.Outcome, Source: string(p.Source),
		})
	}
	return res, err
}

// unregistered resolves a capability id the registry does not hold for
// appID (empty: any app): ACTION_NOT_SUPPORTED in the platform domains,
// else the accessibility adapters' detection, else not found.
func (b *Broker) unregistered(ctx context.Context, p *api.InvokeCapabilityParams, appID string, appKnown bool, access []*accessEntry) (api.Capability, dispatchTarget, error) {
	in := appID
	if in == "" {
		in = p.CapabilityID
	}
	if d := platformDomain(in); d != "" {
		return api.Capability{}, dispatchTarget{}, api.Errorf(api.CodeActionNotSupported, map[string]any{"capability_id": p.CapabilityID, "domain": d},
			"the %s domain has no capability %s", d, p.CapabilityID)
	}
	if len(access) > 0 {
		ae, owner, err := detectOwner(ctx, access, p.CapabilityID, appID)
		if err != nil {
			return api.Capability{}, dispatchTarget{}, err
		}
		if ae != nil {
			b.mu.RLock()
			rev, revoked := b.revoked[owner]
			b.mu.RUnlock()
			if revoked {
				return api.Capability{}, dispatchTarget{}, revokedError(owner, rev.Reason)
			}
			c := b.effective(detected(p.CapabilityID, owner), p.Source, SessionFrom(ctx).Agent())
			return c, dispatchTarget{route: routeAccessibility + ":" + ae.id, access: []*accessEntry{ae}}, nil
		}
	}
	switch {
	case appID == "":
		return api.Capability{}, dispatchTarget{}, api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": p.CapabilityID}, "no capability %s", p.CapabilityID)
	case !appKnown:
		return api.Capability{}, dispatchTarget{}, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": appID}, "app %s is not registered", appID)
	}
	return api.Capability{}, dispatchTarget{}, api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": p.CapabilityID, "app_id": appID},
		"app %s has no capability %s", appID, p.CapabilityID)
}

// execute dispatches a registered capability whose app's provider is
// provider (nil: the accessibility route) under the capability's
// timeout. Queued jobs run through it when their undo window closes.
func (b *Broker) execute(ctx context.Context, c *api.Capability, provider Provider, source api.InvocationSource, params json.RawMessage) (*api.CapabilityResult, error) {
	t := dispatchTarget{provider: provider, registered: true}
	if provider == nil {
		t.route, t.access = routeAccessibility, b.accessAdapters()
	}
	res, _, err := b.dispatch(ctx, c, t, source, params)
	return res, err
}

// dispatch runs one route under the capability's timeout and maps
// transport failures onto the catalogue. It returns the route taken.
func (b *Broker) dispatch(ctx context.Context, c *api.Capability, t dispatchTarget, source api.InvocationSource, params json.RawMessage) (*api.CapabilityResult, string, error) {
	timeout := DefaultTimeout
	if c.TimeoutMS > 0 {
		timeout = time.Duration(c.TimeoutMS) * time.Millisecond
	}
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	route := t.route
	var (
		res *api.CapabilityResult
		err error
	)
	if t.provider != nil {
		res, err = t.provider.Invoke(ictx, c, source, params)
	} else {
		var id string
		res, id, err = viaAccessibility(ictx, c, t, source, params)
		if id != "" {
			route = routeAccessibility + ":" + id
		}
	}
	if err != nil {
		if ictx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return nil, route, api.Errorf(api.CodeExecutionTimeout, map[string]any{"capability_id": c.ID, "timeout_ms": timeout.Milliseconds()},
				"capability %s did not complete within %s", c.ID, timeout)
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, route, api.Errorf(api.CodeAppUnresponsive, map[string]any{"app_id": c.AppID, "reason": "connection closed during invocation"},
				"app %s went away during the invocation", c.AppID)
		}
		if ctx.Err() != nil {
			return nil, route, api.Errorf(api.CodeInternalError, map[string]any{"capability_id": c.ID}, "invocation abandoned: %v", ctx.Err())
		}
		return nil, route, err
	}
	if res == nil || !api.ValidStatus(res.Status) {
		status := ""
		if res != nil {
			status = res.Status
		}
		return nil, route, api.Errorf(api.CodeInternalError, map[string]any{"app_id": c.AppID, "status": status},
			"app %s returned an invalid result status %q", c.AppID, status)
	}
	return res, route, nil
}

func confirmationType(c *api.Capability) string {
	if c.ConfirmationType != "" {
		return c.ConfirmationType
	}
	return c.Name
}

// describe builds a human-readable description of an invocation from its
// actual parameters.
func describe(c *api.Capability, params json.RawMessage) string {
	d := c.Description
	if d == "" {
		d = c.ID
	}
	var m map[string]any
	if json.Unmarshal(params, &m) != nil || len(m) == 0 {
		return d
	}
	names := make([]string, 0, len(c.Parameters))
	for _, pd := range c.Parameters {
		names = append(names, pd.Name)
	}
	if len(c.Parameters) == 0 {
		// A detected (Tier 2) capability declares none: the user sees
		// every member the caller sent, the element and the value alike.
		for k := range m {
			names = append(names, k)
		}
		sort.Strings(names)
	}
	s := d + " ("
	n := 0
	for _, name := range names {
		v, ok := m[name]
		if !ok {
			continue
		}
		if n == maxDescribedParams {
			s += fmt.Sprintf(", and %d more", len(m)-n)
			break
		}
		if n > 0 {
			s += ", "
		}
		n++
		vb, _ := json.Marshal(v)
		if len(vb) > 80 {
			vb = append(vb[:77:77], "..."...)
		}
		s += name + "=" + string(vb)
	}
	return s + ")"
}

// maxDescribedParams bounds the parameters a confirmation's description
// lists.
const maxDescribedParams = 16

func firstByte(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

// sessionProvider invokes capabilities of an app that serves them on its
// own connection, through the connection's app channel.
type sessionProvider struct{ s *Session }

func (sp sessionProvider) Invoke(ctx context.Context, c *api.Capability, source api.InvocationSource, params json.RawMessage) (*api.CapabilityResult, error) {
	if sp.s.unresponsive.Load() {
		return nil, api.Errorf(api.CodeAppUnresponsive, map[string]any{"app_id": c.AppID, "reason": "no answer to liveness checks"},
			"app %s is not answering", c.AppID)
	}
	return sp.s.ep.App.Invoke(ctx, &api.InvokeCapabilityParams{
		CapabilityID: c.ID, AppID: c.AppID, Source: source, Params: params,
	})
}

// invokedEvent is the data of capability.invoked; a struct rather than a
// map because it is published on every invocation. Members are in the
// order a map would encode them, so subscribers see one shape.
type invokedEvent struct {
	// Actor is who invoked, as the audit entry names them
	// ("agent:uid=…,pid=…", "agent:<name>", "user:…").
	Actor        string `json:"actor"`
	AppID        string `json:"app_id"`
	CapabilityID string `json:"capability_id"`
	DurationMS   int64  `json:"duration_ms"`
	Outcome      string `json:"outcome"`
	Source       string `json:"source"`
}
