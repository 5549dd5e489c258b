package scomp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/rpc"
	"github.com/pcp-dev/pcp/internal/golden"
	"github.com/pcp-dev/pcp/internal/services/inspection"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// A golden transcript is a txtar file with a "transcript" section (the
// grammar of internal/golden). Names starting with "ws" are scomp
// connections: WebSocket over the face's Unix socket, as pcpd's
// scomp.sock serves them, from a peer seen as uid 1000, pid 4242. On
// them:
//
//	ws> TEXT          send TEXT as one text frame
//	ws> !binary TEXT  send TEXT as one binary frame
//	ws< TEXT          the next text frame is TEXT
//	ws< !closed CODE REASON  the server closed the connection so
//
// Every other name speaks PCP's JSON-RPC face on the same broker, as an
// app does; names starting with "user" as the user (the control
// socket's role). An optional "config" section sets "eval_timeout D",
// "confirm_wait D" and "invoke_timeout D". The
// broker runs with a fixed clock and deterministic ids; the session id
// is sess_1, sess_2, ... in order of handshake.
func TestGolden(t *testing.T) { golden.ForEach(t, "testdata/*.txtar", runGolden) }

func newBroker(t testing.TB) *core.Broker {
	b, _ := newBrokerStore(t, &core.RateLimits{})
	return b
}

// newBrokerStore is a broker with a fixed clock, deterministic ids,
// unsigned manifests allowed, pcp.inspection served and rate limits rl,
// and its store.
func newBrokerStore(t testing.TB, rl *core.RateLimits) (*core.Broker, *store.Store) {
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := testkit.NewClock(testkit.GoldenTime)
	cfg := core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(), AllowUnsigned: true,
		SessionID: "session-1", RateLimits: rl, LivenessInterval: -1,
		Now: clk.Now, AfterFunc: clk.AfterFunc, NewID: testkit.SeqIDs()}
	b, err := core.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.AddService(inspection.New(b)); err != nil {
		t.Fatal(err)
	}
	return b, st
}

// unixServer serves face on a Unix socket in a temporary directory, its
// peers seen with pid 4242; the returned function stops it.
func unixServer(t testing.TB, face *Server) (path string, stop func()) {
	path = filepath.Join(t.TempDir(), "scomp.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: face.UnixHandler(), ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			ctx = UnixConnContext(ctx, c)
			p := ctx.Value(peerKey{}).(peer)
			return context.WithValue(ctx, peerKey{}, peer{uid: p.uid, pid: 4242})
		}}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ln) }()
	return path, func() {
		hs.Close()
		face.Close()
		<-done
	}
}

func runGolden(t *testing.T, file string) {
	testkit.CheckGoroutines(t)
	ar := golden.Load(t, file)
	opts := Options{}
	for _, line := range ar.Lines("config") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "eval_timeout" && len(f) == 2:
			d, err := time.ParseDuration(f[1])
			if err != nil {
				t.Fatal(err)
			}
			opts.EvalTimeout = d
		case f[0] == "confirm_wait" && len(f) == 2:
			d, err := time.ParseDuration(f[1])
			if err != nil {
				t.Fatal(err)
			}
			opts.ConfirmWait = d
		case f[0] == "invoke_timeout" && len(f) == 2:
			d, err := time.ParseDuration(f[1])
			if err != nil {
				t.Fatal(err)
			}
			opts.InvokeTimeout = d
		default:
			t.Fatalf("unknown config line %q", line)
		}
	}
	n := 0
	opts.NewSessionID = func() string { n++; return fmt.Sprintf("sess_%d", n) }
	b := newBroker(t)
	face := New(b, opts)
	path, stop := unixServer(t, face)
	rs := rpc.NewServer(b, rpc.Options{})
	lines := golden.NewLines(t, func(name string, c net.Conn) {
		role := core.RoleAgent
		if strings.HasPrefix(name, "user") {
			role = core.RoleUser
		}
		rs.ServeConn(c, core.SessionInfo{Role: role, Transport: "unix", UID: 1000, PID: 4343})
	})
	conns := &wsConns{t: t, path: path, lines: lines, ws: map[string]*websocket.Conn{}}
	defer func() {
		conns.closeAll()
		lines.CloseAll()
		stop()
	}()
	ar.Play(t, golden.Script{Conns: conns, Ordered: func(name string) bool { return strings.HasPrefix(name, "ws") }})
}

type wsConns struct {
	t     *testing.T
	path  string
	lines *golden.Lines
	ws    map[string]*websocket.Conn
}

func dialUnix(ctx context.Context, path string, h http.Header) (*websocket.Conn, *http.Response, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	return websocket.Dial(ctx, "ws://localhost/", &websocket.DialOptions{HTTPClient: hc, HTTPHeader: h, Subprotocols: []string{Subprotocol}})
}

func (c *wsConns) conn(name string) (*websocket.Conn, error) {
	if ws, ok := c.ws[name]; ok {
		return ws, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := dialUnix(ctx, c.path, nil)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(1 << 22)
	c.ws[name] = ws
	return ws, nil
}

func (c *wsConns) Send(name, text string) error {
	if !strings.HasPrefix(name, "ws") {
		return c.lines.Send(name, text)
	}
	ws, err := c.conn(name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if rest, ok := strings.CutPrefix(text, "!binary "); ok {
		return ws.Write(ctx, websocket.MessageBinary, []byte(rest))
	}
	return ws.Write(ctx, websocket.MessageText, []byte(text))
}

func (c *wsConns) Recv(name string) (string, error) {
	if !strings.HasPrefix(name, "ws") {
		s, err := c.lines.Recv(name)
		return sameUID(s), err
	}
	ws, err := c.conn(name)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	typ, data, err := ws.Read(ctx)
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return fmt.Sprintf("!closed %d %s", int(ce.Code), ce.Reason), nil
	}
	if err != nil {
		return "", err
	}
	if typ != websocket.MessageText {
		return "", fmt.Errorf("a binary frame from the server: %q", data)
	}
	return sameUID(string(data)), nil
}

// sameUID writes the peer's uid, this test's own user's, as 1000, as
// transcripts do.
func sameUID(s string) string {
	uid := os.Getuid()
	for _, r := range [][2]string{{`"uid":%d,`, `"uid":1000,`}, {`"uid":%d}`, `"uid":1000}`}, {"uid=%d,", "uid=1000,"}} {
		s = strings.ReplaceAll(s, fmt.Sprintf(r[0], uid), r[1])
	}
	return s
}

func (c *wsConns) closeAll() {
	for _, ws := range c.ws {
		ws.CloseNow()
	}
}
