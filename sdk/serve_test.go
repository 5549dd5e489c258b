package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/tier1"
)

const capPrefix = testApp + "."

// recorder is an App that also records the invocations Serve hands it.
type recorder struct {
	*App
	invocations chan *Invocation
}

func (r *recorder) Invoke(ctx context.Context, inv *Invocation) (*api.CapabilityResult, error) {
	r.invocations <- inv
	return r.App.Invoke(ctx, inv)
}

func echo(ctx context.Context, params json.RawMessage) (any, error) { return params, nil }

// blocker is a capability that blocks until its context ends.
type blocker struct {
	started chan struct{} // one send per call, when it starts
	ended   chan error    // the context's error, when it ends
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}, 1), ended: make(chan error, 1)}
}

func (b *blocker) run(ctx context.Context, _ json.RawMessage) (any, error) {
	b.started <- struct{}{}
	<-ctx.Done()
	b.ended <- ctx.Err()
	return nil, ctx.Err()
}

// waitStarted waits for the handler to be running.
func (b *blocker) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-b.started:
	case <-time.After(waitTime):
		t.Fatal("the handler did not start")
	}
}

// waitEnded checks the handler's context was cancelled.
func (b *blocker) waitEnded(t *testing.T) {
	t.Helper()
	select {
	case err := <-b.ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the handler's context ended with %v, want context.Canceled", err)
		}
	case <-time.After(waitTime):
		t.Error("the handler's context was not cancelled")
	}
}

