package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// scompRefusal asks for a WebSocket upgrade on the scomp socket at path
// and returns the HTTP status and the JSON-RPC error of the refusal.
func scompRefusal(t *testing.T, path string) (int, *api.Error) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return scompUpgrade(t, c, "localhost", "")
}

// scompUpgrade sends a WebSocket upgrade for host on c (with header
// lines extra, each ending in \r\n) and returns the HTTP status and the
// JSON-RPC error of the refusal. A refusal before the request is read
// may meet the write: only the answer matters.
func scompUpgrade(t *testing.T, c net.Conn, host, extra string) (int, *api.Error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("GET / HTTP/1.1\r\nHost: " + host + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" + extra + "\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to the upgrade: %v", err)
	}
	defer resp.Body.Close()
	var m struct{ Error *api.Error }
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || m.Error == nil {
		t.Fatalf("status %d: the body is not a JSON-RPC error: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, m.Error
}

// dialScompSessions opens n scomp sessions on the socket at path, closed
// when the test ends.
func dialScompSessions(t *testing.T, path string, n int) []*client.Scomp {
	t.Helper()
	var held []*client.Scomp
	for range n {
		s, err := client.DialScomp(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		held = append(held, s)
	}
	return held
}

func (r *served) perUIDCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.perUID[os.Getuid()]
}

// scomp.sock's connections count against the daemon's connection caps,
// and each uid holds at most Scomp.Sessions scomp sessions on it; both
// are refused with a coded RATE_LIMITED, and a slot freed is usable
// again.
func TestScompSharedSocketLimits(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := serve(t, Config{Limits: Limits{ConnectionsPerUID: 3, Connections: 100}, Scomp: ScompConfig{Sessions: 2}})
	ctx := context.Background()
	sock := r.cfg.Scomp.Socket
	held := dialScompSessions(t, sock, 2)
	status, e := scompRefusal(t, sock)
	if d := dataOf(e); status != http.StatusTooManyRequests || e.Code != api.CodeRateLimited || d["scope"] != "scomp_sessions" || d["limit"] != float64(2) || d["uid"] != float64(os.Getuid()) {
		t.Errorf("a third session: %d %+v, want 429 RATE_LIMITED scope scomp_sessions limit 2 naming the uid", status, e)
	}
	waitConns(t, r.Server, "the refused connection untracked", func() bool { return r.perUID[os.Getuid()] == 2 })

	// A JSON-RPC connection takes the uid's last slot: the next scomp
	// connection is refused before its request is read.
	c, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	status, e = scompRefusal(t, sock)
	if d := dataOf(e); status != http.StatusTooManyRequests || e.Code != api.CodeRateLimited || d["scope"] != "connections_per_uid" || d["limit"] != float64(3) {
		t.Errorf("past the per-uid cap: %d %+v, want 429 RATE_LIMITED scope connections_per_uid limit 3", status, e)
	}
	if _, err := held[0].Eval(ctx, "1 + 1"); err != nil {
		t.Errorf("a held session after the refusals: %v", err)
	}

	// Ending a session frees both its connection and its session.
	key := "uid:" + strconv.Itoa(os.Getuid())
	r.mu.Lock()
	before, sessions := r.perUID[os.Getuid()], r.scomp.sessions.count(key)
	r.mu.Unlock()
	held[0].Close()
	waitConns(t, r.Server, "the freed slot", func() bool {
		return r.perUID[os.Getuid()] < before && r.scomp.sessions.count(key) < sessions
	})
	s, err := client.DialScomp(ctx, sock)
	if err != nil {
		t.Fatalf("the freed slot: %v", err)
	}
	s.Close()
}

// A contained agent's own scomp.sock: its sessions are the agent's in the
// audit log, they count per agent name (apart from the uid's on the
// shared socket), and they end with the agent.
func TestScompAgentSocket(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := serve(t, Config{Scomp: ScompConfig{Sessions: 2}})
	ctx := context.Background()
	user, err := client.Dial(ctx, r.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	res, err := user.OpenAgent(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(filepath.Dir(res.Socket), "scomp.sock")
	held := dialScompSessions(t, sock, 2)
	if v, err := held[0].Eval(ctx, "const r = await pcp_inspection_ping({}); r"); err != nil {
		t.Fatalf("ping through the agent's scomp.sock: %s, %v", v, err)
	}
	tail, err := user.AuditTail(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	var actor string
	for _, e := range tail.Entries {
		if e.Kind == api.AuditInvoke {
			actor = e.Actor
		}
	}
	if actor != "agent:probe" {
		t.Errorf("the eval's invocation was audited as %q, want agent:probe", actor)
	}

	status, e := scompRefusal(t, sock)
	if d := dataOf(e); status != http.StatusTooManyRequests || e.Code != api.CodeRateLimited || d["scope"] != "scomp_sessions" || d["agent"] != "probe" {
		t.Errorf("a third session of the agent: %d %+v, want 429 RATE_LIMITED scope scomp_sessions naming agent probe", status, e)
	}
	// The uid's bound on the shared socket is its own.
	shared, err := client.DialScomp(ctx, r.cfg.Scomp.Socket)
	if err != nil {
		t.Fatalf("a shared session while the agent is at its bound: %v", err)
	}
	held = append(held, shared)

	// Closing the agent ends its scomp sessions, not the shared one.
	if _, err := user.CloseAgent(ctx, "probe"); err != nil {
		t.Fatal(err)
	}
	for _, s := range held[:2] {
		if _, err := s.Eval(ctx, "1"); err == nil {
			t.Error("an agent's scomp session outlived the agent")
		}
	}
	if _, err := shared.Eval(ctx, "1"); err != nil {
		t.Errorf("the shared session after the agent closed: %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the agent's scomp.sock outlived it: %v", err)
	}
}

// Shutting down with scomp connections counted (a live session, a
// connection that sent nothing) ends them and releases everything.
func TestScompShutdownWithConnectionsCounted(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := serve(t, Config{})
	ctx := context.Background()
	s, err := client.DialScomp(ctx, r.cfg.Scomp.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	quiet, err := net.Dial("unix", r.cfg.Scomp.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	waitConns(t, r.Server, "both connections counted", func() bool { return r.perUID[os.Getuid()] == 2 })
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := s.Eval(ctx, "1"); err == nil {
		t.Error("a scomp session outlived the daemon")
	}
	if n := r.perUIDCount(); n != 0 {
		t.Errorf("%d connections still counted after shutdown", n)
	}
}

// scompTCPUpgrade sends a WebSocket upgrade on c, a connection to the
// TCP endpoint (with header lines extra), and returns the HTTP status and
// the JSON-RPC error of the refusal.
func scompTCPUpgrade(t *testing.T, c net.Conn, extra string) (int, *api.Error) {
	t.Helper()
	return scompUpgrade(t, c, c.RemoteAddr().String(), extra)
}

// dialScompTCP opens a scomp session on the TCP endpoint at addr.
func dialScompTCP(ctx context.Context, addr, token string) (*websocket.Conn, error) {
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		return nil, err
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"handshake","params":{"protocol":"0.1","bindings":[]}}`)); err != nil {
		ws.CloseNow()
		return nil, err
	}
	if _, data, err := ws.Read(ctx); err != nil || !strings.Contains(string(data), `"sessionId"`) {
		ws.CloseNow()
		return nil, fmt.Errorf("handshake: %s %v", data, err)
	}
	return ws, nil
}

// The --scomp endpoint's connections are admitted as the JSON-RPC TCP
// endpoint's: counted against the total, and against the cap of
// unauthenticated TCP until they present the token; past it a
// connection is refused before its request is read. Its sessions
// together are bounded by Scomp.Sessions.
func TestScompTCPLimits(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := serve(t, Config{Limits: Limits{UnauthenticatedTCP: 2, Connections: 100}, Scomp: ScompConfig{Addr: "127.0.0.1:0", Sessions: 2}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := r.ScompAddr()
	tok, err := os.ReadFile(r.cfg.Scomp.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	total := func() int { return len(r.conns) }
	before := func() int { r.mu.Lock(); defer r.mu.Unlock(); return total() }()

	// Two connections that send nothing hold the unauthenticated slots.
	var quiet []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		quiet = append(quiet, c)
	}
	waitConns(t, r.Server, "two unauthenticated connections", func() bool { return len(r.unauth) == 2 && total() == before+2 })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	status, e := scompTCPUpgrade(t, c, "Authorization: Bearer "+token+"\r\n")
	c.Close()
	if d := dataOf(e); status != http.StatusTooManyRequests || e.Code != api.CodeRateLimited || d["scope"] != "tcp_unauthenticated" || d["limit"] != float64(2) {
		t.Errorf("past the unauthenticated cap: %d %+v, want 429 RATE_LIMITED scope tcp_unauthenticated limit 2", status, e)
	}
	for _, c := range quiet {
		c.Close()
	}
	waitConns(t, r.Server, "the quiet connections untracked", func() bool { return len(r.unauth) == 0 && total() == before })

	// Sessions authenticate: they leave the unauthenticated slots free
	// and count against the total.
	var held []*websocket.Conn
	defer func() {
		for _, ws := range held {
			ws.CloseNow()
		}
	}()
	for range 2 {
		ws, err := dialScompTCP(ctx, addr, token)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ws)
	}
	waitConns(t, r.Server, "two TCP sessions", func() bool { return len(r.unauth) == 0 && total() == before+2 })
	if n := r.scomp.sessions.count("tcp"); n != 2 {
		t.Errorf("%d TCP sessions counted, want 2", n)
	}
	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	status, e = scompTCPUpgrade(t, c, "Authorization: Bearer "+token+"\r\n")
	if d := dataOf(e); status != http.StatusTooManyRequests || e.Code != api.CodeRateLimited || d["scope"] != "scomp_sessions" || d["limit"] != float64(2) || d["transport"] != "tcp" {
		t.Errorf("a third TCP session: %d %+v, want 429 RATE_LIMITED scope scomp_sessions limit 2 transport tcp", status, e)
	}
	waitEOF(t, c, 5*time.Second) // Connection: close
	c.Close()

	// A closed session frees its slot.
	held[0].Close(websocket.StatusNormalClosure, "")
	held = held[1:]
	waitConns(t, r.Server, "the closed session's slot", func() bool { return r.scomp.sessions.count("tcp") == 1 && total() == before+1 })
	ws, err := dialScompTCP(ctx, addr, token)
	if err != nil {
		t.Fatalf("a session after one closed: %v", err)
	}
	held = append(held, ws)
}

// A --scomp connection that does not authenticate within Limits.Auth is
// closed, whether it sent nothing or was answered 401.
func TestScompTCPAuthTimeout(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := serve(t, Config{Limits: Limits{Auth: 200 * time.Millisecond}, Scomp: ScompConfig{Addr: "127.0.0.1:0"}})
	silent, err := net.Dial("tcp", r.ScompAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	wrong, err := net.Dial("tcp", r.ScompAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if status, e := scompTCPUpgrade(t, wrong, "Authorization: Bearer nope\r\n"); status != http.StatusUnauthorized || e.Code != api.CodePermissionDenied {
		t.Fatalf("a wrong token: %d %+v, want 401 PERMISSION_DENIED", status, e)
	}
	start := time.Now()
	waitEOF(t, silent, 5*time.Second)
	waitEOF(t, wrong, 5*time.Second)
	// The HTTP server's own header timeout is 10 s.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("closed after %v, want about the 200ms of Limits.Auth", d)
	}
	waitConns(t, r.Server, "both untracked", func() bool { return len(r.unauth) == 0 })
}

// A scomp memory total that cannot hold one session's heap stops the
// start.
func TestScompMemoryTotalBelowLimit(t *testing.T) {
	dir, err := os.MkdirTemp("", "pcpd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := New(Config{Socket: filepath.Join(dir, "run", "pcp.sock"), StateDir: filepath.Join(dir, "state"), TrustDir: filepath.Join(dir, "trust"),
		Scomp: ScompConfig{MemoryLimit: 64 << 20, MemoryTotal: 1 << 20}})
	if err == nil {
		s.Close()
		t.Fatal("pcpd started with a scomp memory total below one session's limit")
	}
	if !strings.Contains(err.Error(), "--scomp-memory-total") {
		t.Errorf("the error %q does not name --scomp-memory-total", err)
	}
}
