package core

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/manifest"
)

// InvokeCapability runs a capability through the invocation pipeline:
// validate the request, resolve the capability, apply its trust level,
// check its parameters, dispatch (see dispatch.go) with a timeout, audit
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

// pipeline is InvokeCapability's body. anyOwner is set for Execute:
// p.AppID is then the optional target, and empty means the registry's
// owner or the detected one.
func (b *Broker) pipeline(ctx context.Context, p *api.InvokeCapabilityParams, anyOwner bool) (*api.CapabilityResult, error) {
	switch {
	case p.Source == "":
		return nil, api.MissingParam("source")
	case !p.Source.Valid():
		return nil, api.InvalidParam("source", "unknown InvocationSource %q; the only source is %q", p.Source, api.SourceSystemIntelligence)
	}
	if len(p.Params) > 0 && string(p.Params) != "null" && firstByte(p.Params) != '{' {
		return nil, api.InvalidParam("params", "must be an object")
	}
	if p.Admin && roleOf(ctx) != RoleUser {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"field": "admin", "required_role": "user"},
			"admin: only the user may invoke as admin; use the control socket")
	}
	start := b.now()
	res, c, route, err := b.invoke(ctx, p, anyOwner)
	appID := p.AppID
	if c != nil {
		appID = c.AppID
	}
	suppressed := 0
	if errors.Is(err, api.ErrRateLimited) {
		// A flood must not flood the audit log: one entry a second per
		// limit, counting the rejections it stands for.
		key := "conn:inproc"
		if s := SessionFrom(ctx); s != nil {
			key = "conn:" + s.ID
		}
		if scope, _ := api.AsError(err).DataMap()["scope"].(string); scope == "app" {
			key = "app:" + string(p.Source) + ":" + appID
		}
		var write bool
		if write, suppressed = b.limits.shouldAudit(key, start); !write {
			return nil, err
		}
	}
	kind := "invoke"
	if p.Admin {
		kind = "invoke_admin"
	}
	rec := audit.Record{
		Time: start, Kind: kind, Source: string(p.Source), Actor: SessionFrom(ctx).Actor(),
		AppID: appID, CapabilityID: p.CapabilityID, ParamsDigest: audit.ParamsDigest(p.Params),
		Duration: b.now().Sub(start),
	}
	outcome := ""
	detail := map[string]any{}
	if route != "" {
		detail["route"] = route
	}
	if err != nil {
		e := api.AsError(err)
		err = e
		outcome = e.Code.Name()
		detail["error"] = e.Message
		if suppressed > 0 {
			detail["suppressed_since_last_entry"] = suppressed
		}
	} else {
		outcome = res.Status
	}
	rec.Detail = detailJSON(detail)
	rec.Outcome = outcome
	if aerr := b.audit(ctx, rec); aerr != nil {
		return nil, aerr
	}
	if c != nil {
		b.publish(api.EventCapabilityInvoked, appID, "", &invokedEvent{
			AppID: appID, CapabilityID: p.CapabilityID, DurationMS: rec.Duration.Milliseconds(),
			Outcome: outcome, Source: string(p.Source),
		})
	}
	return res, err
}

