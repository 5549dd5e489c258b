package policy

import "github.com/pcp-dev/pcp/api"

// DefaultTier3 is the trust level of Tier 3 for an app when the file
// sets none: input simulated at an element's bounds asks the user.
const DefaultTier3 = api.TrustConfirm

// Tier3 is the trust level under which the daemon may reach app appID
// through Tier 3, input simulated at an element's place on the screen,
// when its accessibility gives the element no action: apps."a".tier3,
// else defaults.tier3, else DefaultTier3. "deny" forbids it.
func (p *Policy) Tier3(appID string) Valued[string] {
	if app, ok := p.apps[appID]; ok && app.Tier3.set {
		return Valued[string]{app.Tier3.level, p.from("apps", appID)}
	}
	if p.defaults.Tier3.set {
		return Valued[string]{p.defaults.Tier3.level, p.from("defaults")}
	}
	return Valued[string]{DefaultTier3, FromBuiltin}
}

// Tier3For is Tier3(appID) for the invocations of agent from source,
// raised (never lowered) by what the file says of them: the source's
// trust floor, the agent's rule for app appID, and the agent's floor. An
// agent the user allows only confirmed actions, or denies an app, gets no
// less through Tier 3 than through the app's own capabilities.
func (p *Policy) Tier3For(agent, appID, source string) Valued[string] {
	v := p.Tier3(appID)
	raise := func(level, from string) {
		if rank(level) > rank(v.Value) {
			v = Valued[string]{level, from}
		}
	}
	if src, ok := p.sources[source]; ok && src.TrustLevel.set {
		raise(src.TrustLevel.level, p.from("sources", source))
	}
	if agent == "" {
		return v
	}
	ag, ok := p.agents[agent]
	if !ok {
		return v
	}
	if app, ok := ag.Apps[appID]; ok && app.TrustLevel.set {
		raise(app.TrustLevel.level, p.from("agents", agent, "apps", appID))
	}
	if ag.TrustLevel.set {
		raise(ag.TrustLevel.level, p.from("agents", agent))
	}
	return v
}
