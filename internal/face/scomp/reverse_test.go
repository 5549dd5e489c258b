package scomp

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/pcp-dev/pcp/internal/testkit"
)

// endedHandler signals each "scomp connection ended" the face logs.
type endedHandler struct {
	slog.Handler
	ended chan struct{}
}

func (h endedHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h endedHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "scomp connection ended" {
		select {
		case h.ended <- struct{}{}:
		default:
		}
	}
	return nil
}

// TestClientGoneDuringInvoke: a client that goes while the server waits
// for its answer to a reverse invoke ends the eval and the connection at
// once (no timeout is waited out: both are an hour here), and the face
// serves the next connection.
func TestClientGoneDuringInvoke(t *testing.T) {
	testkit.CheckGoroutines(t)
	ended := make(chan struct{}, 4)
	face := New(newBroker(t), Options{EvalTimeout: time.Hour, InvokeTimeout: time.Hour,
		Logger: slog.New(endedHandler{Handler: slog.DiscardHandler, ended: ended})})
	path, stop := unixServer(t, face)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	session := func(code string) *websocket.Conn {
		ws, _, err := dialUnix(ctx, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{`{"jsonrpc":"2.0","id":1,"method":"handshake","params":{"protocol":"0.1","bindings":[{"name":"wait"}]}}`,
			`{"jsonrpc":"2.0","id":2,"method":"eval","params":{"code":"` + code + `"}}`} {
			if err := ws.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
				t.Fatal(err)
			}
		}
		if _, data, err := ws.Read(ctx); err != nil || !strings.Contains(string(data), "sessionId") {
			t.Fatalf("handshake: %s %v", data, err)
		}
		return ws
	}
	ws := session("await wait()")
	if _, data, err := ws.Read(ctx); err != nil || string(data) != `{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"name":"wait","input":null}}` {
		t.Fatalf("invoke: %s %v", data, err)
	}
	ws.CloseNow()
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the connection outlived its client")
	}
	ws = session("1 + 1")
	defer ws.CloseNow()
	if _, data, err := ws.Read(ctx); err != nil || string(data) != `{"jsonrpc":"2.0","id":2,"result":{"value":2}}` {
		t.Fatalf("eval: %s %v", data, err)
	}
}
