package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/policy"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// calls is a log of adapter calls, shared by the fakes of one test so it
// shows the order the broker asked them in.
type calls struct {
	mu  sync.Mutex
	log []string
}

func (c *calls) add(s string) {
	c.mu.Lock()
	c.log = append(c.log, s)
	c.mu.Unlock()
}

func (c *calls) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

// fakeAccess is an AccessibilityAdapter whose answers are functions; a
// nil function declines with NO_ATSPI2_SUPPORT (Detect: does not know).
type fakeAccess struct {
	id      string
	calls   *calls
	detect  func(capabilityID, target string) (string, bool, error)
	resolve func(ex *Execution) (*ElementRef, error)
	exec    func(ctx context.Context, ex *Execution) (*api.CapabilityResult, error)

	mu      sync.Mutex
	seen    []Execution // what Execute received
	aliases []string    // Alias calls, "app=name"
}

func (f *fakeAccess) ID() string { return f.id }

func (f *fakeAccess) Detect(ctx context.Context, capabilityID, target string) (string, bool, error) {
	f.calls.add(f.id + ".Detect")
	if f.detect == nil {
		return "", false, nil
	}
	return f.detect(capabilityID, target)
}

func (f *fakeAccess) ResolveElement(ctx context.Context, ex *Execution) (*ElementRef, error) {
	f.calls.add(f.id + ".ResolveElement")
	if f.resolve == nil {
		return &ElementRef{BusName: ":1." + f.id, AccessiblePath: "/org/a11y/atspi/accessible/" + f.id}, nil
	}
	return f.resolve(ex)
}

func (f *fakeAccess) Execute(ctx context.Context, ex *Execution) (*api.CapabilityResult, error) {
	f.calls.add(f.id + ".Execute")
	f.mu.Lock()
	f.seen = append(f.seen, *ex)
	f.mu.Unlock()
	if f.exec == nil {
		return nil, api.Errorf(api.CodeNoATSPI2Support, nil, "%s: no AT-SPI2 here", f.id)
	}
	return f.exec(ctx, ex)
}

// Alias implements Aliaser, recording the calls apart from the others.
func (f *fakeAccess) Alias(appID, accessibleName string) {
	f.mu.Lock()
	f.aliases = append(f.aliases, appID+"="+accessibleName)
	f.mu.Unlock()
}

func (f *fakeAccess) aliasCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.aliases...)
}

func (f *fakeAccess) executions() []Execution {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Execution(nil), f.seen...)
}

func succeed(ctx context.Context, ex *Execution) (*api.CapabilityResult, error) {
	return &api.CapabilityResult{Status: api.StatusSuccess}, nil
}

func failWith(code api.Code) func(context.Context, *Execution) (*api.CapabilityResult, error) {
	return func(ctx context.Context, ex *Execution) (*api.CapabilityResult, error) {
		return nil, api.Errorf(code, nil, "%s failed", code.Name())
	}
}

// fakePlatform is a PlatformAdapter with one app, system.audio.
type fakePlatform struct {
	calls *calls
	exec  func(ctx context.Context, ex *Execution) (*api.CapabilityResult, error)

	mu   sync.Mutex
	seen []Execution
}

func (p *fakePlatform) Manifests() map[string]*api.Manifest {
	return map[string]*api.Manifest{
		"system.audio": {Version: "1.0", Capabilities: []api.CapabilityDecl{
			{Name: "mute", Tier: 1, TrustLevel: api.TrustAuto, Parameters: []api.ParamDecl{{Name: "on", Type: "boolean"}}},
		}},
		"compositor.windows": {Version: "1.0", Capabilities: []api.CapabilityDecl{
			{Name: "close", Tier: 1, TrustLevel: api.TrustConfirm},
			{Name: "wait", Tier: 1, TrustLevel: api.TrustAuto, TimeoutMS: 50},
		}},
	}
}

func (p *fakePlatform) Execute(ctx context.Context, ex *Execution) (*api.CapabilityResult, error) {
	p.calls.add("platform.Execute " + ex.Capability.ID)
	p.mu.Lock()
	p.seen = append(p.seen, *ex)
	p.mu.Unlock()
	if p.exec != nil {
		return p.exec(ctx, ex)
	}
	return &api.CapabilityResult{Status: api.StatusSuccess}, nil
}

// fakeService is an in-process service, pcp.test.
type fakeService struct{ calls *calls }

func (s fakeService) AppID() string { return "pcp.test" }
func (s fakeService) Manifest() *api.Manifest {
	return &api.Manifest{Version: "1.0", Capabilities: []api.CapabilityDecl{{Name: "ping", Tier: 1, TrustLevel: api.TrustAuto}}}
}
func (s fakeService) Invoke(ctx context.Context, c *api.Capability, source api.InvocationSource, params json.RawMessage) (*api.CapabilityResult, error) {
	s.calls.add("service.Invoke " + c.ID)
	return &api.CapabilityResult{Status: api.StatusSuccess}, nil
}

// validatingPeer serves an app natively and refuses every parameter set
// in ValidateParams (the Tier 1 ValidateParamsMsg).
type validatingPeer struct {
	recPeer
	calls *calls
}

func (p *validatingPeer) endpoint() Endpoint {
	ep := p.recPeer.endpoint()
	ep.Validate = p
	return ep
}

func (p *validatingPeer) ValidateParams(ctx context.Context, capabilityID string, params json.RawMessage) error {
	p.calls.add("ValidateParams " + capabilityID)
	return api.InvalidParam("params.to", "no such address")
}

// dispatchWorld is a broker with an agent and a user session, on a clock
// that moves only when the test says.
type dispatchWorld struct {
	b           *Broker
	clk         *testkit.Clock
	calls       *calls
	agent, user context.Context
}

