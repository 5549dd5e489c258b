package scomp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/pcp-dev/pcp/internal/testkit"
)

// tcpServer serves face on a loopback port behind token.
func tcpServer(t *testing.T, face *Server, token string) (addr string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: face.TCPHandler(ln.Addr().String(), token), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ln) }()
	t.Cleanup(func() {
		hs.Close()
		face.Close()
		<-done
	})
	return ln.Addr().String()
}

// TestTCPUpgrade: on TCP the token, Host and Origin decide whether an
// upgrade is served; the subprotocol is chosen when offered and not
// needed; a frame over the bound closes the connection with 1009.
func TestTCPUpgrade(t *testing.T) {
	testkit.CheckGoroutines(t)
	addr := tcpServer(t, New(newBroker(t), Options{MaxMessage: 4096}), "s3cret")
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(h http.Header, protos ...string) (*websocket.Conn, *http.Response, error) {
		return websocket.Dial(ctx, "ws://"+addr+"/", &websocket.DialOptions{HTTPHeader: h, Subprotocols: protos})
	}
	good := http.Header{"Authorization": {"Bearer s3cret"}}
	refused := []struct {
		name   string
		header http.Header
		status int
		body   string
	}{
		{"no token", http.Header{}, http.StatusUnauthorized, "missing or wrong bearer token"},
		{"wrong token", http.Header{"Authorization": {"Bearer nope"}}, http.StatusUnauthorized, "missing or wrong bearer token"},
		{"foreign origin", http.Header{"Authorization": {"Bearer s3cret"}, "Origin": {"https://evil.example"}}, http.StatusForbidden, "a web page may not open a scomp session"},
		{"origin on another port", http.Header{"Authorization": {"Bearer s3cret"}, "Origin": {"http://127.0.0.1:1"}}, http.StatusForbidden, "a web page may not open a scomp session"},
		{"rebound host", http.Header{"Authorization": {"Bearer s3cret"}, "Host": {"evil.example:" + port}}, http.StatusForbidden, "answers only to 127.0.0.1"},
	}
	for _, r := range refused {
		h := r.header.Clone()
		var ws *websocket.Conn
		var resp *http.Response
		var err error
		if host := h.Get("Host"); host != "" {
			// websocket.Dial takes Host from the URL; send the upgrade by hand.
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
			req.Host = host
			req.Header = h
			req.Header.Del("Host")
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", "13")
			req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
		} else {
			ws, resp, err = dial(h)
			if err == nil {
				ws.CloseNow()
				t.Fatalf("%s: the upgrade was served", r.name)
			}
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != r.status || !strings.Contains(string(body), r.body) || !strings.Contains(string(body), `"code":-32004`) {
			t.Errorf("%s: got %d %s, want %d and %q", r.name, resp.StatusCode, body, r.status, r.body)
		}
	}

	for _, protos := range [][]string{{Subprotocol}, nil} {
		h := good.Clone()
		if protos != nil {
			h.Set("Origin", "http://localhost:"+port)
		}
		ws, _, err := dial(h, protos...)
		if err != nil {
			t.Fatalf("subprotocols %v: %v", protos, err)
		}
		if got, want := ws.Subprotocol(), strings.Join(protos, ""); got != want {
			t.Errorf("subprotocol %q, want %q", got, want)
		}
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"handshake","params":{"protocol":"0.1","bindings":[]}}`)); err != nil {
			t.Fatal(err)
		}
		_, data, err := ws.Read(ctx)
		if err != nil || !strings.Contains(string(data), `"sessionId"`) || !strings.Contains(string(data), `"network":"tcp"`) {
			t.Fatalf("handshake: %s %v", data, err)
		}
		// A frame over MaxMessage ends the connection with 1009.
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":2,"method":"eval","params":{"code":"`+strings.Repeat(" ", 5000)+`1"}}`)); err != nil {
			t.Fatal(err)
		}
		_, _, err = ws.Read(ctx)
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusMessageTooBig {
			t.Fatalf("an oversized frame: %v, want close 1009", err)
		}
		ws.CloseNow()
	}
}

// TestUnixRefusesOrigin: scomp.sock serves no web page at all.
func TestUnixRefusesOrigin(t *testing.T) {
	testkit.CheckGoroutines(t)
	path, stop := unixServer(t, New(newBroker(t), Options{}))
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, resp, err := dialUnix(ctx, path, http.Header{"Origin": {"http://localhost"}})
	if err == nil {
		ws.CloseNow()
		t.Fatal("an upgrade with an Origin was served on the Unix socket")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("got %v, want 403", err)
	}
	resp.Body.Close()
}

// TestCloseInterruptsEval: closing the face ends an eval in flight at
// once, not at its time limit.
func TestCloseInterruptsEval(t *testing.T) {
	testkit.CheckGoroutines(t)
	face := New(newBroker(t), Options{EvalTimeout: time.Hour})
	path, stop := unixServer(t, face)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := dialUnix(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	for _, m := range []string{`{"jsonrpc":"2.0","id":1,"method":"handshake","params":{"protocol":"0.1","bindings":[]}}`,
		`{"jsonrpc":"2.0","id":2,"method":"eval","params":{"code":"while (true) {}"}}`} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if _, data, err := ws.Read(ctx); err != nil || !strings.Contains(string(data), "sessionId") {
		t.Fatalf("handshake: %s %v", data, err)
	}
	stop() // returns once every connection is let go of
	if _, _, err := ws.Read(ctx); err == nil {
		t.Fatal("the connection outlived the face")
	}
}
