package scomp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// TestBindingCallsAreInvocations: a binding called in a loop is the
// core's invocation each time: the connection's rate limit stops the
// loop with RATE_LIMITED (which the code catches), and every call is in
// the audit log under the session's actor.
func TestBindingCallsAreInvocations(t *testing.T) {
	testkit.CheckGoroutines(t)
	b, st := newBrokerStore(t, &core.RateLimits{PerConnection: 0.001, PerConnectionBurst: 5})
	path, stop := unixServer(t, New(b, Options{}))
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := dialUnix(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	call := func(id int, method, params string) map[string]json.RawMessage {
		t.Helper()
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, data, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		json.Unmarshal(data, &m)
		return m
	}
	call(1, "handshake", `{"protocol":"0.1","bindings":[]}`)
	code := `let n = 0, failed = null;
for (let i = 0; i < 50; i++) {
  try { await pcp_inspection_ping({payload: i}); n++; } catch (e) { failed = e.name + " " + e.pcp.name; break; }
}
[n, failed]`
	raw, _ := json.Marshal(map[string]string{"code": code})
	r := call(2, "eval", string(raw))
	if got, want := string(r["result"]), `{"value":[5,"BindingError RATE_LIMITED"]}`; got != want {
		t.Fatalf("the loop: %s %s, want result %s", r["result"], r["error"], want)
	}
	entries, err := st.AuditTail(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	actor := fmt.Sprintf("agent:uid=%d,pid=4242", os.Getuid())
	outcomes := map[string]int{}
	for _, e := range entries {
		if e.CapabilityID == "pcp.inspection.ping" {
			if e.Actor != actor {
				t.Errorf("audit entry %d: actor %q, want %q", e.Seq, e.Actor, actor)
			}
			outcomes[e.Outcome]++
		}
	}
	if outcomes["success"] != 5 || outcomes["RATE_LIMITED"] != 1 || len(outcomes) != 2 {
		t.Fatalf("audited outcomes of pcp.inspection.ping: %v; want 5 successes and 1 RATE_LIMITED", outcomes)
	}
}