func newDispatchWorld(t *testing.T, rl RateLimits) *dispatchWorld {
	t.Helper()
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := &dispatchWorld{clk: testkit.NewClock(time.Unix(1700000000, 0)), calls: &calls{}}
	w.b, err = New(context.Background(), Config{Apps: st, Audit: st, Journal: st, Jobs: st, AllowUnsigned: true, RateLimits: &rl, LivenessInterval: -1,
		Now: w.clk.Now, AfterFunc: w.clk.AfterFunc, ConfirmationTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.b.Close)
	w.agent = WithSession(context.Background(), w.b.OpenSession(SessionInfo{Transport: "unix", UID: 1000, PID: 1}, (&recPeer{}).endpoint()))
	w.user = WithSession(context.Background(), w.b.OpenSession(SessionInfo{Role: RoleUser, Transport: "unix", UID: 1000, PID: 2}, (&recPeer{}).endpoint()))
	return w
}

// testPeer is a connection a test plays.
type testPeer interface{ endpoint() Endpoint }

// register registers a manifest for appID. A nil peer registers it
// without serving it: the app is known but has no native channel.
func (w *dispatchWorld) register(t *testing.T, appID, manifest string, peer testPeer) {
	t.Helper()
	serve := peer != nil
	var ep Endpoint
	if serve {
		ep = peer.endpoint()
	}
	ctx := WithSession(context.Background(), w.b.OpenSession(SessionInfo{Transport: "unix"}, ep))
	if _, err := w.b.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: appID, Manifest: json.RawMessage(manifest), Serve: &serve}); err != nil {
		t.Fatal(err)
	}
}

func (w *dispatchWorld) access(t *testing.T, priority int, f *fakeAccess) *fakeAccess {
	t.Helper()
	f.calls = w.calls
	if err := w.b.AddAccessibilityAdapter(f, priority); err != nil {
		t.Fatal(err)
	}
	return f
}

func (w *dispatchWorld) exec(ctx context.Context, capability, params string) (*api.CapabilityResult, error) {
	p := &api.ExecuteRequest{Capability: capability}
	if params != "" {
		p.Params = json.RawMessage(params)
	}
	return w.b.Execute(ctx, p)
}

// lastInvoke returns the newest invoke audit entry and its detail.
func (w *dispatchWorld) lastInvoke(t *testing.T) (api.AuditEntry, map[string]any) {
	t.Helper()
	tail, err := w.b.AuditTail(context.Background(), &api.AuditTailParams{Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	for i := len(tail.Entries) - 1; i >= 0; i-- {
		if e := tail.Entries[i]; e.Kind == "invoke" || e.Kind == "invoke_admin" {
			var d map[string]any
			json.Unmarshal(e.Detail, &d)
			return e, d
		}
	}
	t.Fatal("no invoke audit entry")
	return api.AuditEntry{}, nil
}

// wantRoute checks the route of the newest invoke audit entry; "" means
// none recorded.
func (w *dispatchWorld) wantRoute(t *testing.T, want string) {
	t.Helper()
	e, d := w.lastInvoke(t)
	got, _ := d["route"].(string)
	if _, has := d["route"]; has && want == "" || got != want {
		t.Errorf("audit entry %s/%s route = %q, want %q (detail %s)", e.CapabilityID, e.Outcome, got, want, e.Detail)
	}
}

func wantCode(t *testing.T, err error, code api.Code) *api.Error {
	t.Helper()
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("got %v, want %s", err, code.Name())
	}
	return pe
}

const editorManifest = `{"version":"1.0","capabilities":[
	{"name":"bold","tier":2,"trust_level":"auto"},
	{"name":"click","tier":2,"trust_level":"auto","parameters":[{"name":"accessible_path","type":"string","required":false},{"name":"bus_name","type":"string","required":false}]},
	{"name":"slow","tier":2,"trust_level":"auto","timeout_ms":50},
	{"name":"erase","tier":2,"trust_level":"confirm","undo_window_ms":5000}],"signature":""}`

// Step 1: a builtin service answers in process, before anything else is
// asked.
func TestDispatchInProcessServiceWins(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	if err := w.b.AddService(fakeService{w.calls}); err != nil {
		t.Fatal(err)
	}
	w.access(t, 0, &fakeAccess{id: "greedy", detect: func(string, string) (string, bool, error) { return "pcp.test", true, nil }, exec: succeed})
	if _, err := w.exec(w.agent, "pcp.test.ping", ""); err != nil {
		t.Fatal(err)
	}
	if got, want := w.calls.get(), []string{"service.Invoke pcp.test.ping"}; !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	w.wantRoute(t, routeInProcess)
}

// Step 2: the system and compositor domains belong to the platform
// adapter, and to no one else.
func TestDispatchPlatformDomain(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	greedy := w.access(t, 0, &fakeAccess{id: "greedy", detect: func(_, target string) (string, bool, error) { return "system.audio", true, nil }, exec: succeed})

	// Without a platform adapter a platform capability cannot exist.
	pe := wantCode(t, func() error { _, err := w.exec(w.agent, "system.audio.mute", `{"on":true}`); return err }(), api.CodeActionNotSupported)
	if d := pe.DataMap(); d["capability_id"] != "system.audio.mute" || d["domain"] != "system" {
		t.Errorf("data = %v, want capability_id and domain system", d)
	}
	if mustInfo(pe.Code).StreamCode != 400 {
		t.Errorf("stream code %d, want 400", mustInfo(pe.Code).StreamCode)
	}
	w.wantRoute(t, "")
	for _, id := range []string{"system.x", "compositor.x", "system.audio"} {
		ctx := WithSession(context.Background(), w.b.OpenSession(SessionInfo{Transport: "unix"}, (&recPeer{}).endpoint()))
		_, err := w.b.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: id, Manifest: json.RawMessage(`{"version":"1.0","capabilities":[{"name":"mute","tier":1,"trust_level":"auto"}],"signature":""}`)})
		if !errors.Is(err, api.ErrPermissionDenied) {
			t.Errorf("register %s: got %v, want PERMISSION_DENIED", id, err)
		}
	}
	// "systemd.x" is an ordinary app id.
	w.register(t, "systemd.x", `{"version":"1.0","capabilities":[{"name":"go","tier":1,"trust_level":"auto"}],"signature":""}`, nil)

	plat := &fakePlatform{calls: w.calls}
	if err := w.b.SetPlatformAdapter(plat); err != nil {
		t.Fatal(err)
	}
	_, err := w.exec(w.agent, "system.audio.mute", `{"on":"yes"}`)
	wantCode(t, err, api.CodeInvalidParams) // the manifest's parameters are checked
	res, err := w.exec(w.agent, "system.audio.mute", `{"on":true}`)
	if err != nil || res.Status != api.StatusSuccess {
		t.Fatalf("system.audio.mute: %+v, %v", res, err)
	}
	w.wantRoute(t, routePlatform)
	res, err = w.b.InvokeCapability(w.agent, &api.InvokeCapabilityParams{CapabilityID: "compositor.windows.close", AppID: "compositor.windows", Source: api.SourceSystemIntelligence})
	wantCode(t, err, api.CodeConfirmationRequired)
	if res != nil {
		t.Errorf("result %+v with CONFIRMATION_REQUIRED", res)
	}
	w.wantRoute(t, routePlatform)
	seen := plat.seen
	if len(seen) != 1 || seen[0].Capability.ID != "system.audio.mute" || !seen[0].Registered || seen[0].Element != nil || string(seen[0].Params) != `{"on":true}` {
		t.Errorf("platform executions = %+v", seen)
	}
	if n := len(greedy.executions()); n != 0 || slices.Contains(w.calls.get(), "greedy.Detect") {
		t.Errorf("the accessibility adapter was asked about the platform domain: %v", w.calls.get())
	}
	// A platform capability it does not have is unsupported, not detected.
	wantCode(t, func() error { _, err := w.exec(w.agent, "system.audio.fly", ""); return err }(), api.CodeActionNotSupported)

	apps, _ := w.b.Apps(w.agent)
	for _, a := range apps.Apps {
		if a.AppID == "system.audio" && (a.State != api.AppBuiltin || !a.Signed || a.Publisher != "pcpd") {
			t.Errorf("system.audio listed as %+v, want builtin, signed by pcpd", a)
		}
	}
	if err := w.b.SetPlatformAdapter(&badPlatform{}); !errors.Is(err, api.ErrManifestInvalid) {
		t.Errorf("platform adapter claiming org.example.x: got %v, want MANIFEST_INVALID", err)
	}
}

