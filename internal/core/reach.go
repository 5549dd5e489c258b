package core

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/manifest"
)

// Tier 2 apps in the listings. An application that no manifest registers
// but an accessibility adapter reaches is an app all the same: the agent
// can act on it (its capabilities are detected when invoked, see
// dispatch.go), so apps.list shows it (state running, tier 2, via the
// adapter) and query.capabilities shows the generic capabilities the
// adapter offers on it (`atspi.gnome-calculator.activate`, ...), with the
// trust level the user's policy gives them (confirm unless it says
// otherwise). Every face's listing is the broker's, so pcpctl apps and
// caps, the MCP tools and the inspection service's describe_registry show
// the same. The registry's own entries come first: an app registered or
// revoked under the same id is shown as the registry has it.

// AppLister is implemented by accessibility adapters that can list the
// applications they reach, each with the generic capabilities the adapter
// offers on it: capability declarations whose name, after the app id,
// makes a capability id the adapter's Detect claims. It must not call
// back into the broker.
type AppLister interface {
	ReachableApps(ctx context.Context) ([]ReachableApp, error)
}

// ReachableApp is one application an accessibility adapter reaches.
type ReachableApp struct {
	AppID        string
	Capabilities []api.CapabilityDecl
}

// reachTimeout bounds one adapter's listing: a listing is asked on every
// apps.list and query.capabilities, and an adapter that cannot answer
// quickly is left out of it rather than holding the answer up.
const reachTimeout = 2 * time.Second

// reachedApp is a ReachableApp and the adapter that reaches it.
type reachedApp struct {
	ReachableApp
	via string
}

// reachedApps lists the apps the accessibility adapters reach that the
// registry neither holds nor has revoked, sorted by id; when two adapters
// reach one id, the first asked names it. An adapter that fails to list
// is left out. Called without b.mu held.
func (b *Broker) reachedApps(ctx context.Context) []reachedApp {
	var out []reachedApp
	seen := map[string]bool{}
	for _, ae := range b.accessAdapters() {
		l, ok := ae.a.(AppLister)
		if !ok {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, reachTimeout)
		apps, err := l.ReachableApps(actx)
		cancel()
		if err != nil {
			continue
		}
		for _, a := range apps {
			if seen[a.AppID] || platformDomain(a.AppID) != "" || strings.HasPrefix(a.AppID, ReservedPrefix) || manifest.ValidateAppID(a.AppID) != nil {
				continue
			}
			seen[a.AppID] = true
			out = append(out, reachedApp{a, ae.id})
		}
	}
	if len(out) == 0 {
		return nil
	}
	b.mu.RLock()
	out = slices.DeleteFunc(out, func(r reachedApp) bool {
		_, registered := b.apps[r.AppID]
		_, revoked := b.revoked[r.AppID]
		return registered || revoked
	})
	b.mu.RUnlock()
	slices.SortFunc(out, func(x, y reachedApp) int { return strings.Compare(x.AppID, y.AppID) })
	return out
}

// appendReached appends the generic capabilities of a reached app as the
// agent meets them: tier 2, available, the trust level its invocation
// will have (a detected capability's, after the user's policy).
func (b *Broker) appendReached(out []api.Capability, r reachedApp, agent string) []api.Capability {
	for _, d := range r.Capabilities {
		c := b.effective(detected(r.AppID+"."+d.Name, r.AppID), api.SourceSystemIntelligence, agent)
		c.Description, c.Parameters, c.Available = d.Description, d.Parameters, true
		c.TimeoutMS = 0
		out = append(out, c)
	}
	return out
}

// reachedCapability finds a reached app's generic capability by id.
func (b *Broker) reachedCapability(ctx context.Context, id string) (api.Capability, bool) {
	for _, r := range b.reachedApps(ctx) {
		if !strings.HasPrefix(id, r.AppID+".") {
			continue
		}
		for _, c := range b.appendReached(nil, r, SessionFrom(ctx).Agent()) {
			if c.ID == id {
				return c, true
			}
		}
	}
	return api.Capability{}, false
}
