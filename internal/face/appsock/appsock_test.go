package appsock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
	"github.com/pcp-dev/pcp/internal/tier1"
)

const testApp = "org.example.slow"

var testManifest = json.RawMessage(`{"version":"1.0","capabilities":[` +
	`{"name":"work","tier":1,"trust_level":"auto","timeout_ms":300},` +
	`{"name":"wipe","tier":1,"trust_level":"confirm","parameters":[{"name":"what","type":"string"}]}` +
	`],"signature":""}`)

type fixture struct {
	t     testing.TB
	b     *core.Broker
	srv   *Server
	path  string
	agent context.Context // an agent's connection
}

func newFixture(t testing.TB, cfg core.Config) *fixture {
	t.Helper()
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.Apps, cfg.Audit, cfg.Journal, cfg.Jobs = st, st, st, st
	cfg.AllowUnsigned, cfg.TrustDir = true, t.TempDir()
	if cfg.LivenessInterval == 0 {
		cfg.LivenessInterval = -1
	}
	cfg.RateLimits = &core.RateLimits{}
	b, err := core.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	dir, err := os.MkdirTemp("", "appsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv := New(b, filepath.Join(dir, "apps"), nil)
	t.Cleanup(func() { srv.Close() })
	b.SetAppSockets(srv)
	res, err := b.AppSocket(context.Background(), &api.AppsSocketParams{AppID: testApp, Manifest: testManifest})
	if err != nil {
		t.Fatal(err)
	}
	sess := b.OpenSession(core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: os.Getuid(), PID: os.Getpid()}, core.Endpoint{})
	t.Cleanup(sess.Close)
	return &fixture{t: t, b: b, srv: srv, path: res.Socket, agent: core.WithSession(context.Background(), sess)}
}

// app is a hand-driven Tier 1 app on a real socket.
type app struct {
	t testing.TB
	c net.Conn
	r *frame.Reader
}

// connect dials the per-app socket and completes the handshake, then
// waits until the broker lists the app as running.
func (f *fixture) connect() *app {
	f.t.Helper()
	c, err := net.Dial("unix", f.path)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	a := &app{t: f.t, c: c, r: frame.NewReader(c, 0)}
	if _, ok := a.next().(*tier1.GetManifest); !ok {
		f.t.Fatal("the daemon did not start with GetManifest")
	}
	a.send(tier1.ManifestResponse{AppID: testApp, Manifest: testManifest})
	f.waitState(api.AppRunning)
	return a
}