func mustInfo(c api.Code) api.ErrorInfo { i, _ := c.Info(); return i }

type badPlatform struct{ fakePlatform }

func (*badPlatform) Manifests() map[string]*api.Manifest {
	return map[string]*api.Manifest{"org.example.x": {Version: "1.0", Capabilities: []api.CapabilityDecl{{Name: "go", Tier: 1, TrustLevel: api.TrustAuto}}}}
}

// Step 3a: an app served on its own channel is invoked there; the
// accessibility adapters are not consulted.
func TestDispatchNativeChannel(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	a := w.access(t, 0, &fakeAccess{id: "atspi", exec: succeed})
	peer := &recPeer{call: func(ctx context.Context, method string, params any) (json.RawMessage, error) {
		w.calls.add("native " + method)
		return json.RawMessage(`{"status":"success"}`), nil
	}}
	w.register(t, "org.example.editor", editorManifest, peer)
	if _, err := w.exec(w.agent, "org.example.editor.bold", ""); err != nil {
		t.Fatal(err)
	}
	if got, want := w.calls.get(), []string{"native " + api.MethodInvokeCapability}; !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	if len(a.executions()) != 0 {
		t.Error("the accessibility adapter executed a natively served capability")
	}
	w.wantRoute(t, routeNative)
}

// Step 3a: a confirm capability is validated by the app before the user
// is asked; a refusal is the answer and no confirmation is opened. An
// auto capability is not validated first.
func TestDispatchNativeValidatesBeforeConfirming(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	peer := &validatingPeer{calls: w.calls}
	peer.call = func(ctx context.Context, method string, params any) (json.RawMessage, error) {
		w.calls.add("native " + method)
		return json.RawMessage(`{"status":"success"}`), nil
	}
	w.register(t, "org.example.mail", `{"version":"1.0","capabilities":[
		{"name":"send","tier":1,"trust_level":"confirm","parameters":[{"name":"to","type":"string"}]},
		{"name":"draft","tier":1,"trust_level":"auto","parameters":[{"name":"to","type":"string"}]}],"signature":""}`, peer)

	_, err := w.exec(w.agent, "org.example.mail.send", `{"to":"nobody"}`)
	pe := wantCode(t, err, api.CodeInvalidParams)
	if pe.Message != "params.to: no such address" {
		t.Errorf("message %q, want the app's own", pe.Message)
	}
	confs, _ := w.b.Confirmations(w.user)
	if len(confs.Confirmations) != 0 {
		t.Errorf("confirmations opened for what the app refuses: %+v", confs.Confirmations)
	}
	w.wantRoute(t, routeNative)
	if _, err := w.exec(w.agent, "org.example.mail.draft", `{"to":"nobody"}`); err != nil {
		t.Fatal(err)
	}
	if got, want := w.calls.get(), []string{"ValidateParams org.example.mail.send", "native " + api.MethodInvokeCapability}; !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
}

