package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/manifest"
	"github.com/pcp-dev/pcp/internal/store"
)

// recPeer plays a connection: it records what the broker pushes to a
// session (as the event type or notification name, with the params the
// JSON-RPC face would send) and answers the app channel's calls with a
// function of the spec 000 method they would be. Event delivery can be
// made to block, to play a stalled reader.
type recPeer struct {
	mu     sync.Mutex
	notes  []string
	params []json.RawMessage
	call   func(ctx context.Context, method string, params any) (json.RawMessage, error)
	block  chan struct{}
	closed bool
}

// endpoint offers every role but the optional ones of Tier 1.
func (p *recPeer) endpoint() Endpoint {
	return Endpoint{App: p, Adapter: p, Events: p, Closer: p}
}

func (p *recPeer) do(ctx context.Context, method string, params, result any) error {
	if p.call == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	raw, err := p.call(ctx, method, params)
	if err != nil || result == nil {
		return err
	}
	return json.Unmarshal(raw, result)
}

func (p *recPeer) Invoke(ctx context.Context, params *api.InvokeCapabilityParams) (*api.CapabilityResult, error) {
	var res api.CapabilityResult
	if err := p.do(ctx, api.MethodInvokeCapability, params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func (p *recPeer) Ping(ctx context.Context) error { return p.do(ctx, api.MethodHealthCheck, nil, nil) }

func (p *recPeer) Surface(ctx context.Context, id string) (*api.Surface, error) {
	var out api.Surface
	return &out, p.do(ctx, api.MethodQuerySurface, &api.QuerySurfaceParams{SurfaceID: id}, &out)
}

func (p *recPeer) Elements(ctx context.Context, q *api.QueryElementsParams) (*api.QueryElementsResult, error) {
	var out api.QueryElementsResult
	return &out, p.do(ctx, api.MethodQueryElements, q, &out)
}

func (p *recPeer) Action(ctx context.Context, q *api.InvokeActionParams) (*api.InvokeActionResult, error) {
	var out api.InvokeActionResult
	return &out, p.do(ctx, api.MethodInvokeAction, q, &out)
}

func (p *recPeer) Context(ctx context.Context) (*api.SessionContext, error) {
	var out api.SessionContext
	return &out, p.do(ctx, api.MethodQuerySessionContext, nil, &out)
}

func (p *recPeer) Event(subID string, ev *api.Event) error {
	var members map[string]json.RawMessage
	json.Unmarshal(ev.Data, &members)
	members["subscription_id"], _ = json.Marshal(subID)
	members["sequence"], _ = json.Marshal(ev.Sequence)
	members["timestamp"], _ = json.Marshal(ev.Timestamp)
	return p.note(ev.Type, members)
}

func (p *recPeer) EventsLost(m *api.EventsLost) error { return p.note(api.NotifyEventsLost, m) }

func (p *recPeer) SubscriptionEnded(m *api.SubscriptionEnded) error {
	return p.note(api.NotifySubscriptionEnded, m)
}

func (p *recPeer) note(method string, params any) error {
	if p.block != nil {
		<-p.block
	}
	raw, _ := json.Marshal(params)
	p.mu.Lock()
	p.notes = append(p.notes, method)
	p.params = append(p.params, raw)
	p.mu.Unlock()
	return nil
}

func (p *recPeer) Close() error { p.mu.Lock(); p.closed = true; p.mu.Unlock(); return nil }

func (p *recPeer) methods() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.notes...)
}

func newBroker(t *testing.T, path, trustDir string) (*Broker, *store.Store) {
	t.Helper()
	ctx := context.Background()
	var st *store.Store
	var err error
	if path == "" {
		st, err = store.OpenMemory(ctx)
	} else {
		st, err = store.Open(ctx, path)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Limits are tested on their own; here they would only get in the way.
	b, err := New(ctx, Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: trustDir, RateLimits: &RateLimits{}})
	if err != nil {
		t.Fatal(err)
	}
	return b, st
}

const todoManifest = `{"app_id":"org.example.todo","version":"1.0","capabilities":[{"name":"add","tier":1,"trust_level":"auto","parameters":[{"name":"text","type":"string"}]}],"signature":""}`