// The rendezvous carries the app and its manifest, the handshake answers
// GetManifest with the manifest verbatim, and every request gets its
// reply, with its request id, byte for byte as the schema says.
func TestServeHandshakeAndReplies(t *testing.T) {
	d := newDaemon(t)
	connected := make(chan string, 1)
	srv := &recorder{invocations: make(chan *Invocation, 10), App: &App{
		AppID:          testApp,
		SignedManifest: testManifest,
		Capabilities: map[string]CapabilityFunc{
			"echo": echo,
			"none": func(context.Context, json.RawMessage) (any, error) { return nil, nil },
			"partial": func(context.Context, json.RawMessage) (any, error) {
				return &api.CapabilityResult{Status: api.StatusPartial, Data: json.RawMessage(`[1,2]`)}, nil
			},
		},
		Validate: func(ctx context.Context, name string, params json.RawMessage) error {
			if name == "echo" && !bytes.Contains(params, []byte(`"n"`)) {
				return api.MissingParam("params.n")
			}
			return nil
		},
		State: func(context.Context) (map[string]any, error) {
			return map[string]any{"open": 3, "db": "/tmp/todo.db"}, nil
		},
	}}
	startServe(t, d, srv, &Options{OnConnected: func(s string) { connected <- s }})
	p := d.accept()
	p.handshake()
	select {
	case s := <-connected:
		if want := d.dir + "/app-1.sock"; s != want {
			t.Errorf("OnConnected(%q), want %q", s, want)
		}
	case <-time.After(waitTime):
		t.Fatal("OnConnected not called after the handshake")
	}
	calls := d.rendezvous()
	if len(calls) != 1 || calls[0].AppID != testApp {
		t.Fatalf("apps.socket calls %+v, want one for %s", calls, testApp)
	}
	var got, want any
	json.Unmarshal(calls[0].Manifest, &got)
	json.Unmarshal(testManifest, &want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("apps.socket manifest (-want +got):\n%s", diff)
	}

	// Ping: a zeroed Pong, the empty map.
	p.write(frame.Ping, nil)
	if f := p.next(); f.Type != frame.Pong || !bytes.Equal(f.Payload, []byte{0xa0}) {
		t.Errorf("Ping answered with %s %x, want Pong a0", f.Type, f.Payload)
	}

	tests := []struct {
		name string
		req  tier1.Message
		want any
	}{
		{"invoke with data", &tier1.InvokeCapability{RequestID: 7, CapabilityID: capPrefix + "echo", Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"n":1}`), DeadlineMS: 30000},
			&tier1.CapabilityResultMsg{RequestID: 7, Status: api.StatusSuccess, Data: json.RawMessage(`{"n":1}`)}},
		{"invoke without data", &tier1.InvokeCapability{RequestID: 8, CapabilityID: capPrefix + "none", Source: api.SourceSystemIntelligence},
			&tier1.CapabilityResultMsg{RequestID: 8, Status: api.StatusSuccess}},
		{"handler's own status", &tier1.InvokeCapability{RequestID: 1 << 40, CapabilityID: capPrefix + "partial", Source: api.SourceSystemIntelligence},
			&tier1.CapabilityResultMsg{RequestID: 1 << 40, Status: api.StatusPartial, Data: json.RawMessage(`[1,2]`)}},
		{"valid params", &tier1.ValidateParamsMsg{RequestID: 9, CapabilityID: capPrefix + "echo", Params: json.RawMessage(`{"n":2}`)},
			&tier1.ValidateResultMsg{RequestID: 9, Valid: true}},
		{"invalid params", &tier1.ValidateParamsMsg{RequestID: 10, CapabilityID: capPrefix + "echo", Params: json.RawMessage(`{}`)},
			&tier1.ValidateResultMsg{RequestID: 10, Error: &tier1.ErrorInfo{Code: int32(api.CodeInvalidParams), Message: "params.n: required", Data: json.RawMessage(`{"field":"params.n"}`)}}},
		{"validate unknown capability", &tier1.ValidateParamsMsg{RequestID: 11, CapabilityID: capPrefix + "fly"},
			&tier1.ValidateResultMsg{RequestID: 11, Error: &tier1.ErrorInfo{Code: int32(api.CodeCapabilityNotFound), Message: "no handler for org.example.todo.fly in org.example.todo", Data: json.RawMessage(`{"capability_id":"org.example.todo.fly"}`)}}},
		{"validate another app's capability", &tier1.ValidateParamsMsg{RequestID: 12, CapabilityID: "org.other.echo"},
			&tier1.ValidateResultMsg{RequestID: 12, Error: &tier1.ErrorInfo{Code: int32(api.CodeCapabilityNotFound), Message: "org.other.echo is not a capability of org.example.todo", Data: json.RawMessage(`{"capability_id":"org.other.echo"}`)}}},
		{"whole state", &tier1.QueryState{RequestID: 13},
			&tier1.StateResponse{RequestID: 13, State: json.RawMessage(`{"db":"/tmp/todo.db","open":3}`)}},
		{"narrowed state", &tier1.QueryState{RequestID: 14, Keys: []string{"open", "missing"}},
			&tier1.StateResponse{RequestID: 14, State: json.RawMessage(`{"open":3}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.t = t
			if diff := cmp.Diff(tt.want, p.roundTrip(tt.req)); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
		})
	}
	p.t = t

	wantInv := []*Invocation{
		{CapabilityID: capPrefix + "echo", Name: "echo", Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"n":1}`)},
		{CapabilityID: capPrefix + "none", Name: "none", Source: api.SourceSystemIntelligence},
		{CapabilityID: capPrefix + "partial", Name: "partial", Source: api.SourceSystemIntelligence},
	}
	for i, want := range wantInv {
		select {
		case got := <-srv.invocations:
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("invocation %d (-want +got):\n%s", i, diff)
			}
		default:
			t.Errorf("invocation %d: none recorded", i)
		}
	}
	// GetManifest is answered again after the handshake too.
	p.handshake()
}

// Replies go out as their handlers finish, whatever the order of the
// requests, and a Ping is answered while an invocation blocks.
func TestServeOutOfOrder(t *testing.T) {
	d := newDaemon(t)
	release := make(chan struct{})
	app := &App{AppID: testApp, SignedManifest: testManifest, Capabilities: map[string]CapabilityFunc{
		"slow": func(ctx context.Context, _ json.RawMessage) (any, error) {
			select {
			case <-release:
				return "slow done", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
		"fast": func(context.Context, json.RawMessage) (any, error) { return "fast done", nil },
	}}
	startServe(t, d, app, nil)
	p := d.accept()
	p.handshake()

	p.send(&tier1.InvokeCapability{RequestID: 1, CapabilityID: capPrefix + "slow", Source: api.SourceSystemIntelligence})
	p.send(&tier1.InvokeCapability{RequestID: 2, CapabilityID: capPrefix + "fast", Source: api.SourceSystemIntelligence})
	p.expect(&tier1.CapabilityResultMsg{RequestID: 2, Status: api.StatusSuccess, Data: json.RawMessage(`"fast done"`)})
	p.send(&tier1.Ping{})
	p.expect(&tier1.Pong{})
	p.send(&tier1.ValidateParamsMsg{RequestID: 3, CapabilityID: capPrefix + "slow"})
	p.expect(&tier1.ValidateResultMsg{RequestID: 3, Valid: true})
	p.send(&tier1.QueryState{RequestID: 4})
	p.expect(&tier1.StateResponse{RequestID: 4, State: json.RawMessage(`{}`)})
	close(release)
	p.expect(&tier1.CapabilityResultMsg{RequestID: 1, Status: api.StatusSuccess, Data: json.RawMessage(`"slow done"`)})
}

// At most MaxConcurrentRequests handlers run at once; the requests past
// that wait, none is dropped, and Pings are still answered.
func TestServeConcurrencyBound(t *testing.T) {
	const n = MaxConcurrentRequests + 36
	d := newDaemon(t)
	var running, peak atomic.Int32
	started := make(chan struct{}, n)
	release := make(chan struct{})
	app := &App{AppID: testApp, SignedManifest: testManifest, Capabilities: map[string]CapabilityFunc{
		"block": func(ctx context.Context, params json.RawMessage) (any, error) {
			r := running.Add(1)
			defer running.Add(-1)
			for {
				p := peak.Load()
				if r <= p || peak.CompareAndSwap(p, r) {
					break
				}
			}
			started <- struct{}{}
			<-release
			return params, nil
		},
	}}
	startServe(t, d, app, nil)
	p := d.accept()
	p.handshake()
	for id := uint64(1); id <= n; id++ {
		p.send(&tier1.InvokeCapability{RequestID: id, CapabilityID: capPrefix + "block", Source: api.SourceSystemIntelligence, Params: json.RawMessage(fmt.Sprintf(`{"id":%d}`, id))})
	}
	for i := range MaxConcurrentRequests {
		select {
		case <-started:
		case <-time.After(waitTime):
			t.Fatalf("only %d handlers started, want %d", i, MaxConcurrentRequests)
		}
	}
	select {
	case <-started:
		t.Fatalf("handler %d started while %d run", MaxConcurrentRequests+1, MaxConcurrentRequests)
	case <-time.After(50 * time.Millisecond):
	}
	p.send(&tier1.Ping{})
	p.expect(&tier1.Pong{})
	// A request whose deadline passes while it waits is answered without
	// running.
	p.send(&tier1.InvokeCapability{RequestID: n + 1, CapabilityID: capPrefix + "block", Source: api.SourceSystemIntelligence, DeadlineMS: 50})
	p.expect(&tier1.CapabilityResultMsg{RequestID: n + 1, Error: &tier1.ErrorInfo{Code: int32(api.CodeExecutionTimeout), Message: "context deadline exceeded"}})

	close(release)
	seen := map[uint64]bool{}
	for range n {
		m, ok := p.recv().(*tier1.CapabilityResultMsg)
		if !ok {
			t.Fatalf("got %T, want CapabilityResultMsg", m)
		}
		if want := fmt.Sprintf(`{"id":%d}`, m.RequestID); m.Status != api.StatusSuccess || string(m.Data) != want || seen[m.RequestID] {
			t.Errorf("reply %+v: want one success with data %s", m, want)
		}
		seen[m.RequestID] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct replies, want %d", len(seen), n)
	}
	if got := peak.Load(); got != MaxConcurrentRequests {
		t.Errorf("at most %d handlers ran at once, want %d", got, MaxConcurrentRequests)
	}
}

// Errors travel back inside the replies with their code, message and
// data; panics and unsendable results become INTERNAL_ERROR; the
// connection stays up.
func TestServeErrors(t *testing.T) {
	d := newDaemon(t)
	app := &App{AppID: testApp, SignedManifest: testManifest, Capabilities: map[string]CapabilityFunc{
		"coded": func(context.Context, json.RawMessage) (any, error) {
			return nil, api.Errorf(api.CodeRateLimited, map[string]any{"retry_after_ms": 500}, "slow down")
		},
		"wrapped": func(context.Context, json.RawMessage) (any, error) {
			return nil, fmt.Errorf("checking: %w", api.InvalidParam("params.x", "bad"))
		},
		"plain": func(context.Context, json.RawMessage) (any, error) { return nil, errors.New("disk on fire") },
		"panic": func(context.Context, json.RawMessage) (any, error) { panic("boom") },
		"slow": func(ctx context.Context, _ json.RawMessage) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
		"chan":       func(context.Context, json.RawMessage) (any, error) { return make(chan int), nil },
		"bad-status": func(context.Context, json.RawMessage) (any, error) { return &api.CapabilityResult{Status: "done"}, nil },
		"bad-utf8":   func(context.Context, json.RawMessage) (any, error) { return nil, errors.New("bad \xff byte") },
		"too-large":  func(context.Context, json.RawMessage) (any, error) { return strings.Repeat("x", tier1.MaxPayload), nil },
	}}
	startServe(t, d, app, nil)
	p := d.accept()
	p.handshake()

	internal := int32(api.CodeInternalError)
	tests := []struct {
		name     string
		deadline uint32
		want     *tier1.ErrorInfo
		wantIs   error
	}{
		{"coded", 0, &tier1.ErrorInfo{Code: int32(api.CodeRateLimited), Message: "slow down", Data: json.RawMessage(`{"retry_after_ms":500}`)}, api.ErrRateLimited},
		{"wrapped", 0, &tier1.ErrorInfo{Code: int32(api.CodeInvalidParams), Message: "params.x: bad", Data: json.RawMessage(`{"field":"params.x"}`)}, api.ErrInvalidParams},
		{"plain", 0, &tier1.ErrorInfo{Code: internal, Message: "disk on fire"}, api.ErrInternal},
		{"panic", 0, &tier1.ErrorInfo{Code: internal, Message: "invoke org.example.todo.panic (request 1) panicked: boom"}, api.ErrInternal},
		{"slow", 20, &tier1.ErrorInfo{Code: int32(api.CodeExecutionTimeout), Message: "context deadline exceeded"}, api.ErrExecutionTimeout},
		{"chan", 0, &tier1.ErrorInfo{Code: internal, Message: "encoding the result of org.example.todo.chan: json: unsupported type: chan int"}, api.ErrInternal},
		{"bad-status", 0, &tier1.ErrorInfo{Code: internal, Message: `reply to invoke org.example.todo.bad-status (request 1) not sendable: tier1: CapabilityResultMsg: status: "done" is not success, partial or deferred`}, api.ErrInternal},
		{"bad-utf8", 0, &tier1.ErrorInfo{Code: internal, Message: "bad \uFFFD byte"}, api.ErrInternal},
		{"too-large", 0, &tier1.ErrorInfo{Code: internal, Message: fmt.Sprintf("reply to invoke org.example.todo.too-large (request 1) not sendable: tier1: CapabilityResultMsg: payload of %d bytes exceeds the maximum of %d", tier1.MaxPayload+20, tier1.MaxPayload)}, api.ErrInternal},
		{"fly", 0, &tier1.ErrorInfo{Code: int32(api.CodeCapabilityNotFound), Message: "no handler for org.example.todo.fly in org.example.todo", Data: json.RawMessage(`{"capability_id":"org.example.todo.fly"}`)}, api.ErrCapabilityNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.t = t
			got := p.roundTrip(&tier1.InvokeCapability{RequestID: 1, CapabilityID: capPrefix + tt.name, Source: api.SourceSystemIntelligence, DeadlineMS: tt.deadline})
			want := &tier1.CapabilityResultMsg{RequestID: 1, Error: tt.want}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
			// As the daemon sees it after the round trip.
			if m, ok := got.(*tier1.CapabilityResultMsg); ok {
				if _, err := m.Result(); !errors.Is(err, tt.wantIs) {
					t.Errorf("Result() error %v, want errors.Is %v", err, tt.wantIs)
				}
			}
		})
	}
	p.t = t

	// Another app's capability never reaches the handlers.
	p.expectReply(t, &tier1.InvokeCapability{RequestID: 2, CapabilityID: "org.example.todon.coded", Source: api.SourceSystemIntelligence},
		&tier1.CapabilityResultMsg{RequestID: 2, Error: &tier1.ErrorInfo{Code: int32(api.CodeCapabilityNotFound), Message: "org.example.todon.coded is not a capability of org.example.todo", Data: json.RawMessage(`{"capability_id":"org.example.todon.coded"}`)}})
	p.send(&tier1.Ping{})
	p.expect(&tier1.Pong{})
	if n := len(d.rendezvous()); n != 1 {
		t.Errorf("%d rendezvous, want 1: errors must not end the connection", n)
	}
}

func (p *peer) expectReply(t *testing.T, req tier1.Message, want any) {
	t.Helper()
	if diff := cmp.Diff(want, p.roundTrip(req)); diff != "" {
		t.Errorf("reply to %T (-want +got):\n%s", req, diff)
	}
}

// stateServer is a PcpServer whose ValidateParams and QueryState fail in
// the ways the test asks.
type stateServer struct {
	App
	state func() (json.RawMessage, error)
}

func (s *stateServer) QueryState(ctx context.Context, keys []string) (json.RawMessage, error) {
	return s.state()
}

func (s *stateServer) ValidateParams(ctx context.Context, id string, params json.RawMessage) error {
	panic("validator bug")
}

// ValidateParams and QueryState failures: a panic in a validator is
// INTERNAL_ERROR; a state that fails or is not an object is reported as
// {"error": message}.
func TestServeValidateAndStateFailures(t *testing.T) {
	d := newDaemon(t)
	var mu sync.Mutex
	var state func() (json.RawMessage, error)
	srv := &stateServer{App: App{AppID: testApp, SignedManifest: testManifest}, state: func() (json.RawMessage, error) {
		mu.Lock()
		defer mu.Unlock()
		return state()
	}}
	setState := func(f func() (json.RawMessage, error)) { mu.Lock(); state = f; mu.Unlock() }
	startServe(t, d, srv, nil)
	p := d.accept()
	p.handshake()

	p.expectReply(t, &tier1.ValidateParamsMsg{RequestID: 1, CapabilityID: capPrefix + "x"},
		&tier1.ValidateResultMsg{RequestID: 1, Error: &tier1.ErrorInfo{Code: int32(api.CodeInternalError), Message: "validate_params org.example.todo.x (request 1) panicked: validator bug"}})

	tests := []struct {
		name  string
		state func() (json.RawMessage, error)
		want  string
	}{
		{"error", func() (json.RawMessage, error) { return nil, errors.New("db locked") }, `{"error":"db locked"}`},
		{"coded error", func() (json.RawMessage, error) { return nil, api.Errorf(api.CodeAppUnresponsive, nil, "busy") }, `{"error":"busy"}`},
		{"panic", func() (json.RawMessage, error) { panic("state bug") }, `{"error":"query_state (request 2) panicked: state bug"}`},
		{"not an object", func() (json.RawMessage, error) { return json.RawMessage(`[1]`), nil }, `{"error":"reply to query_state (request 2) not sendable: tier1: StateResponse: state: not a JSON object"}`},
		{"not JSON", func() (json.RawMessage, error) { return json.RawMessage(`{`), nil }, `{"error":"reply to query_state (request 2) not sendable: tier1: StateResponse: state: not valid JSON"}`},
		{"empty", func() (json.RawMessage, error) { return nil, nil }, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setState(tt.state)
			p.expectReply(t, &tier1.QueryState{RequestID: 2}, &tier1.StateResponse{RequestID: 2, State: json.RawMessage(tt.want)})
		})
	}
}

// An invocation's context carries its deadline, and is cancelled when the
// connection ends; Serve then reconnects.
func TestServeHandlerContext(t *testing.T) {
	d := newDaemon(t)
	deadlines := make(chan time.Duration, 2)
	wait := newBlocker()
	app := &App{AppID: testApp, SignedManifest: testManifest, Capabilities: map[string]CapabilityFunc{
		"deadline": func(ctx context.Context, _ json.RawMessage) (any, error) {
			dl, ok := ctx.Deadline()
			if !ok {
				deadlines <- -1
			} else {
				deadlines <- time.Until(dl)
			}
			return nil, nil
		},
		"wait": wait.run,
	}}
	startServe(t, d, app, nil)
	p := d.accept()
	p.handshake()

	p.roundTrip(&tier1.InvokeCapability{RequestID: 1, CapabilityID: capPrefix + "deadline", Source: api.SourceSystemIntelligence, DeadlineMS: 60000})
	if left := <-deadlines; left <= 55*time.Second || left > 60*time.Second {
		t.Errorf("DeadlineMS 60000: the handler has %s left, want about a minute", left)
	}
	p.roundTrip(&tier1.InvokeCapability{RequestID: 2, CapabilityID: capPrefix + "deadline", Source: api.SourceSystemIntelligence})
	if left := <-deadlines; left != -1 {
		t.Errorf("DeadlineMS 0: the handler has a deadline %s away, want none", left)
	}

	p.send(&tier1.InvokeCapability{RequestID: 3, CapabilityID: capPrefix + "wait", Source: api.SourceSystemIntelligence})
	wait.waitStarted(t)
	p.nc.Close()
	wait.waitEnded(t)
	d.accept().handshake()
	if n := len(d.rendezvous()); n != 2 {
		t.Errorf("%d rendezvous, want 2", n)
	}
}

// A frame the SDK cannot accept closes the connection, is logged, and
// Serve reconnects with a new rendezvous.
func TestServeProtocolErrors(t *testing.T) {
	tests := []struct {
		name      string
		handshake bool
		send      func(p *peer)
	}{
		{"undecodable payload", true, func(p *peer) { p.write(frame.InvokeCapability, []byte{0xff}) }},
		{"unknown key", true, func(p *peer) { p.write(frame.QueryState, []byte{0xa2, 0x01, 0x01, 0x09, 0x01}) }},
		{"schema violation", true, func(p *peer) { p.write(frame.InvokeCapability, []byte{0xa1, 0x01, 0x01}) }},
		{"reply type", true, func(p *peer) {
			p.send(&tier1.CapabilityResultMsg{RequestID: 1, Status: api.StatusSuccess})
		}},
		{"client socket type", true, func(p *peer) { p.write(frame.DetectRequest, nil) }},
		{"unknown tag", true, func(p *peer) {
			p.nc.Write([]byte{200, 0, 0, 0, 2, 0xa0, 0xa0})
		}},
		{"oversized", true, func(p *peer) {
			// Only the header: the SDK closes without waiting for the payload.
			p.nc.Write([]byte{byte(frame.InvokeCapability), 0x00, 0x10, 0x00, 0x01})
		}},
		{"invoke before GetManifest", false, func(p *peer) {
			p.send(&tier1.InvokeCapability{RequestID: 1, CapabilityID: capPrefix + "x", Source: api.SourceSystemIntelligence})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDaemon(t)
			logs := newLogWatch()
			startServe(t, d, &App{AppID: testApp, SignedManifest: testManifest}, &Options{Logger: testLogger(t, logs)})
			p := d.accept()
			if tt.handshake {
				p.handshake()
			}
			tt.send(p)
			p.expectClosed()
			d.accept().handshake()
			if n := len(d.rendezvous()); n != 2 {
				t.Errorf("%d rendezvous, want 2", n)
			}
			if !strings.Contains(logs.String(), "protocol error") {
				t.Errorf("no protocol error logged; logs:\n%s", logs.String())
			}
		})
	}
}

// When the daemon restarts, the per-app socket's path changes; a stale
// path fails to dial and Serve asks again until it gets the new one.
func TestServeReconnect(t *testing.T) {
	d := newDaemon(t)
	connected := make(chan string, 4)
	startServe(t, d, &App{AppID: testApp, SignedManifest: testManifest}, &Options{OnConnected: func(s string) { connected <- s }})
	p := d.accept()
	p.handshake()
	first := <-connected

	stale := first
	d.answerNext(func() (any, error) { return &api.AppsSocketResult{AppID: testApp, Socket: stale}, nil })
	second := d.listenApp("app-2.sock") // removes app-1.sock
	p.nc.Close()
	p = d.accept()
	p.handshake()
	select {
	case got := <-connected:
		if got != second {
			t.Errorf("OnConnected(%q) after the restart, want %q", got, second)
		}
	case <-time.After(waitTime):
		t.Fatal("OnConnected not called after reconnecting")
	}
	if n := len(d.rendezvous()); n != 3 {
		t.Errorf("%d rendezvous, want 3: first, stale path, new path", n)
	}
	p.send(&tier1.Ping{})
	p.expect(&tier1.Pong{})
}

// Serve waits for a daemon that is not running yet, and for one that
// fails apps.socket for a reason that may pass.
func TestServeDaemonDown(t *testing.T) {
	d := newDaemon(t)
	d.stopAgent()
	d.refuseNext(api.Errorf(api.CodeInternalError, nil, "store busy"))
	logs := newLogWatch()
	startServe(t, d, &App{AppID: testApp, SignedManifest: testManifest}, &Options{Logger: testLogger(t, logs)})
	logs.waitFor(t, "retrying", 2) // two attempts failed to dial
	d.startAgent()
	d.accept().handshake()
	if n := len(d.rendezvous()); n != 2 {
		t.Errorf("%d rendezvous, want 2: INTERNAL_ERROR, then success", n)
	}
}

// AppShutdown calls Shutdown with the reason, cancels running handlers
// and closes the connection. With StopOnShutdown Serve then returns a
// *ShutdownError; without it Serve tries again.
func TestServeAppShutdown(t *testing.T) {
	for _, stop := range []bool{true, false} {
		t.Run(fmt.Sprintf("StopOnShutdown=%v", stop), func(t *testing.T) {
			d := newDaemon(t)
			reasons := make(chan string, 1)
			wait := newBlocker()
			app := &App{AppID: testApp, SignedManifest: testManifest,
				Capabilities: map[string]CapabilityFunc{"wait": wait.run},
				OnShutdown:   func(reason string) { reasons <- reason },
			}
			s := startServe(t, d, app, &Options{StopOnShutdown: stop})
			p := d.accept()
			p.handshake()
			p.send(&tier1.InvokeCapability{RequestID: 1, CapabilityID: capPrefix + "wait", Source: api.SourceSystemIntelligence})
			wait.waitStarted(t)
			p.send(&tier1.AppShutdown{Reason: "revoked by the user"})
			select {
			case got := <-reasons:
				if got != "revoked by the user" {
					t.Errorf("OnShutdown(%q), want %q", got, "revoked by the user")
				}
			case <-time.After(waitTime):
				t.Fatal("OnShutdown not called")
			}
			wait.waitEnded(t)
			p.expectClosed()
			if !stop {
				d.accept().handshake()
				if n := len(d.rendezvous()); n != 2 {
					t.Errorf("%d rendezvous, want 2: Serve tries again after AppShutdown", n)
				}
				return
			}
			err := s.wait(t)
			var se *ShutdownError
			if !errors.Is(err, ErrShutdown) || !errors.As(err, &se) || se.Reason != "revoked by the user" {
				t.Fatalf("Serve returned %v, want a *ShutdownError for %q", err, "revoked by the user")
			}
			if errors.Is(err, ErrPermanent) {
				t.Errorf("Serve's %v matches ErrPermanent", err)
			}
			if got, want := err.Error(), "pcp: app shut down by pcpd: revoked by the user"; got != want {
				t.Errorf("Error() = %q, want %q", got, want)
			}
			if n := len(d.rendezvous()); n != 1 {
				t.Errorf("%d rendezvous, want 1: no reconnecting after AppShutdown", n)
			}
		})
	}
}

// A daemon that refuses the manifest right after the handshake does so
// with AppShutdown too; without a reason, the error says so.
func TestServeRefusedAfterHandshake(t *testing.T) {
	d := newDaemon(t)
	s := startServe(t, d, &App{AppID: testApp, SignedManifest: testManifest}, &Options{StopOnShutdown: true})
	p := d.accept()
	p.handshake()
	p.send(&tier1.AppShutdown{})
	if err := s.wait(t); !errors.Is(err, ErrShutdown) || err.Error() != "pcp: app shut down by pcpd" {
		t.Errorf("Serve returned %v, want ErrShutdown without a reason", err)
	}
	p.expectClosed()
}

// A connection refused before any handshake, because another connection
// serves the app (a squatter on its socket, another copy of the app), is
// not the end: Serve tries again, with backoff, even with StopOnShutdown,
// and without calling Shutdown.
func TestServeRefusedAsAlreadyServed(t *testing.T) {
	d := newDaemon(t)
	shutdowns := make(chan string, 4)
	app := &App{AppID: testApp, SignedManifest: testManifest, OnShutdown: func(r string) { shutdowns <- r }}
	startServe(t, d, app, &Options{StopOnShutdown: true})
	for range 2 {
		p := d.accept()
		p.send(&tier1.AppShutdown{Reason: "app " + testApp + " is already served by another connection on this socket"})
		p.expectClosed()
	}
	d.accept().handshake()
	if n := len(d.rendezvous()); n != 3 {
		t.Errorf("%d rendezvous, want 3", n)
	}
	select {
	case r := <-shutdowns:
		t.Errorf("Shutdown(%q) called for a refused connection", r)
	default:
	}
}

// A revoked app waits to be allowed again: apps.socket's PERMISSION_DENIED
// with "revoked" is retried, with backoff, and Serve serves again once the
// daemon gives it a socket; with StopOnShutdown it ends Serve.
func TestServeRevokedThenAllowed(t *testing.T) {
	revokedErr := api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": testApp, "revoked": true, "reason": "testing"},
		"app %s is revoked; the user must allow it again", testApp)
	t.Run("retried", func(t *testing.T) {
		d := newDaemon(t)
		startServe(t, d, &App{AppID: testApp, SignedManifest: testManifest}, nil)
		p := d.accept()
		p.handshake()
		d.refuseNext(revokedErr)
		d.refuseNext(revokedErr)
		p.send(&tier1.AppShutdown{Reason: "revoked by the user: testing"})
		p.expectClosed()
		d.accept().handshake() // allowed again
		if n := len(d.rendezvous()); n != 4 {
			t.Errorf("%d rendezvous, want 4: first, revoked twice, allowed", n)
		}
	})
	t.Run("StopOnShutdown", func(t *testing.T) {
		d := newDaemon(t)
		d.refuseNext(revokedErr)
		s := startServe(t, d, &App{AppID: testApp, SignedManifest: testManifest}, &Options{StopOnShutdown: true})
		if err := s.wait(t); !errors.Is(err, ErrPermanent) || !errors.Is(err, api.ErrPermissionDenied) {
			t.Errorf("Serve returned %v, want ErrPermanent and PERMISSION_DENIED", err)
		}
	})
}

// A handler that ignores its context does not hold up the reconnection:
// when the connection is lost Serve connects again at once and serves the
// new connection while the old handler runs on; its late reply is sent
// nowhere. Serve still waits for it before returning.
func TestServeReconnectsPastStuckHandler(t *testing.T) {
	d := newDaemon(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	app := &App{AppID: testApp, SignedManifest: testManifest, Capabilities: map[string]CapabilityFunc{
		"stuck": func(context.Context, json.RawMessage) (any, error) {
			started <- struct{}{}
			<-release // ignores its context
			return "late", nil
		},
		"echo": echo,
	}}
	s := startServe(t, d, app, nil)
	p := d.accept()
	p.handshake()
	p.send(&tier1.InvokeCapability{RequestID: 1, CapabilityID: capPrefix + "stuck", Source: api.SourceSystemIntelligence})
	<-started
	p.nc.Close() // the daemon restarts
	p = d.accept()
	p.handshake()
	p.expectReply(t, &tier1.InvokeCapability{RequestID: 1, CapabilityID: capPrefix + "echo", Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"n":1}`)},
		&tier1.CapabilityResultMsg{RequestID: 1, Status: api.StatusSuccess, Data: json.RawMessage(`{"n":1}`)})
	close(release)
	p.send(&tier1.Ping{})
	p.expect(&tier1.Pong{}) // and not the stuck handler's reply
	s.cancel()
	if err := s.wait(t); err != nil {
		t.Errorf("Serve returned %v after cancel, want nil", err)
	}
}