// Step 3b, registered capabilities: adapters by priority, the next one
// only when one declines.
func TestDispatchAccessibilityOrder(t *testing.T) {
	type adapter struct {
		id       string
		priority int
		exec     func(context.Context, *Execution) (*api.CapabilityResult, error)
	}
	cases := []struct {
		name      string
		adapters  []adapter // in insertion order
		wantCalls []string
		wantCode  api.Code // 0: success
		wantRoute string
		check     func(t *testing.T, e *api.Error)
	}{{
		name: "priority, not insertion order; the first success wins",
		adapters: []adapter{
			{"late", 20, succeed},
			{"early", 10, failWith(api.CodeNoATSPI2Support)},
			{"middle", 10, succeed}, // same priority as early: after it
		},
		wantCalls: []string{"early.ResolveElement", "early.Execute", "middle.ResolveElement", "middle.Execute"},
		wantRoute: "accessibility:middle",
	}, {
		name: "TARGET_AMBIGUOUS stops",
		adapters: []adapter{
			{"first", 1, failWith(api.CodeTargetAmbiguous)},
			{"second", 2, succeed},
		},
		wantCalls: []string{"first.ResolveElement", "first.Execute"},
		wantCode:  api.CodeTargetAmbiguous,
		wantRoute: "accessibility:first",
	}, {
		name: "an error after the action may have run stops",
		adapters: []adapter{
			{"first", 1, failWith(api.CodeInputSimulationFailed)},
			{"second", 2, succeed},
		},
		wantCalls: []string{"first.ResolveElement", "first.Execute"},
		wantCode:  api.CodeInputSimulationFailed,
		wantRoute: "accessibility:first",
	}, {
		name: "all decline, differently: INTERNAL_ERROR with the attempts",
		adapters: []adapter{
			{"a", 1, failWith(api.CodeNoATSPI2Support)},
			{"b", 2, failWith(api.CodeActionNotSupported)},
			{"c", 3, failWith(api.CodeElementNotFound)},
		},
		wantCalls: []string{"a.ResolveElement", "a.Execute", "b.ResolveElement", "b.Execute", "c.ResolveElement", "c.Execute"},
		wantCode:  api.CodeInternalError,
		wantRoute: routeAccessibility,
		check: func(t *testing.T, e *api.Error) {
			if mustInfo(e.Code).StreamCode != 500 {
				t.Errorf("stream code %d, want 500", mustInfo(e.Code).StreamCode)
			}
			raw, _ := json.Marshal(e.Data)
			var got struct {
				CapabilityID string           `json:"capability_id"`
				Attempts     []map[string]any `json:"attempts"`
			}
			json.Unmarshal(raw, &got)
			want := []map[string]any{
				{"adapter": "a", "code": "NO_ATSPI2_SUPPORT", "message": "NO_ATSPI2_SUPPORT failed"},
				{"adapter": "b", "code": "ACTION_NOT_SUPPORTED", "message": "ACTION_NOT_SUPPORTED failed"},
				{"adapter": "c", "code": "ELEMENT_NOT_FOUND", "message": "ELEMENT_NOT_FOUND failed"},
			}
			if got.CapabilityID != "org.example.editor.bold" {
				t.Errorf("capability_id = %q", got.CapabilityID)
			}
			if d := cmp.Diff(want, got.Attempts); d != "" {
				t.Errorf("attempts (-want +got):\n%s", d)
			}
		},
	}, {
		name: "all decline alike: the first adapter's error",
		adapters: []adapter{
			{"a", 1, func(context.Context, *Execution) (*api.CapabilityResult, error) {
				return nil, api.Errorf(api.CodeElementNotFound, nil, "a: no such element")
			}},
			{"b", 2, failWith(api.CodeElementNotFound)},
		},
		wantCalls: []string{"a.ResolveElement", "a.Execute", "b.ResolveElement", "b.Execute"},
		wantCode:  api.CodeElementNotFound,
		wantRoute: routeAccessibility,
		check: func(t *testing.T, e *api.Error) {
			if e.Message != "a: no such element" {
				t.Errorf("message %q, want the first adapter's", e.Message)
			}
		},
	}, {
		name: "no adapter reaches the app: not running, with the attempts",
		adapters: []adapter{
			{"a", 1, failWith(api.CodeNoATSPI2Support)},
			{"b", 2, failWith(api.CodeAppNotFound)},
		},
		wantCalls: []string{"a.ResolveElement", "a.Execute", "b.ResolveElement", "b.Execute"},
		wantCode:  api.CodeAppNotFound,
		wantRoute: routeAccessibility,
		check: func(t *testing.T, e *api.Error) {
			d := e.DataMap()
			attempts, _ := d["attempts"].([]map[string]any)
			if d["app_id"] != "org.example.editor" || d["running"] != false || len(attempts) != 2 {
				t.Errorf("data = %v, want app_id, running false and two attempts", d)
			}
		},
	}, {
		name:      "no adapters: not running, as before",
		wantCode:  api.CodeAppNotFound,
		wantRoute: "",
		check: func(t *testing.T, e *api.Error) {
			if d := e.DataMap(); d["app_id"] != "org.example.editor" || d["running"] != false {
				t.Errorf("data = %v, want app_id and running false", d)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newDispatchWorld(t, RateLimits{})
			w.register(t, "org.example.editor", editorManifest, nil)
			for _, a := range tc.adapters {
				w.access(t, a.priority, &fakeAccess{id: a.id, exec: a.exec})
			}
			res, err := w.exec(w.agent, "org.example.editor.bold", "")
			if tc.wantCode == 0 {
				if err != nil || res.Status != api.StatusSuccess {
					t.Fatalf("got %+v, %v; want success", res, err)
				}
			} else {
				e := wantCode(t, err, tc.wantCode)
				if tc.check != nil {
					tc.check(t, e)
				}
			}
			if got := w.calls.get(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("calls = %v, want %v", got, tc.wantCalls)
			}
			w.wantRoute(t, tc.wantRoute)
		})
	}
}

// Element auto-resolution runs only when the params name no element, and
// Execute sees the element either way. A resolution that finds nothing is
// a decline.
func TestDispatchElementResolution(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	w.register(t, "org.example.editor", editorManifest, nil)
	none := w.access(t, 1, &fakeAccess{id: "none", resolve: func(*Execution) (*ElementRef, error) {
		return nil, api.Errorf(api.CodeElementNotFound, nil, "no element")
	}, exec: succeed})
	atspi := w.access(t, 2, &fakeAccess{id: "atspi", resolve: func(ex *Execution) (*ElementRef, error) {
		if ex.Element != nil || ex.Capability.ID != "org.example.editor.click" {
			return nil, fmt.Errorf("resolve got %+v", ex)
		}
		return &ElementRef{BusName: ":1.42", AccessiblePath: "/org/a11y/atspi/accessible/7"}, nil
	}, exec: succeed})

	if _, err := w.exec(w.agent, "org.example.editor.click", `{}`); err != nil {
		t.Fatal(err)
	}
	want := []string{"none.ResolveElement", "atspi.ResolveElement", "atspi.Execute"}
	if got := w.calls.get(); !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	if len(none.executions()) != 0 {
		t.Error("an adapter that resolved no element executed")
	}
	ex := atspi.executions()
	if len(ex) != 1 || ex[0].Element == nil || *ex[0].Element != (ElementRef{BusName: ":1.42", AccessiblePath: "/org/a11y/atspi/accessible/7"}) || !ex[0].Registered {
		t.Fatalf("executions = %+v, want the resolved element", ex)
	}
	w.wantRoute(t, "accessibility:atspi")

	// An explicit path skips resolution, on every adapter.
	w.calls.log = nil
	if _, err := w.exec(w.agent, "org.example.editor.click", `{"accessible_path":"/org/a11y/atspi/accessible/9","bus_name":":1.7"}`); err != nil {
		t.Fatal(err)
	}
	if got, want := w.calls.get(), []string{"none.Execute"}; !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	ex = none.executions()
	if len(ex) != 1 || ex[0].Element == nil || *ex[0].Element != (ElementRef{BusName: ":1.7", AccessiblePath: "/org/a11y/atspi/accessible/9"}) {
		t.Errorf("executions = %+v, want the element from the params", ex)
	}
	_, err := w.exec(w.agent, "org.example.editor.click", `{"accessible_path":7}`)
	wantCode(t, err, api.CodeInvalidParams)
}

// Step 3b, unregistered capabilities: detection finds the owner, which
// is asked for confirmation by default, and the execution runs once, on
// the detecting adapter alone.
func TestDispatchUnregisteredDetected(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	ignorant := w.access(t, 1, &fakeAccess{id: "ignorant", exec: succeed})
	var targets []string
	knows := w.access(t, 2, &fakeAccess{id: "knows", detect: func(capabilityID, target string) (string, bool, error) {
		targets = append(targets, target)
		if capabilityID == "org.example.editor.bold" {
			return "org.example.editor", true, nil
		}
		return "", false, nil
	}, exec: succeed})
	late := w.access(t, 3, &fakeAccess{id: "late", detect: func(string, string) (string, bool, error) { return "org.example.editor", true, nil }, exec: succeed})

	_, err := w.exec(w.agent, "org.example.editor.bold", `{"anything":1}`)
	id := required(t, err)
	w.wantRoute(t, "accessibility:knows")
	if got, want := w.calls.get(), []string{"ignorant.Detect", "knows.Detect"}; !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	confs, _ := w.b.Confirmations(w.user)
	if len(confs.Confirmations) != 1 || confs.Confirmations[0].AppID != "org.example.editor" || confs.Confirmations[0].ConfirmationType != "bold" {
		t.Fatalf("confirmations = %+v", confs.Confirmations)
	}
	if _, err := w.b.ApproveConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: id}); err != nil {
		t.Fatal(err)
	}
	w.calls.log = nil
	res, err := w.b.Execute(w.agent, &api.ExecuteRequest{Capability: "org.example.editor.bold", Params: json.RawMessage(`{"anything":1}`), ConfirmationID: id})
	if err != nil || res.Status != api.StatusSuccess {
		t.Fatalf("approved: %+v, %v", res, err)
	}
	if got, want := w.calls.get(), []string{"ignorant.Detect", "knows.Detect", "knows.ResolveElement", "knows.Execute"}; !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	ex := knows.executions()
	want := api.Capability{ID: "org.example.editor.bold", AppID: "org.example.editor", Name: "bold", Tier: 2, TrustLevel: api.TrustConfirm, TimeoutMS: DefaultTimeout.Milliseconds()}
	if len(ex) != 1 || ex[0].Registered || ex[0].Element == nil {
		t.Fatalf("executions = %+v", ex)
	}
	if d := cmp.Diff(want, ex[0].Capability); d != "" {
		t.Errorf("capability (-want +got):\n%s", d)
	}
	e, _ := w.lastInvoke(t)
	if e.AppID != "org.example.editor" || e.Outcome != api.StatusSuccess {
		t.Errorf("audit entry %+v, want the detected app", e)
	}
	w.wantRoute(t, "accessibility:knows")

	// The user may run it without asking, and a decline of the detecting
	// adapter is the answer: no other adapter is tried.
	w.calls.log = nil
	knows.exec = failWith(api.CodeActionNotSupported)
	_, err = w.b.Execute(w.user, &api.ExecuteRequest{Capability: "org.example.editor.bold", Admin: true})
	wantCode(t, err, api.CodeActionNotSupported)
	if got, want := w.calls.get(), []string{"ignorant.Detect", "knows.Detect", "knows.ResolveElement", "knows.Execute"}; !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	if len(ignorant.executions())+len(late.executions()) != 0 {
		t.Error("an adapter other than the detecting one executed")
	}

	// A named app is passed as the target; a capability nobody claims
	// keeps the old errors.
	w.calls.log = nil
	_, err = w.b.InvokeCapability(w.agent, &api.InvokeCapabilityParams{CapabilityID: "org.example.other.x", AppID: "org.example.other", Source: api.SourceSystemIntelligence})
	wantCode(t, err, api.CodeAppNotFound)
	if targets[len(targets)-1] != "org.example.other" {
		t.Errorf("Detect targets %q, want the named app last", targets)
	}
	w.wantRoute(t, "")
	late.detect = nil
	pe := wantCode(t, func() error { _, err := w.exec(w.agent, "org.example.other.x", ""); return err }(), api.CodeCapabilityNotFound)
	if d := pe.DataMap(); d["capability_id"] != "org.example.other.x" || len(d) != 1 {
		t.Errorf("data = %v, want capability_id alone", d)
	}
}

