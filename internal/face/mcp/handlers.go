package mcp

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"unicode"

	"github.com/pcp-dev/pcp/api"
)

// The tools' core calls, one handler each, in the table's order.

// act is core.Broker.Act: invoke.action on an element id, or the
// AT-SPI2 path of the dispatch for a target, waited out as pcp_invoke
// is.
func act(ctx context.Context, c *call) (any, error) {
	p, err := decode[api.ActParams](c)
	if err != nil {
		return nil, err
	}
	pending, stop := c.whilePending(ctx)
	defer stop()
	return c.s.b.Act(ctx, p, c.s.opts.ConfirmWait, pending)
}

func sessionContext(ctx context.Context, c *call) (any, error) {
	return c.s.b.SessionContext(ctx)
}

type describeArgs struct {
	CapabilityID string `json:"capability_id"`
}

// described is a capability with its parameters as a JSON Schema.
type described struct {
	api.Capability
	InputSchema json.RawMessage `json:"input_schema"`
}

func describe(ctx context.Context, c *call) (any, error) {
	p, err := decode[describeArgs](c)
	if err != nil {
		return nil, err
	}
	cp, err := c.s.b.Capability(ctx, p.CapabilityID)
	if err != nil {
		return nil, err
	}
	return &described{Capability: *cp, InputSchema: api.ParamsSchema(cp.Parameters)}, nil
}

type invokeArgs struct {
	CapabilityID string          `json:"capability_id"`
	AppID        string          `json:"app_id,omitempty"`
	Params       json.RawMessage `json:"params,omitempty"`
}

func invoke(ctx context.Context, c *call) (any, error) {
	p, err := decode[invokeArgs](c)
	if err != nil {
		return nil, err
	}
	if p.AppID == "" {
		var ok bool
		if p.AppID, ok = api.CapabilityAppID(p.CapabilityID); !ok {
			return nil, api.InvalidParam("capability_id", "%q has no app part; pass app_id", p.CapabilityID)
		}
	}
	return c.invokeWaiting(ctx, &api.InvokeCapabilityParams{CapabilityID: p.CapabilityID, AppID: p.AppID,
		Source: api.SourceSystemIntelligence, Params: p.Params})
}

type searchArgs struct {
	Query string `json:"query"`
	AppID string `json:"app_id,omitempty"`
	Tier  *int   `json:"tier,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// found is one capability in pcp_search's answer.
type found struct {
	ID          string   `json:"id"`
	AppID       string   `json:"app_id"`
	Tier        int      `json:"tier"`
	TrustLevel  string   `json:"trust_level"`
	Available   bool     `json:"available"`
	Description string   `json:"description,omitempty"`
	Parameters  []string `json:"parameters,omitempty"`
	Score       int      `json:"score"`
}

// accessibleApp is a Tier 2 app and its windows.
type accessibleApp struct {
	AppID    string   `json:"app_id"`
	Surfaces []string `json:"surfaces"`
	Focused  string   `json:"focused,omitempty"`
}

type searchResult struct {
	Capabilities []found          `json:"capabilities"`
	Total        int              `json:"total"`
	Tier2Apps    []*accessibleApp `json:"tier2_apps"`
}

// search ranks query.capabilities' answer against the query and adds
// the accessible apps of the session context that match it.
func search(ctx context.Context, c *call) (any, error) {
	p, err := decode[searchArgs](c)
	if err != nil {
		return nil, err
	}
	if p.Limit == 0 {
		p.Limit = 10
	}
	caps, err := c.s.b.QueryCapabilities(ctx, &api.QueryCapabilitiesParams{AppID: p.AppID, Tier: p.Tier})
	if err != nil {
		return nil, err
	}
	words := tokens(p.Query)
	out := &searchResult{Capabilities: []found{}, Tier2Apps: []*accessibleApp{}}
	for _, cp := range caps.Capabilities {
		score := rank(words, &cp)
		if len(words) > 0 && score == 0 {
			continue
		}
		f := found{ID: cp.ID, AppID: cp.AppID, Tier: cp.Tier, TrustLevel: cp.TrustLevel, Available: cp.Available, Description: cp.Description, Score: score}
		for _, pd := range cp.Parameters {
			f.Parameters = append(f.Parameters, pd.Name)
		}
		out.Capabilities = append(out.Capabilities, f)
	}
	sort.SliceStable(out.Capabilities, func(i, j int) bool { return out.Capabilities[i].Score > out.Capabilities[j].Score })
	out.Total = len(out.Capabilities)
	if len(out.Capabilities) > p.Limit {
		out.Capabilities = out.Capabilities[:p.Limit]
	}
	if p.Tier != nil && *p.Tier != 2 {
		return out, nil
	}
	sc, err := c.s.b.SessionContext(ctx)
	if err != nil {
		return out, nil // the capabilities stand without the windows
	}
	byApp := map[string]*accessibleApp{}
	for _, sid := range sc.ActiveSurfaces {
		appID, _, _ := strings.Cut(sid, "/")
		if p.AppID != "" && appID != p.AppID {
			continue
		}
		if len(words) > 0 && !matchesAny(words, tokens(appID)) {
			continue
		}
		a := byApp[appID]
		if a == nil {
			a = &accessibleApp{AppID: appID}
			byApp[appID] = a
			out.Tier2Apps = append(out.Tier2Apps, a)
		}
		a.Surfaces = append(a.Surfaces, sid)
		if sc.FocusedSurface != nil && *sc.FocusedSurface == sid {
			a.Focused = sid
		}
	}
	return out, nil
}

// tokens splits text into lower-case words.
func tokens(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// rank scores a capability against the query's words: a word that is
// the capability's name or a part of its id counts 4, a prefix of one 2,
// a parameter's name 2, a word of the description 1.
func rank(words []string, c *api.Capability) int {
	if len(words) == 0 {
		return 0
	}
	idWords := tokens(c.ID)
	name := strings.ToLower(c.Name)
	desc := tokens(c.Description)
	var params []string
	for _, p := range c.Parameters {
		params = append(params, tokens(p.Name)...)
	}
	score := 0
	for _, w := range words {
		switch {
		case w == name || contains(idWords, w):
			score += 4
		case hasPrefix(idWords, w):
			score += 2
		}
		if contains(params, w) {
			score += 2
		}
		if contains(desc, w) || hasPrefix(desc, w) && len(w) >= 4 {
			score++
		}
	}
	return score
}

func contains(ws []string, w string) bool {
	for _, x := range ws {
		if x == w {
			return true
		}
	}
	return false
}

func hasPrefix(ws []string, w string) bool {
	for _, x := range ws {
		if strings.HasPrefix(x, w) {
			return true
		}
	}
	return false
}

func matchesAny(words, in []string) bool {
	for _, w := range words {
		if hasPrefix(in, w) {
			return true
		}
	}
	return false
}