// Handlers stuck past their connection keep their slots: across
// reconnections no more than MaxConcurrentRequests run, and a new
// connection's request waits for a slot, or its deadline.
func TestServeStuckHandlersStayBounded(t *testing.T) {
	d := newDaemon(t)
	release := make(chan struct{})
	var calls atomic.Int32
	started := make(chan struct{}, MaxConcurrentRequests)
	app := &App{AppID: testApp, SignedManifest: testManifest, Capabilities: map[string]CapabilityFunc{
		"stuck": func(context.Context, json.RawMessage) (any, error) {
			calls.Add(1)
			started <- struct{}{}
			<-release
			return nil, nil
		},
		"echo": echo,
	}}
	startServe(t, d, app, nil)
	p := d.accept()
	p.handshake()
	for id := range uint64(MaxConcurrentRequests) {
		p.send(&tier1.InvokeCapability{RequestID: id + 1, CapabilityID: capPrefix + "stuck", Source: api.SourceSystemIntelligence})
	}
	for range MaxConcurrentRequests {
		<-started
	}
	p.nc.Close()
	p = d.accept()
	p.handshake()
	p.expectReply(t, &tier1.InvokeCapability{RequestID: 1, CapabilityID: capPrefix + "echo", Source: api.SourceSystemIntelligence, DeadlineMS: 50},
		&tier1.CapabilityResultMsg{RequestID: 1, Error: &tier1.ErrorInfo{Code: int32(api.CodeExecutionTimeout), Message: "context deadline exceeded"}})
	close(release)
	p.expectReply(t, &tier1.InvokeCapability{RequestID: 2, CapabilityID: capPrefix + "echo", Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{}`)},
		&tier1.CapabilityResultMsg{RequestID: 2, Status: api.StatusSuccess, Data: json.RawMessage(`{}`)})
	if n := calls.Load(); n != MaxConcurrentRequests {
		t.Errorf("%d stuck handlers ran, want %d", n, MaxConcurrentRequests)
	}
}

// failingManifest is a PcpServer whose Manifest fails.
type failingManifest struct{ App }

func (failingManifest) Manifest(context.Context) (json.RawMessage, error) {
	return nil, errors.New("manifest file unreadable")
}

// Refusals that retrying cannot fix end Serve with ErrPermanent.
func TestServePermanentErrors(t *testing.T) {
	for _, e := range []*api.Error{
		api.Errorf(api.CodeManifestInvalid, nil, "capability %q: no tier", "add"),
		api.Errorf(api.CodeManifestSignatureInvalid, nil, "untrusted key"),
		api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": testApp}, "app id namespace \"pcp.\" is reserved"),
		api.InvalidParam("params.app_id", "not a reverse-DNS id"),
	} {
		t.Run(e.Code.Name(), func(t *testing.T) {
			d := newDaemon(t)
			d.refuseNext(e)
			s := startServe(t, d, &App{AppID: testApp, SignedManifest: testManifest}, nil)
			err := s.wait(t)
			if !errors.Is(err, ErrPermanent) || !errors.Is(err, e) {
				t.Errorf("Serve returned %v, want ErrPermanent and %s", err, e.Code.Name())
			}
			if !strings.Contains(err.Error(), e.Message) {
				t.Errorf("Serve's error %q does not say %q", err, e.Message)
			}
			if n := len(d.rendezvous()); n != 1 {
				t.Errorf("%d rendezvous, want 1", n)
			}
		})
	}
	servers := map[string]PcpServer{
		"manifest fails":      &failingManifest{},
		"manifest not object": &App{AppID: testApp, SignedManifest: json.RawMessage(`[1]`)},
		"manifest not JSON":   &App{AppID: testApp, SignedManifest: json.RawMessage(`{"a":`)},
		"no manifest":         &App{AppID: testApp},
	}
	for name, srv := range servers {
		t.Run(name, func(t *testing.T) {
			d := newDaemon(t)
			s := startServe(t, d, srv, nil)
			if err := s.wait(t); !errors.Is(err, ErrPermanent) {
				t.Errorf("Serve returned %v, want ErrPermanent", err)
			}
			if n := len(d.rendezvous()); n != 0 {
				t.Errorf("%d rendezvous, want none", n)
			}
		})
	}
	if err := Serve(t.Context(), "", &App{}, nil); !errors.Is(err, ErrPermanent) {
		t.Errorf("Serve with no app id: %v, want ErrPermanent", err)
	}
	if err := Serve(t.Context(), testApp, nil, nil); !errors.Is(err, ErrPermanent) {
		t.Errorf("Serve with a nil server: %v, want ErrPermanent", err)
	}
}

// Cancelling ctx returns nil, closes the connection and cancels running
// handlers; startServe's cleanup checks nothing is left running.
func TestServeCancel(t *testing.T) {
	t.Run("connected", func(t *testing.T) {
		d := newDaemon(t)
		wait := newBlocker()
		app := &App{AppID: testApp, SignedManifest: testManifest, Capabilities: map[string]CapabilityFunc{"wait": wait.run}}
		s := startServe(t, d, app, nil)
		p := d.accept()
		p.handshake()
		p.send(&tier1.InvokeCapability{RequestID: 1, CapabilityID: capPrefix + "wait", Source: api.SourceSystemIntelligence})
		wait.waitStarted(t)
		s.cancel()
		if err := s.wait(t); err != nil {
			t.Errorf("Serve returned %v after cancel, want nil", err)
		}
		wait.waitEnded(t)
		p.expectClosed()
	})
	t.Run("retrying", func(t *testing.T) {
		d := newDaemon(t)
		d.stopAgent()
		logs := newLogWatch()
		s := startServe(t, d, &App{AppID: testApp, SignedManifest: testManifest}, &Options{Logger: testLogger(t, logs)})
		logs.waitFor(t, "retrying", 1) // waiting between attempts
		s.cancel()
		if err := s.wait(t); err != nil {
			t.Errorf("Serve returned %v after cancel, want nil", err)
		}
	})
	t.Run("handshake", func(t *testing.T) {
		d := newDaemon(t)
		s := startServe(t, d, &App{AppID: testApp, SignedManifest: testManifest}, nil)
		p := d.accept() // the daemon never sends GetManifest
		s.cancel()
		if err := s.wait(t); err != nil {
			t.Errorf("Serve returned %v after cancel, want nil", err)
		}
		p.expectClosed()
	})
}

// A daemon that accepts and never sends GetManifest is given up on after
// handshakeTimeout, to the moment (a synctest bubble's fake clock, over
// net.Pipe); and a stuck handler's slot outlives its connection.
func TestConnTimers(t *testing.T) {
	newConn := func(nc net.Conn, hs *handlers) *conn {
		return &conn{appID: testApp, prefix: capPrefix, srv: &App{AppID: testApp, SignedManifest: testManifest},
			nc: nc, socket: "pipe", manifest: testManifest, log: testLogger(t, nil), handlers: hs}
	}
	t.Run("handshake timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := net.Pipe()
			defer b.Close()
			start := time.Now()
			connected, err := newConn(a, newHandlers()).serve(t.Context())
			if connected || err == nil || !strings.Contains(err.Error(), "no GetManifest") {
				t.Errorf("serve = %v, %v; want the handshake timeout", connected, err)
			}
			if d := time.Since(start); d != handshakeTimeout {
				t.Errorf("gave up after %v, want %v", d, handshakeTimeout)
			}
		})
	})
	t.Run("deadline while stuck handlers hold every slot", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			hs := newHandlers()
			for range MaxConcurrentRequests {
				hs.running <- struct{}{} // handlers of an ended connection
			}
			a, b := net.Pipe()
			done := make(chan struct{})
			go func() {
				defer close(done)
				newConn(a, hs).serve(t.Context())
			}()
			p := &peer{t: t, nc: b, fr: frame.NewReader(b, 0)}
			p.handshake()
			start := time.Now()
			p.expectReply(t, &tier1.InvokeCapability{RequestID: 1, CapabilityID: capPrefix + "x", Source: api.SourceSystemIntelligence, DeadlineMS: 2000},
				&tier1.CapabilityResultMsg{RequestID: 1, Error: &tier1.ErrorInfo{Code: int32(api.CodeExecutionTimeout), Message: "context deadline exceeded"}})
			if d := time.Since(start); d != 2*time.Second {
				t.Errorf("answered after %v, want the 2s deadline", d)
			}
			b.Close()
			<-done
			for range MaxConcurrentRequests {
				<-hs.running
			}
			hs.wg.Wait()
		})
	})
}
