package core

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/policy"
)

// The user's policy file tightens or loosens what manifests declare (see
// package policy). The broker holds the policy in force in b.pol; a
// reload swaps it whole, so an invocation sees one policy throughout.

// effective applies the policy to a capability as declared: the trust
// level and timeout the broker enforces for source and the contained
// agent named agent ("" for none).
func (b *Broker) effective(c api.Capability, source api.InvocationSource, agent string) api.Capability {
	d := b.pol.Load().DecideFor(agent, c.AppID, c.Name, string(source), c.TrustLevel, c.TimeoutMS)
	c.TrustLevel = d.TrustLevel.Value
	c.TimeoutMS = d.Timeout.Value.Milliseconds()
	return c
}

// setPolicy puts p in force: trust levels and timeouts at once, rate
// limits with fresh buckets, the confirmation expiry for new
// confirmations. Values the file does not set keep the daemon's own
// (its flags).
func (b *Broker) setPolicy(p *policy.Policy) {
	rl := b.baseLimits
	l := p.Limits()
	if l.PerApp.From != policy.FromBuiltin {
		rl.PerApp = l.PerApp.Value
	}
	if l.PerAppBurst.From != policy.FromBuiltin {
		rl.PerAppBurst = l.PerAppBurst.Value
	}
	if l.PerConnection.From != policy.FromBuiltin {
		rl.PerConnection = l.PerConnection.Value
	}
	if l.PerConnectionBurst.From != policy.FromBuiltin {
		rl.PerConnectionBurst = l.PerConnectionBurst.Value
	}
	b.limits.reset(rl)
	b.mu.RLock()
	for _, s := range b.sessions {
		s.mu.Lock()
		s.limiter = newLimiter(rl.PerConnection, rl.PerConnectionBurst)
		s.mu.Unlock()
	}
	b.mu.RUnlock()
	b.pol.Store(p)
}

// ReloadPolicy reads the policy file again and puts it in force. A file
// that does not load leaves the policy in force unchanged. Only the user
// may ask (SIGHUP to the daemon is the other way).
func (b *Broker) ReloadPolicy(ctx context.Context) (*api.PolicyView, error) {
	if roleOf(ctx) != RoleUser {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"required_role": "user"}, "only the user reloads the policy; use the control socket")
	}
	path := b.pol.Load().Path()
	p, err := policy.Load(path)
	rec := audit.Record{Kind: api.AuditPolicy, Actor: SessionFrom(ctx).Actor(), Outcome: api.AuditPolicyLoaded, Detail: detailOf(&api.AuditPolicyDetail{Path: path})}
	if err != nil {
		rec.Outcome = api.AuditPolicyLoadFailed
		rec.Detail = detailOf(&api.AuditPolicyDetail{Path: path, Error: err.Error()})
		b.audit(ctx, rec)
		data := map[string]any{"field": "policy", "path": path}
		var pe *policy.Error
		if errors.As(err, &pe) {
			data["line"], data["key"] = pe.Line, pe.Key
		}
		return nil, api.Errorf(api.CodeInvalidParams, data, "%v (the policy in force is unchanged)", err)
	}
	b.setPolicy(p)
	if err := b.audit(ctx, rec); err != nil {
		return nil, err
	}
	return b.PolicyShow(ctx, &api.PolicyShowParams{})
}

// PolicyShow reports the policy in force, every value with where it came
// from, and the effective trust level and timeout of every capability.
func (b *Broker) PolicyShow(ctx context.Context, p *api.PolicyShowParams) (*api.PolicyView, error) {
	source := p.Source
	if source == "" {
		source = string(api.SourceSystemIntelligence)
	}
	if !api.InvocationSource(source).Valid() {
		return nil, api.InvalidParam("source", "unknown InvocationSource %q", source)
	}
	agent := p.Agent
	if agent == "" {
		agent = SessionFrom(ctx).Agent()
	} else if err := api.ValidateAgentName(agent); err != nil {
		return nil, api.InvalidParam("agent", "%v", api.CheckAgentName(agent))
	}
	b.mu.RLock()
	in := make([]policy.CapabilityInput, 0, len(b.caps))
	for _, c := range b.caps {
		in = append(in, policy.CapabilityInput{CapabilityID: c.ID, AppID: c.AppID, Name: c.Name, TrustLevel: c.TrustLevel, TimeoutMS: c.TimeoutMS})
	}
	b.mu.RUnlock()
	sort.Slice(in, func(i, j int) bool { return in[i].CapabilityID < in[j].CapabilityID })
	raw, err := json.Marshal(b.pol.Load().ViewFor(in, source, agent))
	if err != nil {
		return nil, err
	}
	var v api.PolicyView
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// confirmationExpiry is the policy's, unless the broker was configured
// with one.
func (b *Broker) confirmationExpiry() time.Duration {
	if b.cfg.ConfirmationTTL > 0 {
		return b.cfg.ConfirmationTTL
	}
	return b.pol.Load().ConfirmationExpiry().Value
}

// Policy is the user's policy in force (a reload replaces it whole), for
// the faces that apply limits of their own, such as the scomp face's
// eval limits.
func (b *Broker) Policy() *policy.Policy { return b.pol.Load() }
