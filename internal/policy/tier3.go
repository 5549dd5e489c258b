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
