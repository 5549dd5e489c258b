package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/manifest"
)

// Spec 001's ExecuteRequest dispatch. The invocation pipeline
// (InvokeCapability, Execute, and queued jobs when they run) resolves a
// capability and then sends it down exactly one route, chosen in this
// order:
//
//  1. in_process: the owner is a service compiled into the daemon
//     (AddService); its provider answers from memory.
//  2. platform: the owner's app id is "system" or "compositor" or starts
//     with "system." or "compositor."; the PlatformAdapter executes it.
//     Only SetPlatformAdapter puts such apps in the registry (manifests
//     claiming them are refused), and a platform-domain capability the
//     registry does not hold is ACTION_NOT_SUPPORTED, never detected.
//  3. The app domain.
//     a. native: the owner has a channel of its own (a Tier 1 per-app
//     socket or a JSON-RPC connection serving it). For a confirm
//     capability the app is asked to validate the parameters, when it
//     can, before the user is asked.
//     b. accessibility:<adapter id>, the AT-SPI2 path. A registered
//     capability is tried on the AccessibilityAdapters by priority; each
//     resolves the element itself when the parameters carry no
//     "accessible_path"; the next adapter is asked only when one declines
//     (see declines); the first success wins. With no adapters the app is
//     APP_NOT_FOUND, not running. A capability id the registry does not
//     hold is detected (AccessibilityAdapter.Detect, by priority, after
//     the connection's rate limit), then executed once, on the detecting
//     adapter alone, as tier 2 with trust level confirm unless the user's
//     policy says otherwise, its parameters unchecked (it declares none).
//     A capability registered to another app than the one named is not
//     found, and not detected.
//  4. The route runs under the capability's timeout (DefaultTimeout unless
//     the manifest or the policy sets one): EXECUTION_TIMEOUT, and no
//     adapter is asked after it. Transport failures map onto the
//     catalogue as before (a closed connection is APP_UNRESPONSIVE).
//
// Limits, parameters, trust levels, confirmations, deferred jobs, the
// audit and events are the pipeline's, the same for every route. A
// registered capability's declared parameters are checked on every route:
// one that accepts an explicit element declares "accessible_path" and
// "bus_name" (strings). Adapters are never called while b.mu is held.

// Routes as the audit entry's detail member "route" names them. The
// accessibility route is "accessibility:<adapter id>" once an adapter has
// been chosen or has acted; plain "accessibility" when the invocation
// stopped before any adapter acted or every adapter declined.
const (
	routeInProcess     = "in_process"
	routePlatform      = "platform"
	routeNative        = "native"
	routeAccessibility = "accessibility"
)

// platformDomain reports the platform domain, "system" or "compositor",
// that an app id (or a capability id) is in, or "".
func platformDomain(id string) string {
	for _, d := range [...]string{"system", "compositor"} {
		if id == d || strings.HasPrefix(id, d+".") {
			return d
		}
	}
	return ""
}

// PlatformAdapter executes the capabilities of the system and compositor domains.
type PlatformAdapter interface {
	// Manifests returns the platform's capabilities, by app id; every app id is in the system or compositor domain.
	Manifests() map[string]*api.Manifest
	Execute(ctx context.Context, ex *Execution) (*api.CapabilityResult, error)
}

// AccessibilityAdapter executes capabilities through the accessibility tree (the AT-SPI2 path). Methods may be called concurrently.
//
// An error whose code is NO_ATSPI2_SUPPORT, ACTION_NOT_SUPPORTED,
// ELEMENT_NOT_FOUND, SURFACE_NOT_FOUND or APP_NOT_FOUND means "this
// adapter could not act, nothing was done": the broker may ask the next
// adapter. Any other error stops the dispatch and is returned as it is;
// an adapter that may have acted must not answer one of those five.
//
// An adapter may also implement
//
//	ElementTree(ctx context.Context, appID string) ([]api.ElementInfo, error)
//	DetectApp(ctx context.Context, appID string) (*api.DetectionResult, error)
//
// to answer spec 001's ElementTree query and DetectRequest.
type AccessibilityAdapter interface {
	ID() string
	// Detect finds the app that owns a capability the registry does not hold; target, when not empty, is the app the caller named. ok=false: this adapter does not know it.
	Detect(ctx context.Context, capabilityID, target string) (appID string, ok bool, err error)
	// ResolveElement finds the element an execution acts on when its params carry no accessible_path (element auto-resolution).
	ResolveElement(ctx context.Context, ex *Execution) (*ElementRef, error)
	Execute(ctx context.Context, ex *Execution) (*api.CapabilityResult, error)
}

// ElementRef names a node of the accessibility tree: the D-Bus name of
// the app's connection and the node's object path.
type ElementRef struct{ BusName, AccessiblePath string }

