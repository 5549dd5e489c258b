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
// check its parameters, dispatch with a timeout, audit the outcome and
// publish capability.invoked. The reply is returned only after the audit
// entry is committed.
func (b *Broker) InvokeCapability(ctx context.Context, p *api.InvokeCapabilityParams) (*api.CapabilityResult, error) {
	switch {
	case p.CapabilityID == "":
		return nil, api.MissingParam("capability_id")
	case p.AppID == "":
		return nil, api.MissingParam("app_id")
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
	res, c, err := b.invoke(ctx, p)
	suppressed := 0
	if errors.Is(err, api.ErrRateLimited) {
		// A flood must not flood the audit log: one entry a second per
		// limit, counting the rejections it stands for.
		key := "conn:inproc"
		if s := SessionFrom(ctx); s != nil {
			key = "conn:" + s.ID
		}
		if scope, _ := api.AsError(err).DataMap()["scope"].(string); scope == "app" {
			key = "app:" + string(p.Source) + ":" + p.AppID
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
		AppID: p.AppID, CapabilityID: p.CapabilityID, ParamsDigest: audit.ParamsDigest(p.Params),
		Duration: b.now().Sub(start),
	}
	outcome := ""
	if err != nil {
		e := api.AsError(err)
		err = e
		outcome = e.Code.Name()
		detail := map[string]any{"error": e.Message}
		if suppressed > 0 {
			detail["suppressed_since_last_entry"] = suppressed
		}
		rec.Detail = detailJSON(detail)
	} else {
		outcome = res.Status
	}
	rec.Outcome = outcome
	if aerr := b.audit(ctx, rec); aerr != nil {
		return nil, aerr
	}
	if c != nil {
		b.publish(api.EventCapabilityInvoked, p.AppID, "", &invokedEvent{
			AppID: p.AppID, CapabilityID: p.CapabilityID, DurationMS: rec.Duration.Milliseconds(),
			Outcome: outcome, Source: string(p.Source),
		})
	}
	return res, err
}

// invoke resolves and dispatches; c is nil when no capability was found.
func (b *Broker) invoke(ctx context.Context, p *api.InvokeCapabilityParams) (*api.CapabilityResult, *api.Capability, error) {
	b.mu.RLock()
	ce := b.caps[p.CapabilityID]
	rev, revoked := b.revoked[p.AppID]
	_, appKnown := b.apps[p.AppID]
	var (
		c        api.Capability
		provider Provider
		builtin  bool
	)
	if ce != nil {
		c, provider, builtin = ce.Capability, ce.app.provider, ce.app.builtin
	}
	b.mu.RUnlock()
	if ce != nil {
		// The user's policy decides the trust level and timeout.
		c = b.effective(c, p.Source)
	}

	switch {
	case revoked:
		return nil, nil, api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": p.AppID, "revoked": true, "reason": rev.Reason}, "app %s is revoked", p.AppID)
	case !appKnown:
		return nil, nil, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": p.AppID}, "app %s is not registered", p.AppID)
	case ce == nil || c.AppID != p.AppID:
		return nil, nil, api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": p.CapabilityID, "app_id": p.AppID},
			"app %s has no capability %s", p.AppID, p.CapabilityID)
	}
	now := b.now()
	if err := b.limits.connection(SessionFrom(ctx), now); err != nil {
		return nil, &c, err
	}
	// The daemon's own services answer from memory; the connection limit
	// bounds them. The per-app limit protects apps.
	if !builtin {
		if err := b.limits.app(p.Source, c.AppID, now); err != nil {
			return nil, &c, err
		}
	}
	if err := manifest.CheckParams(c.ID, c.Parameters, p.Params); err != nil {
		return nil, &c, err
	}
	if provider == nil {
		// Checked before the trust level: the user is not asked to approve
		// what cannot run.
		return nil, &c, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": c.AppID, "running": false}, "app %s is not running", c.AppID)
	}
	switch c.TrustLevel {
	case api.TrustDeny:
		return nil, &c, api.Errorf(api.CodePermissionDenied, map[string]any{"capability_id": c.ID, "trust_level": c.TrustLevel}, "capability %s is denied by its trust level", c.ID)
	case api.TrustConfirm:
		if p.Admin {
			// The user asked for it themselves: there is nobody else to ask.
			break
		}
		if err := b.confirmGate(ctx, p, &c); err != nil {
			return nil, &c, err
		}
		if c.UndoWindowMS > 0 {
			res, err := b.deferJob(ctx, p, &c)
			return res, &c, err
		}
	}
	res, err := b.execute(ctx, &c, provider, p.Source, p.Params)
	return res, &c, err
}

// execute dispatches one invocation to its provider under the
// capability's timeout and maps transport failures onto the catalogue.
func (b *Broker) execute(ctx context.Context, c *api.Capability, provider Provider, source api.InvocationSource, params json.RawMessage) (*api.CapabilityResult, error) {
	if provider == nil {
		return nil, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": c.AppID, "running": false}, "app %s is not running", c.AppID)
	}
	timeout := DefaultTimeout
	if c.TimeoutMS > 0 {
		timeout = time.Duration(c.TimeoutMS) * time.Millisecond
	}
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := provider.Invoke(ictx, c, source, params)
	if err != nil {
		if ictx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return nil, api.Errorf(api.CodeExecutionTimeout, map[string]any{"capability_id": c.ID, "timeout_ms": timeout.Milliseconds()},
				"capability %s did not complete within %s", c.ID, timeout)
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, api.Errorf(api.CodeAppUnresponsive, map[string]any{"app_id": c.AppID, "reason": "connection closed during invocation"},
				"app %s went away during the invocation", c.AppID)
		}
		if ctx.Err() != nil {
			return nil, api.Errorf(api.CodeInternalError, map[string]any{"capability_id": c.ID}, "invocation abandoned: %v", ctx.Err())
		}
		return nil, err
	}
	if res == nil || !api.ValidStatus(res.Status) {
		status := ""
		if res != nil {
			status = res.Status
		}
		return nil, api.Errorf(api.CodeInternalError, map[string]any{"app_id": c.AppID, "status": status},
			"app %s returned an invalid result status %q", c.AppID, status)
	}
	return res, nil
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
// own connection: the daemon sends invoke.capability to the app.
type sessionProvider struct{ s *Session }

func (sp sessionProvider) Invoke(ctx context.Context, c *api.Capability, source api.InvocationSource, params json.RawMessage) (*api.CapabilityResult, error) {
	if sp.s.unresponsive.Load() {
		return nil, api.Errorf(api.CodeAppUnresponsive, map[string]any{"app_id": c.AppID, "reason": "no answer to liveness checks"},
			"app %s is not answering", c.AppID)
	}
	var res api.CapabilityResult
	err := sp.s.peer.Call(ctx, api.MethodInvokeCapability, &api.InvokeCapabilityParams{
		CapabilityID: c.ID, AppID: c.AppID, Source: source, Params: params,
	}, &res)
	if err != nil {
		return nil, err
	}
	return &res, nil
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
