package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
)

// The audit entries the broker writes follow the contract in api: each
// kind is one of api.AuditKinds, and each detail decodes, with no member
// left over, into the struct api documents for its kind.
func TestAuditEntriesFollowTheContract(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	const manifest = `{"version":"1.0","capabilities":[
		{"name":"send","tier":1,"trust_level":"auto","parameters":[{"name":"to","type":"string"}]},
		{"name":"purge","tier":1,"trust_level":"confirm"}],"signature":""}`
	app := &recPeer{call: func(ctx context.Context, method string, params any) (json.RawMessage, error) {
		switch method {
		case api.MethodInvokeCapability:
			return json.RawMessage(`{"status":"success"}`), nil
		case api.MethodInvokeAction:
			return json.RawMessage(`{"executed":true}`), nil
		}
		return nil, api.ErrSurfaceNotFound
	}}
	w.register(t, "org.example.mail", manifest, app)
	actx := WithSession(context.Background(), w.b.OpenSession(SessionInfo{Transport: "unix"}, app.endpoint()))
	steps := []struct {
		name string
		do   func() error
	}{
		{"refused registration", func() error {
			_, err := w.b.RegisterCapability(w.agent, &api.RegisterCapabilityParams{AppID: "org.example.bad", Manifest: json.RawMessage(`{"version":"1.0"}`)})
			return wantErr(err)
		}},
		{"invocation", func() error {
			_, err := w.b.InvokeCapability(w.agent, &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.send", AppID: "org.example.mail",
				Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"to":"a"}`)})
			return err
		}},
		{"failed invocation", func() error {
			_, err := w.b.InvokeCapability(w.agent, &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.send", AppID: "org.example.mail",
				Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"to":5}`)})
			return wantErr(err)
		}},
		{"confirmation", func() error {
			_, err := w.b.InvokeCapability(w.agent, &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.purge", AppID: "org.example.mail",
				Source: api.SourceSystemIntelligence})
			return wantErr(err)
		}},
		{"adapter", func() error {
			_, err := w.b.RegisterAdapter(actx, &api.RegisterAdapterParams{SurfaceType: "test", AdapterID: "test-adapter", SupportedTiers: []int{2}})
			return err
		}},
		{"action", func() error {
			// Confirm, the trust level of a detected capability: the
			// action is audited with that outcome.
			_, err := w.b.InvokeAction(w.agent, &api.InvokeActionParams{SurfaceID: "org.example.mail/1", ElementID: "e-1", Action: "click"})
			return wantErr(err)
		}},
		{"policy", func() error { _, err := w.b.ReloadPolicy(w.user); return err }},
		{"revoke", func() error {
			_, err := w.b.RevokeApp(w.agent, &api.RevokeAppParams{AppID: "org.example.mail", Reason: "test"})
			return err
		}},
		{"allow", func() error {
			_, err := w.b.AllowApp(w.user, &api.AppsAllowParams{AppID: "org.example.mail"})
			return err
		}},
		{"agent opened", func() error {
			w.b.SetAgentEndpoints(fakeAgentEndpoints{})
			_, err := w.b.OpenAgent(w.user, &api.AgentsOpenParams{Name: "probe"})
			return err
		}},
		{"agent closed", func() error {
			_, err := w.b.CloseAgent(w.user, &api.AgentsCloseParams{Name: "probe"})
			return err
		}},
		{"dashboard login", func() error {
			w.b.SetDashboard(fakeDashboard{})
			_, err := w.b.DashboardLogin(w.user)
			return err
		}},
		{"dashboard session", func() error { return w.b.DashboardSession(w.user, "127.0.0.1:7881", "0123abcd", true) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	tail, err := w.b.AuditTail(w.user, &api.AuditTailParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	details := map[string]func() any{
		api.AuditAction:       func() any { return new(api.AuditActionDetail) },
		api.AuditAdapter:      func() any { return new(api.AuditAdapterDetail) },
		api.AuditAgent:        func() any { return new(api.AuditAgentDetail) },
		api.AuditAllow:        func() any { return new(api.AuditAllowDetail) },
		api.AuditConfirmation: func() any { return new(api.AuditConfirmationDetail) },
		api.AuditDashboard:    func() any { return new(api.AuditDashboardDetail) },
		api.AuditInvoke:       func() any { return new(api.AuditInvokeDetail) },
		api.AuditInvokeAdmin:  func() any { return new(api.AuditInvokeDetail) },
		api.AuditJob:          func() any { return new(api.AuditJobDetail) },
		api.AuditPolicy:       func() any { return new(api.AuditPolicyDetail) },
		api.AuditRevoke:       func() any { return new(api.AuditRevokeDetail) },
	}
	seen := map[string]bool{}
	for _, e := range tail.Entries {
		seen[e.Kind] = true
		if !slices.Contains(api.AuditKinds, e.Kind) {
			t.Errorf("entry %d: kind %q is not in api.AuditKinds", e.Seq, e.Kind)
			continue
		}
		if len(e.Detail) == 0 {
			continue
		}
		var v any
		switch {
		case e.Kind == api.AuditRegister && e.Outcome == api.AuditSuccess:
			v = new(api.AuditRegisterDetail)
		case e.Kind == api.AuditRegister:
			v = new(api.AuditErrorDetail)
		case details[e.Kind] != nil:
			v = details[e.Kind]()
		default:
			t.Errorf("entry %d (%s): detail %s, but api documents none", e.Seq, e.Kind, e.Detail)
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(e.Detail))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Errorf("entry %d (%s, %s): detail %s does not decode into %T: %v", e.Seq, e.Kind, e.Outcome, e.Detail, v, err)
		}
	}
	for _, k := range []string{api.AuditRegister, api.AuditInvoke, api.AuditConfirmation, api.AuditAdapter, api.AuditAction,
		api.AuditPolicy, api.AuditRevoke, api.AuditAllow, api.AuditAgent, api.AuditDashboard} {
		if !seen[k] {
			t.Errorf("no %s entry was written; the steps above should write one", k)
		}
	}
}

// fakeDashboard stands in for the dashboard's logins.
type fakeDashboard struct{}

func (fakeDashboard) NewLogin() (string, time.Time, error) {
	return "http://127.0.0.1:7881/login?token=t", time.Unix(1e9, 0), nil
}
func (fakeDashboard) Address() string { return "127.0.0.1:7881" }

// fakeAgentEndpoints stands in for the daemon's agent sockets.
type fakeAgentEndpoints struct{}

func (fakeAgentEndpoints) OpenAgent(name string) (string, []string, []string, error) {
	return "/run/pcp/agents/" + name + "/pcp.sock", nil, nil, nil
}
func (fakeAgentEndpoints) CloseAgent(string) int { return 0 }

func wantErr(err error) error {
	if err == nil {
		return errors.New("succeeded; want an error")
	}
	return nil
}

// Which notifications are adapter events is the core's decision: the
// adapter events' namespaces are its, whatever the face, and only a
// connection serving an adapter may publish in them.
func TestAdapterEventRule(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	watcher := &recPeer{}
	wctx := WithSession(context.Background(), w.b.OpenSession(SessionInfo{Transport: "unix"}, watcher.endpoint()))
	if _, err := w.b.Subscribe(wctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventAll}}); err != nil {
		t.Fatal(err)
	}
	ad := &recPeer{}
	actx := WithSession(context.Background(), w.b.OpenSession(SessionInfo{Transport: "unix"}, ad.endpoint()))
	focus := json.RawMessage(`{"surface_id":"s-1","focused":true,"sequence":99}`)

	tests := []struct {
		name   string
		ctx    context.Context
		method string
		params json.RawMessage
		ok     bool
		err    *api.Error
	}{
		{"not an adapter event", w.agent, api.MethodHealthCheck, nil, false, nil},
		{"from a connection that is no adapter", w.agent, api.EventSurfaceFocusChanged, focus, true, api.ErrPermissionDenied},
		{"unknown type in the namespace", actx, "surface.exploded", focus, true, api.ErrInvalidParams},
	}
	for _, tc := range tests {
		ok, err := w.b.AdapterEvent(tc.ctx, tc.method, tc.params)
		if ok != tc.ok || (tc.err == nil) != (err == nil) || (tc.err != nil && !errors.Is(err, tc.err)) {
			t.Errorf("%s: AdapterEvent = %v, %v; want %v, %v", tc.name, ok, err, tc.ok, tc.err)
		}
	}
	if _, err := w.b.RegisterAdapter(actx, &api.RegisterAdapterParams{SurfaceType: "test", AdapterID: "a", SupportedTiers: []int{2}}); err != nil {
		t.Fatal(err)
	}
	if ok, err := w.b.AdapterEvent(actx, api.EventSurfaceFocusChanged, json.RawMessage(`[1]`)); !ok || !errors.Is(err, api.ErrInvalidParams) {
		t.Errorf("params not an object: AdapterEvent = %v, %v; want true, INVALID_PARAMS", ok, err)
	}
	if ok, err := w.b.AdapterEvent(actx, api.EventSurfaceFocusChanged, focus); !ok || err != nil {
		t.Fatalf("adapter's event: AdapterEvent = %v, %v; want true, nil", ok, err)
	}
	waitFor(t, func() bool { return slices.Contains(watcher.methods(), api.EventSurfaceFocusChanged) })
	watcher.mu.Lock()
	defer watcher.mu.Unlock()
	var got map[string]any
	for i, m := range watcher.notes {
		if m == api.EventSurfaceFocusChanged {
			json.Unmarshal(watcher.params[i], &got)
		}
	}
	if got["surface_id"] != "s-1" || got["focused"] != true || got["sequence"] == float64(99) {
		t.Errorf("published %v; want the adapter's members, with the daemon's own sequence", got)
	}
	for _, m := range watcher.notes {
		if m == "surface.exploded" {
			t.Error("an unknown event type was published")
		}
	}
}