func signedManifest(t *testing.T, trustDir, publisher, raw string) json.RawMessage {
	t.Helper()
	priv, pub, err := manifest.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if trustDir != "" {
		if err := os.WriteFile(filepath.Join(trustDir, publisher+".pem"), pub, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key, err := manifest.ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := manifest.Sign(json.RawMessage(raw), key)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

func TestSignatures(t *testing.T) {
	trust := t.TempDir()
	b, st := newBroker(t, "", trust)
	defer st.Close()
	defer b.Close()
	app := &recPeer{}
	ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, app.endpoint()))

	signed := signedManifest(t, trust, "acme", todoManifest)
	res, err := b.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: "org.example.todo", Manifest: signed})
	if err != nil {
		t.Fatalf("trusted signature refused: %v", err)
	}
	if len(res.CapabilityIDs) != 1 || res.CapabilityIDs[0] != "org.example.todo.add" {
		t.Errorf("capability ids = %v", res.CapabilityIDs)
	}
	apps, _ := b.Apps(ctx)
	for _, a := range apps.Apps {
		if a.AppID == "org.example.todo" && (a.Publisher != "acme" || !a.Signed) {
			t.Errorf("app = %+v, want signed by acme", a)
		}
	}

	cases := []struct {
		name     string
		appID    string
		manifest json.RawMessage
		want     *api.Error
	}{
		{"unsigned without --allow-unsigned", "org.example.todo", json.RawMessage(todoManifest), api.ErrManifestSignatureInvalid},
		{"untrusted key", "org.example.todo", signedManifest(t, "", "", todoManifest), api.ErrManifestSignatureInvalid},
		{"tampered after signing", "org.example.todo", json.RawMessage(replaceOnce(string(signed), `"trust_level":"auto"`, `"trust_level":"deny"`)), api.ErrManifestSignatureInvalid},
		{"replayed for another app", "org.evil.todo", signed, api.ErrManifestInvalid},
		{"garbage signature", "org.example.todo", json.RawMessage(replaceOnce(todoManifest, `"signature":""`, `"signature":"zz"`)), api.ErrManifestSignatureInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := b.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: c.appID, Manifest: c.manifest})
			if !errors.Is(err, c.want) {
				t.Errorf("got %v, want %v", err, c.want.Code.Name())
			}
		})
	}
}

func replaceOnce(s, old, new string) string {
	if !strings.Contains(s, old) {
		panic("no " + old + " in " + s)
	}
	return strings.Replace(s, old, new, 1)
}