// The user's policy may relax a detected capability's trust level.
func TestDispatchUnregisteredPolicy(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	pol, err := policy.Parse("policy.toml", []byte("[apps.\"org.example.editor\".capabilities.bold]\ntrust_level = \"auto\"\ntimeout = \"2s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	w.b.setPolicy(pol)
	a := w.access(t, 1, &fakeAccess{id: "atspi", detect: func(string, string) (string, bool, error) { return "org.example.editor", true, nil }, exec: succeed})
	if _, err := w.exec(w.agent, "org.example.editor.bold", ""); err != nil {
		t.Fatalf("auto by policy: %v", err)
	}
	ex := a.executions()
	if len(ex) != 1 || ex[0].Capability.TrustLevel != api.TrustAuto || ex[0].Capability.TimeoutMS != 2000 {
		t.Errorf("executions = %+v, want auto with the policy's timeout", ex)
	}
	// The policy names one capability; another is confirm as detected.
	// A capability id outside the app's namespace keeps its whole id as
	// its name.
	if _, err := w.exec(w.agent, "italic", ""); !errors.Is(err, api.ErrConfirmationRequired) {
		t.Errorf("got %v, want CONFIRMATION_REQUIRED", err)
	}
	confs, _ := w.b.Confirmations(w.user)
	if len(confs.Confirmations) != 1 || confs.Confirmations[0].ConfirmationType != "italic" || confs.Confirmations[0].AppID != "org.example.editor" {
		t.Errorf("confirmations = %+v", confs.Confirmations)
	}
}

// A revoked app stays refused, registered or detected.
func TestDispatchRevokedDetectedApp(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	w.register(t, "org.example.editor", editorManifest, nil)
	if _, err := w.b.RevokeApp(w.user, &api.RevokeAppParams{AppID: "org.example.editor"}); err != nil {
		t.Fatal(err)
	}
	w.access(t, 1, &fakeAccess{id: "atspi", detect: func(string, string) (string, bool, error) { return "org.example.editor", true, nil }, exec: succeed})
	_, err := w.exec(w.user, "org.example.editor.bold", "")
	wantCode(t, err, api.CodePermissionDenied)
	_, err = w.b.InvokeCapability(w.user, &api.InvokeCapabilityParams{CapabilityID: "org.example.editor.bold", AppID: "org.example.editor", Source: api.SourceSystemIntelligence, Admin: true})
	wantCode(t, err, api.CodePermissionDenied)
	if slices.Contains(w.calls.get(), "atspi.Execute") {
		t.Error("a revoked app's capability was executed")
	}
}

// Execute's target must be the registry's owner.
func TestExecuteTarget(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	w.register(t, "org.example.editor", editorManifest, nil)
	w.access(t, 1, &fakeAccess{id: "atspi", detect: func(string, string) (string, bool, error) { return "org.example.other", true, nil }, exec: succeed})
	for _, target := range []string{"org.example.other", "org.example.nobody"} {
		_, err := w.b.Execute(w.agent, &api.ExecuteRequest{Capability: "org.example.editor.bold", Target: target})
		wantCode(t, err, api.CodeCapabilityNotFound)
	}
	if _, err := w.b.Execute(w.agent, &api.ExecuteRequest{Capability: "org.example.editor.bold", Target: "org.example.editor"}); err != nil {
		t.Errorf("target = owner: %v", err)
	}
	_, err := w.b.Execute(w.agent, &api.ExecuteRequest{})
	wantCode(t, err, api.CodeInvalidParams)
}

// Step 4: the route runs under the capability's timeout, and no adapter
// is asked after it expired.
func TestDispatchTimeout(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	w.register(t, "org.example.editor", editorManifest, nil)
	cancelled := make(chan struct{})
	w.access(t, 1, &fakeAccess{id: "stuck", exec: func(ctx context.Context, ex *Execution) (*api.CapabilityResult, error) {
		<-ctx.Done()
		close(cancelled)
		// What an adapter whose D-Bus call was cancelled might say.
		return nil, api.Errorf(api.CodeNoATSPI2Support, nil, "call cancelled")
	}})
	w.access(t, 2, &fakeAccess{id: "next", exec: succeed})
	_, err := w.exec(w.agent, "org.example.editor.slow", "")
	pe := wantCode(t, err, api.CodeExecutionTimeout)
	// 50 ms in the manifest, raised to the policy's minimum.
	if want := policy.MinTimeout.Milliseconds(); mustInfo(pe.Code).StreamCode != 504 || pe.DataMap()["timeout_ms"] != want {
		t.Errorf("error %v data %v, want 504 with timeout_ms %d", pe, pe.Data, want)
	}
	<-cancelled
	if slices.Contains(w.calls.get(), "next.Execute") {
		t.Error("an adapter was asked after the timeout")
	}
	w.wantRoute(t, "accessibility:stuck")

	// The platform route too.
	plat := &fakePlatform{calls: w.calls, exec: func(ctx context.Context, ex *Execution) (*api.CapabilityResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	if err := w.b.SetPlatformAdapter(plat); err != nil {
		t.Fatal(err)
	}
	_, err = w.exec(w.agent, "compositor.windows.wait", "")
	wantCode(t, err, api.CodeExecutionTimeout)
	w.wantRoute(t, routePlatform)
}

// Step 4: the rate limits apply to every route; the rejection is audited
// with the route.
func TestDispatchRateLimited(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{PerApp: 1, PerAppBurst: 1})
	w.register(t, "org.example.editor", editorManifest, nil)
	w.access(t, 1, &fakeAccess{id: "atspi", detect: func(string, string) (string, bool, error) { return "org.example.detected", true, nil }, exec: succeed})
	if _, err := w.exec(w.agent, "org.example.editor.bold", ""); err != nil {
		t.Fatal(err)
	}
	pe := wantCode(t, func() error { _, err := w.exec(w.agent, "org.example.editor.bold", ""); return err }(), api.CodeRateLimited)
	if mustInfo(pe.Code).StreamCode != 429 {
		t.Errorf("stream code %d, want 429", mustInfo(pe.Code).StreamCode)
	}
	w.wantRoute(t, routeAccessibility)
	if _, err := w.b.Execute(w.user, &api.ExecuteRequest{Capability: "org.example.detected.x", Admin: true}); err != nil {
		t.Fatal(err)
	}
	_, err := w.b.Execute(w.user, &api.ExecuteRequest{Capability: "org.example.detected.x", Admin: true})
	wantCode(t, err, api.CodeRateLimited)
	w.wantRoute(t, "accessibility:atspi")
}

// A deferred job of an app without a native channel runs through the
// accessibility adapters when its undo window closes.
func TestDispatchDeferredJobUsesAccessibility(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	w.register(t, "org.example.editor", editorManifest, nil)
	a := w.access(t, 1, &fakeAccess{id: "atspi", exec: succeed})
	_, err := w.exec(w.agent, "org.example.editor.erase", "")
	id := required(t, err)
	w.wantRoute(t, routeAccessibility)
	if _, err := w.b.ApproveConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: id}); err != nil {
		t.Fatal(err)
	}
	res, err := w.b.Execute(w.agent, &api.ExecuteRequest{Capability: "org.example.editor.erase", ConfirmationID: id})
	if err != nil || res.Status != api.StatusDeferred {
		t.Fatalf("approved erase: %+v, %v; want deferred", res, err)
	}
	if len(a.executions()) != 0 {
		t.Fatal("ran before the undo window closed")
	}
	w.clk.Advance(5 * time.Second)
	waitFor(t, func() bool { return len(a.executions()) == 1 })
	waitFor(t, func() bool {
		jobs, _ := w.b.Jobs(context.Background(), &api.JobsListParams{})
		return len(jobs.Jobs) == 1 && jobs.Jobs[0].State == api.JobDone
	})
}

func TestAddAccessibilityAdapterRefusesDuplicates(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	w.access(t, 1, &fakeAccess{id: "atspi"})
	if err := w.b.AddAccessibilityAdapter(&fakeAccess{id: "atspi"}, 2); err == nil {
		t.Error("a second adapter with the same id was bound")
	}
	if err := w.b.AddAccessibilityAdapter(&fakeAccess{}, 2); err == nil {
		t.Error("an adapter without an id was bound")
	}
}

// treeAccess adds the optional ElementTree and DetectApp.
type treeAccess struct {
	fakeAccess
	tree      func(appID string) ([]api.ElementInfo, error)
	detectApp func(appID string) (*api.DetectionResult, error)
}

func (a *treeAccess) ElementTree(ctx context.Context, appID string) ([]api.ElementInfo, error) {
	a.calls.add(a.id + ".ElementTree")
	return a.tree(appID)
}

func (a *treeAccess) DetectApp(ctx context.Context, appID string) (*api.DetectionResult, error) {
	a.calls.add(a.id + ".DetectApp")
	return a.detectApp(appID)
}

func TestElementTreeAndDetectAskAdapters(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	_, err := w.b.ElementTree(w.agent, "org.example.editor")
	wantCode(t, err, api.CodeNoATSPI2Support)

	w.access(t, 1, &fakeAccess{id: "plain"}) // implements neither
	noBus := &treeAccess{fakeAccess: fakeAccess{id: "nobus", calls: w.calls},
		tree:      func(string) ([]api.ElementInfo, error) { return nil, api.ErrNoATSPI2Support },
		detectApp: func(string) (*api.DetectionResult, error) { return nil, api.ErrNoATSPI2Support }}
	name := "Bold"
	atspi := &treeAccess{fakeAccess: fakeAccess{id: "atspi", calls: w.calls},
		tree: func(appID string) ([]api.ElementInfo, error) {
			if appID != "org.example.editor" {
				return nil, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": appID}, "%s is not on the bus", appID)
			}
			return []api.ElementInfo{{AccessiblePath: "/org/a11y/atspi/accessible/7", BusName: ":1.42", Role: "push button", Name: &name}}, nil
		},
		detectApp: func(appID string) (*api.DetectionResult, error) {
			return &api.DetectionResult{Detected: appID == "org.example.editor", State: "running", Capabilities: 3}, nil
		}}
	// Bound in the other order: the priority decides.
	for _, a := range []struct {
		a AccessibilityAdapter
		p int
	}{{atspi, 3}, {noBus, 2}} {
		if err := w.b.AddAccessibilityAdapter(a.a, a.p); err != nil {
			t.Fatal(err)
		}
	}

	els, err := w.b.ElementTree(w.agent, "org.example.editor")
	if err != nil || len(els) != 1 || els[0].BusName != ":1.42" {
		t.Fatalf("element tree: %+v, %v", els, err)
	}
	if got, want := w.calls.get(), []string{"nobus.ElementTree", "atspi.ElementTree"}; !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	_, err = w.b.ElementTree(w.agent, "org.example.gone")
	wantCode(t, err, api.CodeAppNotFound)

	res, err := w.b.Detect(w.agent, "org.example.editor")
	want := &api.DetectionResult{AppID: "org.example.editor", Detected: true, Via: "atspi", Tier: 2, State: "running", Capabilities: 3}
	if err != nil || !cmp.Equal(res, want) {
		t.Errorf("detect: %+v, %v; want %+v", res, err, want)
	}
	res, err = w.b.Detect(w.agent, "org.example.gone")
	if err != nil || res.Detected {
		t.Errorf("detect of an unknown app: %+v, %v", res, err)
	}
	// A manifest still wins.
	w.register(t, "org.example.editor", editorManifest, nil)
	res, _ = w.b.Detect(w.agent, "org.example.editor")
	if res.Via != "manifest" || res.Tier != 1 {
		t.Errorf("detect of a registered app: %+v", res)
	}
}

// The connection's limit is applied before detection, and only once.
func TestDispatchConnectionLimitBeforeDetection(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{PerConnection: 1, PerConnectionBurst: 2})
	w.access(t, 1, &fakeAccess{id: "atspi", detect: func(string, string) (string, bool, error) { return "org.example.editor", true, nil }, exec: succeed})
	for range 2 {
		if _, err := w.b.Execute(w.user, &api.ExecuteRequest{Capability: "org.example.editor.bold", Admin: true}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := w.b.Execute(w.user, &api.ExecuteRequest{Capability: "org.example.editor.bold", Admin: true})
	wantCode(t, err, api.CodeRateLimited)
	n := 0
	for _, c := range w.calls.get() {
		if c == "atspi.Detect" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d detections for 2 allowed executions and 1 rejected, want 2", n)
	}
}

// TestAccessibleNameAliases: a manifest's accessible_name reaches the
// accessibility adapters at registration, for apps registered before an
// adapter was added, and is taken back on revocation; executions then
// carry the manifest's app id, which the adapter maps.
func TestAccessibleNameAliases(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	calc := `{"version":"1.0","accessible_name":"gnome-calculator","capabilities":[{"name":"activate","tier":2,"trust_level":"auto",` +
		`"parameters":[{"name":"role","type":"string"},{"name":"name","type":"string"}]}],"signature":""}`
	w.register(t, "org.gnome.Calculator", calc, nil)
	a := w.access(t, 1, &fakeAccess{id: "a", exec: succeed})
	if got := a.aliasCalls(); len(got) != 1 || got[0] != "org.gnome.Calculator=gnome-calculator" {
		t.Fatalf("aliases after adding the adapter = %q, want that of the app registered before", got)
	}
	w.register(t, "org.example.plain", `{"version":"1.0","capabilities":[{"name":"x","tier":1,"trust_level":"auto"}],"signature":""}`, nil)
	w.register(t, "org.gnome.Calculator", calc, nil)
	res, err := w.b.InvokeCapability(w.agent, &api.InvokeCapabilityParams{CapabilityID: "org.gnome.Calculator.activate", AppID: "org.gnome.Calculator",
		Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"role":"push button","name":"7"}`)})
	if err != nil || res.Status != api.StatusSuccess {
		t.Fatalf("invoke through the alias: %+v, %v", res, err)
	}
	if ex := a.executions(); len(ex) != 1 || ex[0].Capability.AppID != "org.gnome.Calculator" {
		t.Fatalf("executions = %+v", ex)
	}
	if _, err := w.b.RevokeApp(w.user, &api.RevokeAppParams{AppID: "org.gnome.Calculator", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"org.gnome.Calculator=gnome-calculator",
		"org.example.plain=",
		"org.gnome.Calculator=gnome-calculator",
		"org.gnome.Calculator=",
	}
	if diff := cmp.Diff(want, a.aliasCalls()); diff != "" {
		t.Errorf("aliases (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a.ResolveElement", "a.Execute"}, w.calls.get()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// rootPlatform has apps at the domains' roots: system.capture,
// compositor.focus_surface.
type rootPlatform struct{ fakePlatform }

func (p *rootPlatform) Manifests() map[string]*api.Manifest {
	return map[string]*api.Manifest{
		"system":     {Version: "1.0", Capabilities: []api.CapabilityDecl{{Name: "capture", Tier: 3, TrustLevel: api.TrustAuto}}},
		"compositor": {Version: "1.0", Capabilities: []api.CapabilityDecl{{Name: "focus_surface", Tier: 3, TrustLevel: api.TrustAuto}}},
	}
}

func TestDispatchPlatformDomainRoots(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	plat := &rootPlatform{fakePlatform{calls: w.calls}}
	if err := w.b.SetPlatformAdapter(plat); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"system.capture", "compositor.focus_surface"} {
		res, err := w.exec(w.agent, id, `{}`)
		if err != nil || res.Status != api.StatusSuccess {
			t.Fatalf("%s: %+v, %v", id, res, err)
		}
		w.wantRoute(t, routePlatform)
	}
}
