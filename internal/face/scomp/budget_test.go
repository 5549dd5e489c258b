package scomp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// TestBudgetMemoryTotal: with room for two sessions' heaps, a third
// upgrade is refused with 429 RATE_LIMITED, scope scomp_memory, on both
// transports' paths (the budget is the face's, shared by them); a closed
// session gives its reservation back, and the next upgrade is served.
func TestBudgetMemoryTotal(t *testing.T) {
	testkit.CheckGoroutines(t)
	const limit = 4 << 20
	face := New(newBroker(t), Options{MemoryLimit: limit, MemoryTotal: 2 * limit})
	path, stop := unixServer(t, face)
	defer stop()
	addr := tcpServer(t, face, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	open := func(ws *websocket.Conn) {
		t.Helper()
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"handshake","params":{"protocol":"0.1","bindings":[]}}`)); err != nil {
			t.Fatal(err)
		}
		if _, data, err := ws.Read(ctx); err != nil || !json.Valid(data) {
			t.Fatalf("handshake: %s %v", data, err)
		}
	}
	var held []*websocket.Conn
	defer func() {
		for _, ws := range held {
			ws.CloseNow()
		}
	}()
	for range 2 {
		ws, _, err := dialUnix(ctx, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ws)
		open(ws)
	}
	if got := face.MemoryInUse(); got != 2*limit {
		t.Fatalf("two sessions reserved %d bytes, want %d", got, 2*limit)
	}

	refused := func(what string, dial func() (*websocket.Conn, *http.Response, error)) {
		t.Helper()
		ws, resp, err := dial()
		if err == nil {
			ws.CloseNow()
			t.Fatalf("%s: the upgrade past the budget was served", what)
		}
		if resp == nil {
			t.Fatalf("%s: no answer: %v", what, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m struct{ Error *api.Error }
		if err := json.Unmarshal(body, &m); err != nil || m.Error == nil {
			t.Fatalf("%s: status %d, body %q is not a JSON-RPC error", what, resp.StatusCode, body)
		}
		data, _ := m.Error.Data.(map[string]any)
		if resp.StatusCode != http.StatusTooManyRequests || m.Error.Code != api.CodeRateLimited || data["scope"] != "scomp_memory" ||
			data["limit"] != float64(2*limit) || data["in_use"] != float64(2*limit) || data["session_limit"] != float64(limit) {
			t.Errorf("%s: got %d %s, want 429 RATE_LIMITED scope scomp_memory limit %d in_use %d session_limit %d",
				what, resp.StatusCode, body, 2*limit, 2*limit, limit)
		}
		if !resp.Close {
			t.Errorf("%s: the refusal keeps its connection open (no Connection: close)", what)
		}
	}
	refused("unix", func() (*websocket.Conn, *http.Response, error) { return dialUnix(ctx, path, nil) })
	refused("tcp", func() (*websocket.Conn, *http.Response, error) {
		return websocket.Dial(ctx, "ws://"+addr+"/", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer s3cret"}}})
	})

	held[0].Close(websocket.StatusNormalClosure, "")
	held = held[1:]
	if !face.mem.wait(ctx, func(inUse int64) bool { return inUse == limit }) {
		t.Fatalf("a closed session's reservation was not given back: %d bytes in use", face.MemoryInUse())
	}
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer s3cret"}}})
	if err != nil {
		t.Fatalf("an upgrade after a session closed: %v", err)
	}
	held = append(held, ws)
	open(ws)
}