func TestRestartKeepsManifestsAndRevocations(t *testing.T) {
	dir := t.TempDir()
	trust := t.TempDir()
	path := filepath.Join(dir, "pcp.db")
	signed := signedManifest(t, trust, "acme", todoManifest)
	other := signedManifest(t, trust, "acme2", replaceOnce(replaceOnce(todoManifest, "org.example.todo", "org.example.mail"), `"add"`, `"send"`))

	b, st := newBroker(t, path, trust)
	ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, (&recPeer{}).endpoint()))
	if _, err := b.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: "org.example.todo", Manifest: signed}); err != nil {
		t.Fatal(err)
	}
	ctx2 := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, (&recPeer{}).endpoint()))
	if _, err := b.RegisterCapability(ctx2, &api.RegisterCapabilityParams{AppID: "org.example.mail", Manifest: other}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RevokeApp(ctx2, &api.RevokeAppParams{AppID: "org.example.mail", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	st.Close()

	b, st = newBroker(t, path, trust)
	defer st.Close()
	defer b.Close()
	caps, _ := b.QueryCapabilities(context.Background(), &api.QueryCapabilitiesParams{})
	if len(caps.Capabilities) != 1 || caps.Capabilities[0].ID != "org.example.todo.add" || caps.Capabilities[0].Available {
		t.Fatalf("after restart caps = %+v, want org.example.todo.add, unavailable", caps.Capabilities)
	}
	_, err := b.InvokeCapability(context.Background(), &api.InvokeCapabilityParams{CapabilityID: "org.example.todo.add", AppID: "org.example.todo", Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"text":"x"}`)})
	if !errors.Is(err, api.ErrAppNotFound) {
		t.Errorf("invoke of a not-running app: got %v, want APP_NOT_FOUND", err)
	}
	// Still revoked: it cannot come back until the user allows it.
	ctx3 := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, (&recPeer{}).endpoint()))
	if _, err := b.RegisterCapability(ctx3, &api.RegisterCapabilityParams{AppID: "org.example.mail", Manifest: other}); !errors.Is(err, api.ErrPermissionDenied) {
		t.Fatalf("revoked app re-registered after restart: %v", err)
	}
	if _, err := b.AllowApp(ctx3, &api.AppsAllowParams{AppID: "org.example.mail"}); !errors.Is(err, api.ErrPermissionDenied) {
		t.Fatalf("agent lifted a revocation: %v", err)
	}
	user := WithSession(context.Background(), b.OpenSession(SessionInfo{Role: RoleUser, Transport: "unix"}, (&recPeer{}).endpoint()))
	if r, err := b.AllowApp(user, &api.AppsAllowParams{AppID: "org.example.mail"}); err != nil || !r.WasRevoked {
		t.Fatalf("user allow: %+v, %v", r, err)
	}
	if _, err := b.RegisterCapability(ctx3, &api.RegisterCapabilityParams{AppID: "org.example.mail", Manifest: other}); err != nil {
		t.Fatalf("allowed app refused: %v", err)
	}
	v, err := b.AuditVerify(context.Background())
	if err != nil || !v.OK || v.Entries < 5 {
		t.Errorf("audit after restart: %+v, %v", v, err)
	}
}

// A subscriber that stops reading loses events, is told how many, and
// never delays the publisher or other subscribers.
func TestStalledSubscriber(t *testing.T) {
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := New(context.Background(), Config{Apps: st, Audit: st, Journal: st, Jobs: st, SubscriberQueue: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stalled := &recPeer{block: make(chan struct{})}
	healthy := &recPeer{}
	for _, p := range []*recPeer{stalled, healthy} {
		ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, p.endpoint()))
		if _, err := b.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventAll}}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for i := range 100 {
		b.Publish(api.EventSurfaceCreated, "", "s", map[string]any{"n": i})
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("publishing 100 events took %v with a stalled subscriber", d)
	}
	waitFor(t, func() bool { return len(healthy.methods()) >= 5 })
	close(stalled.block) // it reads again
	waitFor(t, func() bool {
		for _, m := range stalled.methods() {
			if m == api.NotifyEventsLost {
				return true
			}
		}
		return false
	})
	stalled.mu.Lock()
	defer stalled.mu.Unlock()
	var lost int64
	for i, m := range stalled.notes {
		if m == api.NotifyEventsLost {
			var l api.EventsLost
			json.Unmarshal(stalled.params[i], &l)
			lost += l.Lost
		}
	}
	delivered := 0
	for _, m := range stalled.notes {
		if m == api.EventSurfaceCreated {
			delivered++
		}
	}
	if lost == 0 || int64(delivered)+lost != 100 {
		t.Errorf("stalled subscriber: delivered %d + lost %d, want 100 in all with some lost", delivered, lost)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A capability that never returns gives EXECUTION_TIMEOUT and the
// invocation's context is cancelled.
func TestTimeoutCancelsExecution(t *testing.T) {
	b, st := newBroker(t, "", "")
	defer st.Close()
	defer b.Close()
	b.cfg.AllowUnsigned = true
	cancelled := make(chan struct{})
	app := &recPeer{call: func(ctx context.Context, method string, params any) (json.RawMessage, error) {
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	}}
	ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, app.endpoint()))
	m := replaceOnce(todoManifest, `"trust_level":"auto"`, `"trust_level":"auto","timeout_ms":30`)
	if _, err := b.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: "org.example.todo", Manifest: json.RawMessage(m)}); err != nil {
		t.Fatal(err)
	}
	_, err := b.InvokeCapability(context.Background(), &api.InvokeCapabilityParams{CapabilityID: "org.example.todo.add", AppID: "org.example.todo", Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"text":"x"}`)})
	if !errors.Is(err, api.ErrExecutionTimeout) {
		t.Fatalf("got %v, want EXECUTION_TIMEOUT", err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the execution's context was not cancelled")
	}
	tail, _ := b.AuditTail(context.Background(), &api.AuditTailParams{Limit: 1})
	if len(tail.Entries) != 1 || tail.Entries[0].Outcome != "EXECUTION_TIMEOUT" {
		t.Errorf("audit tail = %+v, want an EXECUTION_TIMEOUT entry", tail.Entries)
	}
}

func TestConcurrentInvocationsAudited(t *testing.T) {
	b, st := newBroker(t, filepath.Join(t.TempDir(), "pcp.db"), "")
	defer st.Close()
	defer b.Close()
	b.cfg.AllowUnsigned = true
	app := &recPeer{call: func(ctx context.Context, method string, params any) (json.RawMessage, error) {
		return json.RawMessage(`{"status":"success","data":{"ok":true}}`), nil
	}}
	ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, app.endpoint()))
	if _, err := b.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: "org.example.todo", Manifest: json.RawMessage(todoManifest)}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_, err := b.InvokeCapability(context.Background(), &api.InvokeCapabilityParams{CapabilityID: "org.example.todo.add", AppID: "org.example.todo", Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"text":"x"}`)})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	v, err := b.AuditVerify(context.Background())
	if err != nil || !v.OK || v.Entries != 1+16*50 {
		t.Errorf("audit: %+v, %v; want ok with %d entries", v, err, 1+16*50)
	}
}

// An app whose connection stops answering is marked unresponsive by the
// liveness checks: its invocations fail fast with APP_UNRESPONSIVE, and
// it recovers when it answers again.
func TestLiveness(t *testing.T) {
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := New(context.Background(), Config{Apps: st, Audit: st, Journal: st, Jobs: st, AllowUnsigned: true, RateLimits: &RateLimits{},
		LivenessInterval: 10 * time.Millisecond, LivenessTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// While the app "hangs", gate holds a channel that health checks wait on.
	var gate atomic.Pointer[chan struct{}]
	app := &recPeer{call: func(ctx context.Context, method string, params any) (json.RawMessage, error) {
		if method == api.MethodHealthCheck {
			if g := gate.Load(); g != nil {
				select {
				case <-*g:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return json.RawMessage(`{"status":"ok"}`), nil
		}
		return json.RawMessage(`{"status":"success"}`), nil
	}}
	ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, app.endpoint()))
	watcher := &recPeer{}
	wctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, watcher.endpoint()))
	if _, err := b.Subscribe(wctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventAppUnresponsive, api.EventAppResponsive}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: "org.example.todo", Manifest: json.RawMessage(todoManifest)}); err != nil {
		t.Fatal(err)
	}
	call := func() error {
		_, err := b.InvokeCapability(context.Background(), &api.InvokeCapabilityParams{CapabilityID: "org.example.todo.add", AppID: "org.example.todo",
			Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"text":"x"}`)})
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	gate.Store(&hang)
	waitFor(t, func() bool { return errors.Is(call(), api.ErrAppUnresponsive) })
	apps, _ := b.Apps(context.Background())
	for _, a := range apps.Apps {
		if a.AppID == "org.example.todo" && a.State != api.AppUnresponsive {
			t.Errorf("state = %s, want unresponsive", a.State)
		}
	}
	gate.Store(nil)
	close(hang)
	waitFor(t, func() bool { return call() == nil })
	waitFor(t, func() bool { return len(watcher.methods()) >= 2 })
	if m := watcher.methods(); m[0] != api.EventAppUnresponsive || m[1] != api.EventAppResponsive {
		t.Errorf("events = %v, want unresponsive then responsive", m)
	}
}