// An empty event filter means the same on every face, because the rule
// is the core's: the types are required.
func TestSubscribeNeedsEventTypes(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	for _, types := range [][]string{nil, {}} {
		if _, err := w.b.Subscribe(w.agent, &api.SubscribeEventsParams{EventTypes: types}); !errors.Is(err, api.ErrInvalidParams) {
			t.Errorf("Subscribe(event_types %#v) = %v; want INVALID_PARAMS", types, err)
		}
	}
}

func TestCapabilityByID(t *testing.T) {
	w := newDispatchWorld(t, RateLimits{})
	w.register(t, "org.example.mail", `{"version":"1.0","capabilities":[{"name":"send","tier":1,"trust_level":"auto"}],"signature":""}`, &recPeer{})
	c, err := w.b.Capability(w.agent, "org.example.mail.send")
	if err != nil || c.ID != "org.example.mail.send" || !c.Available {
		t.Errorf("Capability(org.example.mail.send) = %+v, %v; want it, available", c, err)
	}
	for _, id := range []string{"org.example.mail.fly", ""} {
		if _, err := w.b.Capability(w.agent, id); !errors.Is(err, api.ErrCapabilityNotFound) {
			t.Errorf("Capability(%q) = %v; want CAPABILITY_NOT_FOUND", id, err)
		}
	}
}