// Execution is one execution as an adapter receives it. Adapters must not
// modify it; each adapter asked gets its own copy.
type Execution struct {
	Capability api.Capability // effective (policy applied); for an unregistered capability: ID, AppID (detected), Tier 2
	Registered bool
	Source     api.InvocationSource
	Params     json.RawMessage
	Element    *ElementRef // from params "accessible_path" (+ optional "bus_name"), or auto-resolved; nil for platform executions
}

type elementTreer interface {
	ElementTree(ctx context.Context, appID string) ([]api.ElementInfo, error)
}

type appDetector interface {
	DetectApp(ctx context.Context, appID string) (*api.DetectionResult, error)
}

// accessEntry is a bound accessibility adapter.
type accessEntry struct {
	a        AccessibilityAdapter
	id       string
	priority int
}

// SetPlatformAdapter binds the platform adapter and registers its
// capabilities as AddService does: available at once, not persisted,
// signed by "pcpd", listed as builtin. A second call replaces the first
// adapter and its capabilities; nil removes them. An app the user has
// revoked is left out.
func (b *Broker) SetPlatformAdapter(p PlatformAdapter) error {
	var entries []*appEntry
	if p != nil {
		ms := p.Manifests()
		ids := make([]string, 0, len(ms))
		for id := range ms {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			if platformDomain(id) == "" {
				return api.Errorf(api.CodeManifestInvalid, map[string]any{"app_id": id},
					"platform app %s: app id must be in the system or compositor domain", id)
			}
			// The domains' roots, "system" and "compositor", are apps
			// of their own (system.capture); other ids are reverse-DNS.
			if id != platformDomain(id) {
				if err := manifest.ValidateAppID(id); err != nil {
					return fmt.Errorf("platform app %s: %w", id, err)
				}
			}
			m := ms[id]
			if m == nil {
				return api.Errorf(api.CodeManifestInvalid, map[string]any{"app_id": id}, "platform app %s: no manifest", id)
			}
			raw, err := json.Marshal(m)
			if err != nil {
				return fmt.Errorf("platform app %s: %w", id, err)
			}
			if _, err := manifest.Parse(id, raw); err != nil {
				return fmt.Errorf("platform app %s: %w", id, err)
			}
			entries = append(entries, &appEntry{id: id, manifest: m, raw: raw, builtin: true, signed: true, publisher: "pcpd", provider: platformProvider{p}})
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.platform = p
	for _, a := range b.apps {
		if _, ok := a.provider.(platformProvider); ok {
			b.unindexAppLocked(a)
		}
	}
	for _, a := range entries {
		if _, gone := b.revoked[a.id]; gone {
			continue
		}
		if old := b.apps[a.id]; old != nil {
			b.unindexAppLocked(old)
		}
		b.indexAppLocked(a)
	}
	return nil
}

// platformProvider routes a platform app's invocations to the platform
// adapter.
type platformProvider struct{ p PlatformAdapter }

func (pp platformProvider) Invoke(ctx context.Context, c *api.Capability, source api.InvocationSource, params json.RawMessage) (*api.CapabilityResult, error) {
	return pp.p.Execute(ctx, &Execution{Capability: *c, Registered: true, Source: source, Params: params})
}

// AddAccessibilityAdapter binds an accessibility adapter. A lower priority value is asked first; equal priorities keep insertion order; duplicate ID → error.
func (b *Broker) AddAccessibilityAdapter(a AccessibilityAdapter, priority int) error {
	if a == nil {
		return api.Errorf(api.CodeInvalidParams, nil, "accessibility adapter: nil")
	}
	id := a.ID()
	if id == "" {
		return api.MissingParam("adapter_id")
	}
	b.mu.Lock()
	for _, e := range b.access {
		if e.id == id {
			b.mu.Unlock()
			return api.Errorf(api.CodeInvalidParams, map[string]any{"field": "adapter_id", "adapter_id": id}, "adapter_id: %s is already bound", id)
		}
	}
	i := sort.Search(len(b.access), func(i int) bool { return b.access[i].priority > priority })
	next := make([]*accessEntry, 0, len(b.access)+1)
	next = append(next, b.access[:i]...)
	next = append(next, &accessEntry{a: a, id: id, priority: priority})
	next = append(next, b.access[i:]...)
	b.access = next
	// The apps already registered (loaded from the store at start) name
	// their accessible applications too.
	aliases := map[string]string{}
	for _, ap := range b.apps {
		if ap.manifest != nil && ap.manifest.AccessibleName != "" {
			aliases[ap.id] = ap.manifest.AccessibleName
		}
	}
	b.mu.Unlock()
	if al, ok := a.(Aliaser); ok {
		for appID, name := range aliases {
			al.Alias(appID, name)
		}
	}
	return nil
}

// Aliaser is implemented by accessibility adapters that can let an app
// registered under its own id stand for an application they reach: a
// manifest's "accessible_name". An empty name removes the alias. Alias
// must not call back into the broker.
type Aliaser interface {
	Alias(appID, accessibleName string)
}

// aliasAccessible tells the accessibility adapters which application on
// the accessibility bus appID stands for ("" for none). Called without
// b.mu held.
func (b *Broker) aliasAccessible(appID, accessibleName string) {
	for _, e := range b.accessAdapters() {
		if al, ok := e.a.(Aliaser); ok {
			al.Alias(appID, accessibleName)
		}
	}
}

// accessAdapters returns the accessibility adapters in the order they are
// asked.
func (b *Broker) accessAdapters() []*accessEntry {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.access
}

// declines reports whether an adapter's error means it could not act and
// did nothing, so the next adapter may be asked.
func declines(err error) bool {
	switch api.AsError(err).Code {
	case api.CodeNoATSPI2Support, api.CodeActionNotSupported, api.CodeElementNotFound, api.CodeSurfaceNotFound, api.CodeAppNotFound:
		return true
	}
	return false
}

// dispatchTarget is where the pipeline sends one invocation.
type dispatchTarget struct {
	// route is routeInProcess, routePlatform, routeNative or
	// routeAccessibility (a detected capability's carries the adapter id).
	route string
	// provider executes the in-process, platform and native routes.
	provider Provider
	// access are the adapters of the accessibility route, in order; a
	// detected capability has its detecting adapter alone.
	access []*accessEntry
	// registered is false for a capability found by detection.
	registered bool
}

// routeOf picks the route of a registered capability: c is its effective
// form, provider and builtin its app's.
func routeOf(c *api.Capability, provider Provider, builtin bool, access []*accessEntry) (dispatchTarget, error) {
	dom := platformDomain(c.AppID)
	switch {
	case builtin && dom == "":
		return dispatchTarget{route: routeInProcess, provider: provider, registered: true}, nil
	case dom != "":
		if _, ok := provider.(platformProvider); !ok {
			// Only a manifest stored before the domains were reserved
			// can get here.
			return dispatchTarget{}, api.Errorf(api.CodeActionNotSupported, map[string]any{"capability_id": c.ID, "domain": dom},
				"capability %s is in the %s domain, which no platform adapter serves", c.ID, dom)
		}
		return dispatchTarget{route: routePlatform, provider: provider, registered: true}, nil
	case provider != nil:
		return dispatchTarget{route: routeNative, provider: provider, registered: true}, nil
	}
	return dispatchTarget{route: routeAccessibility, access: access, registered: true}, nil
}

// detectOwner asks the accessibility adapters, in order, which app owns a
// capability the registry does not hold. target, when not empty, is the
// app the caller named: an adapter naming another app has not found it.
// It returns a nil entry when no adapter claims the capability.
func detectOwner(ctx context.Context, access []*accessEntry, capabilityID, target string) (*accessEntry, string, error) {
	for _, ae := range access {
		dctx, cancel := context.WithTimeout(ctx, AdapterTimeout)
		appID, ok, err := ae.a.Detect(dctx, capabilityID, target)
		timedOut := dctx.Err() == context.DeadlineExceeded && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			if !ok || appID == "" || (target != "" && appID != target) || platformDomain(appID) != "" {
				continue
			}
			if verr := manifest.ValidateAppID(appID); verr != nil {
				return nil, "", api.Errorf(api.CodeInternalError, map[string]any{"adapter_id": ae.id, "capability_id": capabilityID},
					"adapter %s detected an invalid owner of %s: %v", ae.id, capabilityID, verr)
			}
			return ae, appID, nil
		case timedOut:
			return nil, "", api.Errorf(api.CodeAppUnresponsive, map[string]any{"adapter_id": ae.id},
				"adapter %s did not answer within %s", ae.id, AdapterTimeout)
		case declines(err):
			continue
		}
		return nil, "", err
	}
	return nil, "", nil
}

// detected builds the capability of an unregistered capability id found
// in app appID: tier 2, trust level confirm, no declared parameters.
func detected(capabilityID, appID string) api.Capability {
	name := capabilityID
	if rest, ok := strings.CutPrefix(capabilityID, appID+"."); ok && rest != "" {
		name = rest
	}
	return api.Capability{ID: capabilityID, AppID: appID, Name: name, Tier: 2, TrustLevel: api.TrustConfirm}
}

// elementFromParams reads the element params name: "accessible_path" and
// the optional "bus_name". It returns nil when there is no path.
func elementFromParams(params json.RawMessage) (*ElementRef, error) {
	if len(params) == 0 || firstByte(params) != '{' {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil {
		return nil, api.InvalidParam("params", "%v", err)
	}
	raw, ok := m["accessible_path"]
	if !ok {
		return nil, nil
	}
	var el ElementRef
	if err := json.Unmarshal(raw, &el.AccessiblePath); err != nil {
		return nil, api.InvalidParam("params.accessible_path", "must be a string")
	}
	if raw, ok := m["bus_name"]; ok {
		if err := json.Unmarshal(raw, &el.BusName); err != nil {
			return nil, api.InvalidParam("params.bus_name", "must be a string")
		}
	}
	if el.AccessiblePath == "" {
		return nil, nil
	}
	return &el, nil
}

// viaAccessibility runs the accessibility route under ctx, which carries
// the capability's timeout. It returns the id of the adapter whose answer
// it returns: the one that succeeded or stopped the dispatch; empty when
// every adapter declined.
func viaAccessibility(ctx context.Context, c *api.Capability, t dispatchTarget, source api.InvocationSource, params json.RawMessage) (*api.CapabilityResult, string, error) {
	el, err := elementFromParams(params)
	if err != nil {
		return nil, "", err
	}
	if len(t.access) == 0 {
		return nil, "", api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": c.AppID, "running": false}, "app %s is not running", c.AppID)
	}
	var declined []error
	for _, ae := range t.access {
		ex := &Execution{Capability: *c, Registered: t.registered, Source: source, Params: params, Element: el}
		res, err := executeOn(ctx, ae, ex)
		if err == nil {
			return res, ae.id, nil
		}
		// A detected capability runs on its adapter alone; a timeout ends
		// the dispatch; an error that is not a decline may come after
		// the action ran.
		if !t.registered || ctx.Err() != nil || !declines(err) {
			return nil, ae.id, err
		}
		declined = append(declined, err)
	}
	first := api.AsError(declined[0])
	same, unknown := true, true
	attempts := make([]map[string]any, 0, len(declined))
	for i, err := range declined {
		e := api.AsError(err)
		same = same && e.Code == first.Code
		unknown = unknown && (e.Code == api.CodeNoATSPI2Support || e.Code == api.CodeAppNotFound)
		attempts = append(attempts, map[string]any{"adapter": t.access[i].id, "code": e.Code.Name(), "message": e.Message})
	}
	if unknown {
		// No adapter reaches the app either: for the caller, the app is
		// not running (its own connection is gone).
		return nil, "", api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": c.AppID, "running": false, "attempts": attempts},
			"app %s is not running, and no accessibility adapter reaches it", c.AppID)
	}
	if same {
		return nil, "", declined[0]
	}
	return nil, "", api.Errorf(api.CodeInternalError, map[string]any{"capability_id": c.ID, "attempts": attempts},
		"no accessibility adapter could execute %s (%d tried)", c.ID, len(declined))
}

// executeOn runs ex on one adapter, resolving its element first when the
// parameters named none.
func executeOn(ctx context.Context, ae *accessEntry, ex *Execution) (*api.CapabilityResult, error) {
	if ex.Element == nil {
		el, err := ae.a.ResolveElement(ctx, ex)
		if err != nil {
			return nil, err
		}
		if el == nil || el.AccessiblePath == "" {
			return nil, api.Errorf(api.CodeElementNotFound, map[string]any{"capability_id": ex.Capability.ID, "adapter_id": ae.id},
				"adapter %s found no element for %s", ae.id, ex.Capability.ID)
		}
		ex.Element = el
	}
	return ae.a.Execute(ctx, ex)
}

// firstAccess asks the accessibility adapters that implement I, in
// order, until one answers, and returns the answer and that adapter's id.
// A decline moves on to the next adapter; any other error is returned.
// id is empty when no adapter answered; declined is then the first
// decline more telling than NO_ATSPI2_SUPPORT, if there was one.
func firstAccess[T, I any](ctx context.Context, b *Broker, f func(context.Context, I) (T, error)) (v T, id string, declined, err error) {
	for _, ae := range b.accessAdapters() {
		impl, ok := ae.a.(I)
		if !ok {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, AdapterTimeout)
		got, ferr := f(actx, impl)
		timedOut := actx.Err() == context.DeadlineExceeded && ctx.Err() == nil
		cancel()
		switch {
		case ferr == nil:
			return got, ae.id, nil, nil
		case timedOut:
			return v, "", nil, api.Errorf(api.CodeAppUnresponsive, map[string]any{"adapter_id": ae.id},
				"adapter %s did not answer within %s", ae.id, AdapterTimeout)
		case declines(ferr):
			if declined == nil && !errors.Is(ferr, api.ErrNoATSPI2Support) {
				declined = ferr
			}
			continue
		}
		return v, "", nil, ferr
	}
	return v, "", declined, nil
}