func TestSubscriptionsPerConnectionBounded(t *testing.T) {
	b, st := newBroker(t, "", "")
	defer st.Close()
	defer b.Close()
	ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, (&recPeer{}).endpoint()))
	for i := range maxSubscriptionsPerSession {
		if _, err := b.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventAll}}); err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
	}
	if _, err := b.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventAll}}); !errors.Is(err, api.ErrRateLimited) {
		t.Errorf("one too many: got %v, want RATE_LIMITED", err)
	}
	other := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, (&recPeer{}).endpoint()))
	if _, err := b.Subscribe(other, &api.SubscribeEventsParams{EventTypes: []string{api.EventAll}}); err != nil {
		t.Errorf("another connection: %v", err)
	}
}

func TestAdaptersPerConnectionBounded(t *testing.T) {
	b, st := newBroker(t, "", "")
	defer st.Close()
	defer b.Close()
	ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, (&recPeer{}).endpoint()))
	for i := range maxAdaptersPerSession {
		if _, err := b.RegisterAdapter(ctx, &api.RegisterAdapterParams{SurfaceType: "x11", AdapterID: fmt.Sprintf("a%d", i), SupportedTiers: []int{2}}); err != nil {
			t.Fatalf("adapter %d: %v", i, err)
		}
	}
	_, err := b.RegisterAdapter(ctx, &api.RegisterAdapterParams{SurfaceType: "x11", AdapterID: "one-more", SupportedTiers: []int{2}})
	if !errors.Is(err, api.ErrRateLimited) {
		t.Errorf("one adapter too many: got %v, want RATE_LIMITED", err)
	}
}
