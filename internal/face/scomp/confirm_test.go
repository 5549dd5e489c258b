package scomp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// guarded is an in-process service with one capability at trust level
// confirm; it counts its runs.
type guarded struct{ runs atomic.Int32 }

func (g *guarded) AppID() string { return "pcp.test.guarded" }
func (g *guarded) Manifest() *api.Manifest {
	return &api.Manifest{Version: "1.0", Capabilities: []api.CapabilityDecl{{Name: "erase", Tier: 1, TrustLevel: api.TrustConfirm,
		ConfirmationType: "delete", Parameters: []api.ParamDecl{{Name: "what", Type: "string"}}}}}
}
func (g *guarded) Invoke(context.Context, *api.Capability, api.InvocationSource, json.RawMessage) (*api.CapabilityResult, error) {
	g.runs.Add(1)
	return &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"erased":true}`)}, nil
}

// realBroker is a broker on the real clock with confirmations living
// ttl, serving g.
func realBroker(t *testing.T, ttl time.Duration, g *guarded) *core.Broker {
	t.Helper()
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(),
		AllowUnsigned: true, SessionID: "session-1", ConfirmationTTL: ttl, LivenessInterval: -1, RateLimits: &core.RateLimits{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.AddService(g); err != nil {
		t.Fatal(err)
	}
	return b
}

// evalOn opens a session on path and returns a function running one
// eval, answering its result or error member.
func evalOn(t *testing.T, ctx context.Context, path string) func(code string) string {
	t.Helper()
	ws, _, err := dialUnix(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	id := 0
	call := func(method string, params any) string {
		id++
		raw, _ := json.Marshal(params)
		if err := ws.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, raw))); err != nil {
			t.Fatal(err)
		}
		_, data, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Result json.RawMessage
			Error  *struct {
				Data struct {
					Kind  string
					Error struct{ Name string }
				}
			}
		}
		json.Unmarshal(data, &m)
		if m.Error != nil {
			return strings.TrimSpace("error " + m.Error.Data.Kind + " " + m.Error.Data.Error.Name)
		}
		return string(m.Result)
	}
	call("handshake", map[string]any{"protocol": "0.1", "bindings": []any{}})
	return func(code string) string { return call("eval", map[string]string{"code": code}) }
}

// decideWhenAsked decides the next confirmation the broker opens,
// after delay, as the user on their own surface.
func decideWhenAsked(t *testing.T, b *core.Broker, delay time.Duration, approve bool) {
	sub := &confirmSink{ch: make(chan string, 1)}
	user := b.OpenSession(core.SessionInfo{Role: core.RoleUser, Transport: "inproc", UID: -1, PID: -1}, core.Endpoint{Events: sub})
	t.Cleanup(user.Close)
	ctx := core.WithSession(context.Background(), user)
	if _, err := b.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventConfirmationRequested}}); err != nil {
		t.Fatal(err)
	}
	go func() {
		id := <-sub.ch
		time.Sleep(delay) // the user takes this long: the property tested
		p := &api.ConfirmDecisionParams{ConfirmationID: id}
		if approve {
			b.ApproveConfirmation(ctx, p)
		} else {
			b.DenyConfirmation(ctx, p)
		}
	}()
}

type confirmSink struct{ ch chan string }

func (s *confirmSink) Event(_ string, ev *api.Event) error {
	var d struct {
		ConfirmationID string `json:"confirmation_id"`
	}
	json.Unmarshal(ev.Data, &d)
	select {
	case s.ch <- d.ConfirmationID:
	default:
	}
	return nil
}
func (s *confirmSink) EventsLost(*api.EventsLost) error               { return nil }
func (s *confirmSink) SubscriptionEnded(*api.SubscriptionEnded) error { return nil }

// The eval's time limit does not run while the user decides: a user
// who takes three times the eval's limit to approve still gets the
// action run and the eval's result.
func TestConfirmationPausesTheEvalClock(t *testing.T) {
	testkit.CheckGoroutines(t)
	g := &guarded{}
	b := realBroker(t, time.Minute, g)
	path, stop := unixServer(t, New(b, Options{EvalTimeout: 300 * time.Millisecond}))
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eval := evalOn(t, ctx, path)
	decideWhenAsked(t, b, 900*time.Millisecond, true)
	if got, want := eval(`(await pcp_test_guarded_erase({what: "drafts"})).data.erased`), `{"value":true}`; got != want {
		t.Fatalf("approved after the eval's limit: %s, want %s", got, want)
	}
	if g.runs.Load() != 1 {
		t.Fatalf("the capability ran %d times, want 1", g.runs.Load())
	}
	// The clock runs again after the decision: code that spins after it
	// still times out.
	decideWhenAsked(t, b, 0, true)
	if got := eval(`await pcp_test_guarded_erase({what: "x"}); while (true) {}`); got != "error TimeoutError" {
		t.Fatalf("a spin after the approval: %s, want a TimeoutError", got)
	}
}

// A confirmation that expires while the eval waits rejects the call
// with CONFIRMATION_EXPIRED, and the capability does not run.
func TestConfirmationExpiresDuringEval(t *testing.T) {
	testkit.CheckGoroutines(t)
	g := &guarded{}
	b := realBroker(t, 1500*time.Millisecond, g)
	path, stop := unixServer(t, New(b, Options{EvalTimeout: time.Second, ConfirmWait: time.Minute}))
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eval := evalOn(t, ctx, path)
	if got, want := eval(`try { await pcp_test_guarded_erase({what: "all"}) } catch (e) { e.pcp.name }`), `{"value":"CONFIRMATION_EXPIRED"}`; got != want {
		t.Fatalf("nobody decided: %s, want %s", got, want)
	}
	if g.runs.Load() != 0 {
		t.Fatalf("the capability ran %d times, want 0", g.runs.Load())
	}
}
