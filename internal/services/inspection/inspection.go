// Package inspection is the daemon's in-process inspection service: it
// lets an agent on a fresh daemon discover what the broker knows: apps,
// capabilities, recent events and health. Its capabilities are ordinary
// PCP capabilities under the app id pcp.inspection, invoked, audited and
// rate-limited like any other.
package inspection

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// AppID is the service's app id.
const AppID = "pcp.inspection"

// Broker is what the service reads. *core.Broker implements it.
type Broker interface {
	Capability(ctx context.Context, id string) (*api.Capability, error)
	QueryCapabilities(ctx context.Context, p *api.QueryCapabilitiesParams) (*api.QueryCapabilitiesResult, error)
	Apps(ctx context.Context) (*api.AppsListResult, error)
	Health(ctx context.Context) (*api.HealthResult, error)
	EventHistory(ctx context.Context, p *api.EventsHistoryParams) (*api.EventsHistoryResult, error)
}

// Service implements core.Service.
type Service struct{ b Broker }

var _ core.Service = (*Service)(nil)

// New returns the inspection service reading b.
func New(b Broker) *Service { return &Service{b: b} }

// AppID implements core.Service.
func (s *Service) AppID() string { return AppID }

func optional() *bool { f := false; return &f }

// Manifest implements core.Service.
func (s *Service) Manifest() *api.Manifest {
	return &api.Manifest{
		Version:     "1.0",
		Publisher:   "pcpd",
		Description: "The broker's own view of the desktop's capabilities.",
		Capabilities: []api.CapabilityDecl{
			{Name: "describe_registry", Tier: 1, TrustLevel: api.TrustAuto,
				Description: "List every app with its state and its capabilities, with parameters.",
				Parameters: []api.ParamDecl{
					{Name: "app_id", Type: api.TypeString, Required: optional(), Description: "Only this app."},
				}},
			{Name: "describe_capability", Tier: 1, TrustLevel: api.TrustAuto,
				Description: "Describe one capability: its trust level, parameters and whether its app is running.",
				Parameters: []api.ParamDecl{
					{Name: "capability_id", Type: api.TypeString, Description: "Fully qualified capability id."},
				}},
			{Name: "ping", Tier: 1, TrustLevel: api.TrustAuto,
				Description: "Round trip through the whole invocation pipeline (checks, dispatch, audit); echoes payload.",
				Parameters: []api.ParamDecl{
					{Name: "payload", Type: api.TypeAny, Required: optional(), Description: "Any JSON value, returned as is."},
				}},
			{Name: "list_apps", Tier: 1, TrustLevel: api.TrustAuto,
				Description: "List registered, built-in and revoked apps."},
			{Name: "health", Tier: 1, TrustLevel: api.TrustAuto,
				Description: "The broker's health: adapters, sessions, counts, uptime."},
			{Name: "recent_events", Tier: 1, TrustLevel: api.TrustAuto,
				Description: "The newest events of the journal.",
				Parameters: []api.ParamDecl{
					{Name: "limit", Type: api.TypeInteger, Required: optional(), Description: "How many, 1 to 1000 (default 20)."},
				}},
		},
	}
}

// Invoke implements core.Provider.
func (s *Service) Invoke(ctx context.Context, c *api.Capability, _ api.InvocationSource, params json.RawMessage) (*api.CapabilityResult, error) {
	var p struct {
		AppID        string          `json:"app_id"`
		CapabilityID string          `json:"capability_id"`
		Limit        int             `json:"limit"`
		Payload      json.RawMessage `json:"payload"`
	}
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, api.InvalidParam("params", "%v", err)
		}
	}
	var (
		out any
		err error
	)
	switch c.Name {
	case "describe_registry":
		out, err = s.describeRegistry(ctx, p.AppID)
	case "describe_capability":
		out, err = s.describeCapability(ctx, p.CapabilityID)
	case "ping":
		out = struct {
			Pong    bool            `json:"pong"`
			Payload json.RawMessage `json:"payload,omitempty"`
		}{true, p.Payload}
	case "list_apps":
		out, err = s.b.Apps(ctx)
	case "health":
		out, err = s.b.Health(ctx)
	case "recent_events":
		if p.Limit == 0 {
			p.Limit = 20
		}
		if p.Limit < 1 || p.Limit > 1000 {
			return nil, api.InvalidParam("params.limit", "must be between 1 and 1000, got %d", p.Limit)
		}
		out, err = s.b.EventHistory(ctx, &api.EventsHistoryParams{Limit: p.Limit})
	default:
		return nil, api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": c.ID}, "no capability %s", c.ID)
	}
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("inspection: encoding %s: %w", c.Name, err)
	}
	return &api.CapabilityResult{Status: api.StatusSuccess, Data: data}, nil
}

type appView struct {
	api.App
	CapabilityList []api.Capability `json:"capability_list"`
}

func (s *Service) describeRegistry(ctx context.Context, appID string) (any, error) {
	apps, err := s.b.Apps(ctx)
	if err != nil {
		return nil, err
	}
	caps, err := s.b.QueryCapabilities(ctx, &api.QueryCapabilitiesParams{AppID: appID})
	if err != nil {
		return nil, err
	}
	byApp := map[string][]api.Capability{}
	for _, c := range caps.Capabilities {
		byApp[c.AppID] = append(byApp[c.AppID], c)
	}
	out := struct {
		Apps []appView `json:"apps"`
	}{Apps: []appView{}}
	for _, a := range apps.Apps {
		if appID != "" && a.AppID != appID {
			continue
		}
		list := byApp[a.AppID]
		if list == nil {
			list = []api.Capability{}
		}
		out.Apps = append(out.Apps, appView{App: a, CapabilityList: list})
	}
	if appID != "" && len(out.Apps) == 0 {
		return nil, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": appID}, "app %s is not registered", appID)
	}
	return out, nil
}

func (s *Service) describeCapability(ctx context.Context, id string) (any, error) {
	return s.b.Capability(ctx, id)
}