// waitState waits for the broker to list the app in state want. It polls:
// an app's state has no event to wait on short of a subscription, whose
// agent connection this fixture does not keep.
func (f *fixture) waitState(want string) {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := f.b.Apps(context.Background())
		if err != nil {
			f.t.Fatal(err)
		}
		state := ""
		for _, a := range res.Apps {
			if a.AppID == testApp {
				state = a.State
			}
		}
		if state == want {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("app state %q, want %q", state, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (a *app) next() any {
	a.t.Helper()
	a.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	fr, err := a.r.Next()
	if err != nil {
		a.t.Fatalf("app reading: %v", err)
	}
	m, err := tier1.Decode(fr.Type, fr.Payload)
	if err != nil {
		a.t.Fatalf("app decoding %s: %v", fr.Type, err)
	}
	return m
}

func (a *app) send(m tier1.Message) {
	a.t.Helper()
	p, err := tier1.Encode(m)
	if err != nil {
		a.t.Fatal(err)
	}
	if err := frame.Write(a.c, frame.Frame{Type: m.Type(), Payload: p}); err != nil {
		a.t.Fatal(err)
	}
}

type outcome struct {
	res *api.CapabilityResult
	err error
	at  time.Duration
}

func (f *fixture) invokeAsync(name string, params string) <-chan outcome {
	ch := make(chan outcome, 1)
	start := time.Now()
	go func() {
		p := &api.InvokeCapabilityParams{CapabilityID: testApp + "." + name, AppID: testApp, Source: api.SourceSystemIntelligence}
		if params != "" {
			p.Params = json.RawMessage(params)
		}
		res, err := f.b.InvokeCapability(f.agent, p)
		ch <- outcome{res, err, time.Since(start)}
	}()
	return ch
}

func wait(t testing.TB, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("invocation never returned")
		return outcome{}
	}
}

func TestHungAppTimesOut(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := newFixture(t, core.Config{})
	a := f.connect()
	ch := f.invokeAsync("work", "")
	inv, ok := a.next().(*tier1.InvokeCapability)
	if !ok || inv.CapabilityID != testApp+".work" || inv.DeadlineMS == 0 || inv.DeadlineMS > 300 {
		t.Fatalf("app received %+v, want InvokeCapability of work with a deadline of at most 300 ms", inv)
	}
	// The app never answers.
	o := wait(t, ch)
	if !errors.Is(o.err, api.ErrExecutionTimeout) {
		t.Fatalf("hung app: err = %v, want EXECUTION_TIMEOUT", o.err)
	}
	if o.at < 250*time.Millisecond {
		t.Errorf("timed out after %v, before the 300 ms timeout", o.at)
	}
	// A late reply is dropped, not a protocol error: the app goes on.
	a.send(tier1.CapabilityResultMsg{RequestID: inv.RequestID, Status: api.StatusSuccess})
	ch = f.invokeAsync("work", "")
	inv = a.next().(*tier1.InvokeCapability)
	a.send(tier1.CapabilityResultMsg{RequestID: inv.RequestID, Status: api.StatusSuccess, Data: json.RawMessage(`"done"`)})
	if o := wait(t, ch); o.err != nil || string(o.res.Data) != `"done"` {
		t.Fatalf("after a late reply: %+v, %v", o.res, o.err)
	}
}

func TestCrashMidInvoke(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := newFixture(t, core.Config{})
	a := f.connect()
	ch := f.invokeAsync("work", "")
	a.next()
	a.c.Close() // the app dies with the invocation in flight
	o := wait(t, ch)
	if !errors.Is(o.err, api.ErrAppUnresponsive) || !strings.Contains(api.AsError(o.err).Message, "went away") {
		t.Fatalf("crash mid-invoke: err = %v, want APP_UNRESPONSIVE", o.err)
	}
	f.waitState(api.AppNotRunning)
	o = wait(t, f.invokeAsync("work", ""))
	if !errors.Is(o.err, api.ErrAppNotFound) {
		t.Fatalf("while gone: err = %v, want APP_NOT_FOUND", o.err)
	}
	// It reconnects to the same path and serves again.
	a = f.connect()
	ch = f.invokeAsync("work", "")
	inv := a.next().(*tier1.InvokeCapability)
	a.send(tier1.CapabilityResultMsg{RequestID: inv.RequestID, Status: api.StatusSuccess})
	if o := wait(t, ch); o.err != nil {
		t.Fatalf("after reconnecting: %v", o.err)
	}
}

func TestProtocolErrorFailsCallsInFlight(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := newFixture(t, core.Config{})
	a := f.connect()
	ch := f.invokeAsync("work", "")
	a.next()
	a.c.Write([]byte{byte(frame.CapabilityResultMsg), 0, 0, 0, 2, 0xff, 0xff})
	o := wait(t, ch)
	e := api.AsError(o.err)
	if e == nil || e.Code != api.CodeInternalError || !strings.Contains(e.Message, "broke the Tier 1 protocol") {
		t.Fatalf("protocol error mid-invoke: err = %v, want INTERNAL_ERROR naming the protocol error", o.err)
	}
	sd, ok := a.next().(*tier1.AppShutdown)
	if !ok || !strings.HasPrefix(sd.Reason, "protocol error: ") {
		t.Fatalf("app got %+v, want AppShutdown with the protocol error", sd)
	}
}

func TestValidateBeforeConfirmation(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := newFixture(t, core.Config{})
	a := f.connect()
	ch := f.invokeAsync("wipe", `{"what":"everything"}`)
	v, ok := a.next().(*tier1.ValidateParamsMsg)
	if !ok || v.CapabilityID != testApp+".wipe" || string(v.Params) != `{"what":"everything"}` {
		t.Fatalf("app received %+v, want ValidateParamsMsg for wipe", v)
	}
	a.send(tier1.ValidateResultMsg{RequestID: v.RequestID, Error: &tier1.ErrorInfo{Code: int32(api.CodeInvalidParams), Message: "what: not wipeable", Data: json.RawMessage(`{"field":"params.what"}`)}})
	o := wait(t, ch)
	if !errors.Is(o.err, api.ErrInvalidParams) || api.AsError(o.err).DataMap()["field"] != "params.what" {
		t.Fatalf("refused params: err = %v, want the app's INVALID_PARAMS", o.err)
	}
	if c, _ := f.b.Confirmations(context.Background()); len(c.Confirmations) != 0 {
		t.Errorf("the user was asked to confirm what the app refused: %+v", c.Confirmations)
	}
	ch = f.invokeAsync("wipe", `{"what":"cache"}`)
	v = a.next().(*tier1.ValidateParamsMsg)
	a.send(tier1.ValidateResultMsg{RequestID: v.RequestID, Valid: true})
	if o := wait(t, ch); !errors.Is(o.err, api.ErrConfirmationRequired) {
		t.Fatalf("valid params: err = %v, want CONFIRMATION_REQUIRED", o.err)
	}
}

func TestLivenessByPing(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := newFixture(t, core.Config{LivenessInterval: 50 * time.Millisecond, LivenessTimeout: 100 * time.Millisecond})
	a := f.connect()
	// Answer two Pings, then stop answering.
	for range 2 {
		if _, ok := a.next().(*tier1.Ping); !ok {
			t.Fatal("want Ping")
		}
		a.send(tier1.Pong{})
	}
	f.waitState(api.AppUnresponsive)
	o := wait(t, f.invokeAsync("work", ""))
	if !errors.Is(o.err, api.ErrAppUnresponsive) {
		t.Fatalf("unresponsive app: err = %v, want APP_UNRESPONSIVE", o.err)
	}
	// Answering every queued Ping, in order, brings it back.
	go func() {
		for {
			a.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			fr, err := a.r.Next()
			if err != nil {
				return
			}
			if fr.Type == frame.Ping {
				p, _ := tier1.Encode(tier1.Pong{})
				frame.Write(a.c, frame.Frame{Type: frame.Pong, Payload: p})
			}
		}
	}()
	f.waitState(api.AppRunning)
}

func TestStateAndShutdown(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := newFixture(t, core.Config{})
	a := f.connect()
	done := make(chan *api.AppsStateResult, 1)
	go func() {
		res, err := f.b.AppState(context.Background(), &api.AppsStateParams{AppID: testApp, Keys: []string{"queue"}})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	q := a.next().(*tier1.QueryState)
	if len(q.Keys) != 1 || q.Keys[0] != "queue" {
		t.Fatalf("QueryState keys = %v", q.Keys)
	}
	a.send(tier1.StateResponse{RequestID: q.RequestID, State: json.RawMessage(`{"queue":4}`)})
	if res := <-done; res == nil || string(res.State) != `{"queue":4}` {
		t.Fatalf("state = %+v", res)
	}
	if _, err := f.b.RevokeApp(context.Background(), &api.RevokeAppParams{AppID: testApp, Reason: "testing"}); err != nil {
		t.Fatal(err)
	}
	sd, ok := a.next().(*tier1.AppShutdown)
	if !ok || sd.Reason != "revoked by the user: testing" {
		t.Fatalf("app got %+v, want AppShutdown for the revocation", sd)
	}
	a.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := a.r.Next(); err == nil {
		t.Fatal("the connection stayed open after AppShutdown")
	}
}

func TestLongAppIDSocketPath(t *testing.T) {
	s := New(nil, "/run/user/1000/pcp/apps", nil)
	long := "org." + strings.Repeat("x", 120)
	p := s.SocketPath(long)
	if len(p) > maxSunPath || !strings.HasSuffix(p, ".sock") || strings.Contains(p, "xxxx") {
		t.Errorf("SocketPath(long id) = %q, want a hashed name within %d bytes", p, maxSunPath)
	}
	if got := s.SocketPath("org.pcp.notes"); got != "/run/user/1000/pcp/apps/org.pcp.notes.sock" {
		t.Errorf("SocketPath = %q", got)
	}
}

// FuzzAppConn: whatever an app sends after its handshake, the daemon
// neither crashes nor hangs: the invocation in flight returns, the
// connection ends or goes on, and the app can connect again.
func FuzzAppConn(f *testing.F) {
	enc := func(m tier1.Message) []byte {
		p, err := tier1.Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		return frame.Append(nil, frame.Frame{Type: m.Type(), Payload: p})
	}
	f.Add([]byte{})
	f.Add(enc(tier1.CapabilityResultMsg{RequestID: 1, Status: api.StatusSuccess}))
	f.Add(enc(tier1.CapabilityResultMsg{RequestID: 1, Error: &tier1.ErrorInfo{Code: -32602, Message: "no"}}))
	f.Add(enc(tier1.Pong{}))
	f.Add(enc(tier1.StateResponse{RequestID: 7, State: json.RawMessage(`{}`)}))
	f.Add(enc(tier1.ManifestResponse{AppID: testApp, Manifest: testManifest}))
	f.Add([]byte{byte(frame.CapabilityResultMsg), 0, 0, 0, 3, 0xa1, 0x01})
	f.Add([]byte{byte(frame.CapabilityResultMsg), 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0, 0})
	f.Add([]byte("{\"jsonrpc\":\"2.0\"}\n"))
	fx := newFixture(f, core.Config{})
	f.Fuzz(func(t *testing.T, data []byte) {
		x := *fx
		x.t = t
		a := x.connect()
		ch := x.invokeAsync("work", "")
		if _, ok := a.next().(*tier1.InvokeCapability); !ok {
			t.Fatal("want InvokeCapability")
		}
		a.c.Write(data)
		a.c.Close()
		wait(t, ch)
		x.waitState(api.AppNotRunning)
	})
}

// dial connects to the per-app socket without a handshake.
func (f *fixture) dial() *app {
	f.t.Helper()
	c, err := net.Dial("unix", f.path)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return &app{t: f.t, c: c, r: frame.NewReader(c, 0)}
}

// expectShutdown reads the AppShutdown that ends a connection, checks its
// reason starts with one of prefixes and that the connection then closes.
func (a *app) expectShutdown(prefixes ...string) {
	a.t.Helper()
	for {
		m := a.next()
		if _, ok := m.(*tier1.GetManifest); ok {
			continue // a silent connection may not have read it yet
		}
		sd, ok := m.(*tier1.AppShutdown)
		if !ok || !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(sd.Reason, p) }) {
			a.t.Fatalf("got %T %+v, want AppShutdown %q...", m, m, prefixes)
		}
		break
	}
	a.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := a.r.Next(); err == nil {
		a.t.Fatal("the connection stayed open after AppShutdown")
	}
}

// A peer that connects first and says nothing does not keep the app out:
// the app that answers the handshake is served at once, and the silent
// one is then told the app is served and closed.
func TestSilentConnectionDoesNotHoldTheSlot(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := newFixture(t, core.Config{})
	squatter := f.dial()
	if _, ok := squatter.next().(*tier1.GetManifest); !ok {
		t.Fatal("want GetManifest")
	}
	start := time.Now()
	a := f.connect()
	if d := time.Since(start); d >= HandshakeTimeout/2 {
		t.Errorf("the app was served after %v, want at once", d)
	}
	squatter.expectShutdown(alreadyServed(testApp))
	// A connection arriving while the app is served is refused at once,
	// before any handshake.
	late := f.dial()
	if sd, ok := late.next().(*tier1.AppShutdown); !ok || sd.Reason != alreadyServed(testApp) {
		t.Fatalf("a connection while served got %+v, want AppShutdown", sd)
	}
	ch := f.invokeAsync("work", "")
	inv := a.next().(*tier1.InvokeCapability)
	a.send(tier1.CapabilityResultMsg{RequestID: inv.RequestID, Status: api.StatusSuccess})
	if o := wait(t, ch); o.err != nil {
		t.Fatalf("invoking the app: %v", o.err)
	}
}

// MaxHandshakes silent connections do not keep the app out either: a new
// connection displaces the one silent longest.
func TestHandshakeSlotsDisplaceTheSilent(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := newFixture(t, core.Config{})
	var silent []*app
	for range MaxHandshakes {
		s := f.dial()
		if _, ok := s.next().(*tier1.GetManifest); !ok {
			t.Fatal("want GetManifest")
		}
		silent = append(silent, s)
	}
	f.connect()
	silent[0].expectShutdown(fmt.Sprintf("no ManifestResponse before %d newer connections", MaxHandshakes))
	for _, s := range silent[1:] {
		s.expectShutdown(alreadyServed(testApp))
	}
}

// A silent connection alone times out on its own.
func TestHandshakeTimeout(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := newFixture(t, core.Config{})
	f.srv.mu.Lock()
	f.srv.handshakeTimeout = 50 * time.Millisecond
	f.srv.mu.Unlock()
	s := f.dial()
	s.expectShutdown("no ManifestResponse within 50ms")
	f.connect() // the socket is free
}

// Of two connections that answer the handshake, the one whose manifest
// registers serves the app, whatever the order: a manifest that fails
// registration does not make the daemon refuse a good one.
func TestHandshakeDecidesTheApp(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := newFixture(t, core.Config{})
	bad, good := f.dial(), f.dial()
	for _, a := range []*app{bad, good} {
		if _, ok := a.next().(*tier1.GetManifest); !ok {
			t.Fatal("want GetManifest")
		}
	}
	bad.send(tier1.ManifestResponse{AppID: testApp, Manifest: json.RawMessage(`{"version":"1.0","capabilities":[{"name":"x","tier":9,"trust_level":"auto"}],"signature":""}`)})
	good.send(tier1.ManifestResponse{AppID: testApp, Manifest: testManifest})
	// Refused for its manifest, or, when the good one registered first,
	// because the app is served.
	bad.expectShutdown("registration refused: MANIFEST_INVALID", alreadyServed(testApp))
	f.waitState(api.AppRunning)
	ch := f.invokeAsync("work", "")
	inv := good.next().(*tier1.InvokeCapability)
	good.send(tier1.CapabilityResultMsg{RequestID: inv.RequestID, Status: api.StatusSuccess})
	if o := wait(t, ch); o.err != nil {
		t.Fatalf("invoking the app: %v", o.err)
	}
}