// invoke resolves and dispatches; c is nil when no capability was found,
// route empty when the invocation failed before a route was chosen.
func (b *Broker) invoke(ctx context.Context, p *api.InvokeCapabilityParams, anyOwner bool) (*api.CapabilityResult, *api.Capability, string, error) {
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

	var (
		t           dispatchTarget
		connChecked bool
	)
	switch {
	case revoked:
		return nil, nil, "", api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": appID, "revoked": true, "reason": rev.Reason}, "app %s is revoked", appID)
	case owned:
		// The user's policy decides the trust level and timeout.
		c = b.effective(c, p.Source)
		var err error
		if t, err = routeOf(&c, provider, builtin, access); err != nil {
			return nil, &c, "", err
		}
	case ce != nil && !anyOwner && !appKnown:
		return nil, nil, "", api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": appID}, "app %s is not registered", appID)
	case ce != nil:
		// Registered, but to another app than the one named.
		return nil, nil, "", api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": p.CapabilityID, "app_id": appID},
			"app %s has no capability %s", appID, p.CapabilityID)
	default:
		if len(access) > 0 && platformDomain(appID) == "" {
			// Detection asks the adapters, which may walk a whole
			// accessibility tree: the connection's limit comes first, so
			// a flood of unknown ids does not reach them.
			if err := b.limits.connection(SessionFrom(ctx), b.now()); err != nil {
				return nil, nil, "", err
			}
			connChecked = true
		}
		var err error
		if c, t, err = b.unregistered(ctx, p, appID, appKnown, access); err != nil {
			return nil, nil, "", err
		}
	}
	route := t.route
	if t.route == routeAccessibility && len(t.access) == 0 {
		// No route can be taken; the app is reported as not running below.
		route = ""
	}

	now := b.now()
	if !connChecked {
		if err := b.limits.connection(SessionFrom(ctx), now); err != nil {
			return nil, &c, route, err
		}
	}
	// The daemon's own services answer from memory; the connection limit
	// bounds them. The per-app limit protects apps and the platform.
	if t.route != routeInProcess {
		if err := b.limits.app(p.Source, c.AppID, now); err != nil {
			return nil, &c, route, err
		}
	}
	// A detected capability declares no parameters: there is nothing to
	// check them against.
	if t.registered {
		if err := manifest.CheckParams(c.ID, c.Parameters, p.Params); err != nil {
			return nil, &c, route, err
		}
	}
	// Checked before the trust level: the user is not asked to approve
	// what cannot run.
	if t.route == routeAccessibility && len(t.access) == 0 {
		return nil, &c, route, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": c.AppID, "running": false}, "app %s is not running", c.AppID)
	}
	if t.provider == nil {
		if _, err := elementFromParams(p.Params); err != nil {
			return nil, &c, route, err
		}
	}
	switch c.TrustLevel {
	case api.TrustDeny:
		return nil, &c, route, api.Errorf(api.CodePermissionDenied, map[string]any{"capability_id": c.ID, "trust_level": c.TrustLevel}, "capability %s is denied by its trust level", c.ID)
	case api.TrustConfirm:
		if p.Admin {
			// The user asked for it themselves: there is nobody else to ask.
			break
		}
		if t.route == routeNative {
			// The user is not asked to approve what the app would refuse.
			if err := validateNative(ctx, t.provider, &c, p.Params); err != nil {
				return nil, &c, route, err
			}
		}
		if err := b.confirmGate(ctx, p, &c); err != nil {
			return nil, &c, route, err
		}
		if c.UndoWindowMS > 0 {
			res, err := b.deferJob(ctx, p, &c)
			return res, &c, route, err
		}
	}
	res, route, err := b.dispatch(ctx, &c, t, p.Source, p.Params)
	return res, &c, route, err
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
				return api.Capability{}, dispatchTarget{}, api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": owner, "revoked": true, "reason": rev.Reason}, "app %s is revoked", owner)
			}
			c := b.effective(detected(p.CapabilityID, owner), p.Source)
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
	s := d + " ("
	first := true
	for _, pd := range c.Parameters {
		v, ok := m[pd.Name]
		if !ok {
			continue
		}
		if !first {
			s += ", "
		}
		first = false
		vb, _ := json.Marshal(v)
		if len(vb) > 80 {
			vb = append(vb[:77:77], "..."...)
		}
		s += pd.Name + "=" + string(vb)
	}
	return s + ")"
}

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
	AppID        string `json:"app_id"`
	CapabilityID string `json:"capability_id"`
	DurationMS   int64  `json:"duration_ms"`
	Outcome      string `json:"outcome"`
	Source       string `json:"source"`
}
