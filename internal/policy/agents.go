package policy

// Per-agent rules: [agents."<name>"] tables, for the contained agents
// that pcpctl agent run starts under a name (see the package doc).

type agentDoc struct {
	// TrustLevel is a floor for everything the agent invokes.
	TrustLevel trustSetting           `toml:"trust_level"`
	Apps       map[string]agentAppDoc `toml:"apps"`
	// Scomp overrides [scomp] for the agent's scomp sessions.
	Scomp scompDoc `toml:"scomp"`
}

type agentAppDoc struct {
	TrustLevel   trustSetting                  `toml:"trust_level"`
	Capabilities map[string]agentCapabilityDoc `toml:"capabilities"`
}

type agentCapabilityDoc struct {
	TrustLevel trustSetting `toml:"trust_level"`
}

var (
	agentAppKS = schema{"trust_level": leaf, "capabilities": &schema{"*": &schema{"trust_level": leaf}}}
	agentKS    = schema{"trust_level": leaf, "apps": &schema{"*": &agentAppKS}, "scomp": &scompKS}
)

// DecideFor is Decide for a request from the contained agent named agent
// ("" for none: Decide's answer). The agent's rules come after the
// app-wide ones and before the floors (see the package doc).
func (p *Policy) DecideFor(agent, appID, capName, source, declaredTrust string, declaredTimeoutMS int64) Decision {
	d := p.Decide(appID, capName, source, declaredTrust, declaredTimeoutMS)
	if agent == "" {
		return d
	}
	ag, ok := p.agents[agent]
	if !ok {
		return d
	}
	app, hasApp := ag.Apps[appID]
	capRule, hasCap := app.Capabilities[capName]
	replaced := false
	if hasApp && app.TrustLevel.set {
		d.TrustLevel = Valued[string]{app.TrustLevel.level, p.from("agents", agent, "apps", appID)}
		replaced = true
	}
	if hasCap && capRule.TrustLevel.set {
		d.TrustLevel = Valued[string]{capRule.TrustLevel.level, p.from("agents", agent, "apps", appID, "capabilities", capName)}
		replaced = true
	}
	if replaced {
		// The source floor applies to the agent's rules as to the others.
		if src, ok := p.sources[source]; ok && src.TrustLevel.set && rank(src.TrustLevel.level) > rank(d.TrustLevel.Value) {
			d.TrustLevel = Valued[string]{src.TrustLevel.level, p.from("sources", source)}
		}
	}
	if ag.TrustLevel.set && rank(ag.TrustLevel.level) > rank(d.TrustLevel.Value) {
		d.TrustLevel = Valued[string]{ag.TrustLevel.level, p.from("agents", agent)}
	}
	return d
}
