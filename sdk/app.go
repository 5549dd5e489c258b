package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

// CapabilityFunc serves one capability: params is the invocation's JSON
// object of parameters (empty for none), and the value returned is
// encoded as the result's data. It is client.CapabilityFunc, so one set
// of handlers serves an app on either face.
//
// Return an *api.Error to answer with a PCP error code, or an
// *api.CapabilityResult to choose the status (partial, deferred) and the
// data yourself.
type CapabilityFunc = client.CapabilityFunc

// App implements PcpServer from a signed manifest and one handler per
// capability name. Its fields must not change while it is served; its
// methods are safe for concurrent use as long as the functions it holds
// are.
type App struct {
	// AppID is the app's id; capability ids are "<AppID>.<name>".
	AppID string
	// SignedManifest is the signed manifest object, byte for byte as
	// `pcpctl manifest sign` wrote it.
	SignedManifest json.RawMessage
	// Capabilities maps capability names (not ids) to their handlers.
	Capabilities map[string]CapabilityFunc
	// Validate, if set, checks params for the capability name without
	// running it; nil accepts whatever the daemon already checked against
	// the manifest. It is called only for names in Capabilities.
	Validate func(ctx context.Context, name string, params json.RawMessage) error
	// State, if set, returns the app's dynamic state; each value must
	// encode to JSON. nil reports the empty state {}.
	State func(ctx context.Context) (map[string]any, error)
	// OnShutdown, if set, is called when the daemon shuts the app down,
	// with its reason (PcpServer.Shutdown), before Serve tries again or,
	// with Options.StopOnShutdown, returns.
	OnShutdown func(reason string)
}

// Serve serves a as a.AppID: Serve(ctx, a.AppID, a, opts).
func (a *App) Serve(ctx context.Context, opts *Options) error {
	return Serve(ctx, a.AppID, a, opts)
}

// Manifest returns SignedManifest.
func (a *App) Manifest(ctx context.Context) (json.RawMessage, error) {
	if len(a.SignedManifest) == 0 {
		return nil, fmt.Errorf("sdk: app %s has no signed manifest", a.AppID)
	}
	return a.SignedManifest, nil
}

// Invoke runs the handler of inv.Name (derived from inv.CapabilityID when
// empty). An unknown name is CAPABILITY_NOT_FOUND. A handler's
// *api.CapabilityResult is returned as it is; any other value is a
// success whose data is the value's JSON, none for nil.
func (a *App) Invoke(ctx context.Context, inv *Invocation) (*api.CapabilityResult, error) {
	name := inv.Name
	if name == "" {
		name = a.name(inv.CapabilityID)
	}
	f := a.Capabilities[name]
	if f == nil || name == "" {
		return nil, a.notFound(inv.CapabilityID)
	}
	v, err := f(ctx, inv.Params)
	if err != nil {
		return nil, err
	}
	switch r := v.(type) {
	case *api.CapabilityResult:
		if r != nil {
			return r, nil
		}
		v = nil
	case api.CapabilityResult:
		return &r, nil
	}
	res := &api.CapabilityResult{Status: api.StatusSuccess}
	if v == nil {
		return res, nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding the result of %s: %w", inv.CapabilityID, err)
	}
	if string(data) != "null" { // a typed nil pointer
		res.Data = data
	}
	return res, nil
}

// ValidateParams calls Validate for the capability's name. A capability
// not in Capabilities is CAPABILITY_NOT_FOUND; with no Validate every
// other one is valid.
func (a *App) ValidateParams(ctx context.Context, capabilityID string, params json.RawMessage) error {
	name := a.name(capabilityID)
	if name == "" || a.Capabilities[name] == nil {
		return a.notFound(capabilityID)
	}
	if a.Validate == nil {
		return nil
	}
	return a.Validate(ctx, name, params)
}

// QueryState calls State and keeps the keys asked for (all of them when
// keys is empty); a key the state lacks is left out.
func (a *App) QueryState(ctx context.Context, keys []string) (json.RawMessage, error) {
	if a.State == nil {
		return json.RawMessage(`{}`), nil
	}
	st, err := a.State(ctx)
	if err != nil {
		return nil, err
	}
	if len(keys) > 0 {
		narrowed := make(map[string]any, len(keys))
		for _, k := range keys {
			if v, ok := st[k]; ok {
				narrowed[k] = v
			}
		}
		st = narrowed
	}
	if st == nil {
		return json.RawMessage(`{}`), nil
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encoding the state of %s: %w", a.AppID, err)
	}
	return b, nil
}

// Shutdown calls OnShutdown.
func (a *App) Shutdown(ctx context.Context, reason string) error {
	if a.OnShutdown != nil {
		a.OnShutdown(reason)
	}
	return nil
}

// name returns the capability name of id, "" when id is not one of a's.
func (a *App) name(id string) string {
	name, ok := strings.CutPrefix(id, a.AppID+".")
	if !ok || a.AppID == "" {
		return ""
	}
	return name
}

func (a *App) notFound(id string) error {
	return api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": id}, "no handler for %s in %s", id, a.AppID)
}

var _ PcpServer = (*App)(nil)
