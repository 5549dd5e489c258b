package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// 2,000 connections that never say anything are closed by the
// first-byte deadline, while a client that talks is served meanwhile.
func TestFirstByteDeadlineClosesIdleConnections(t *testing.T) {
	testkit.CheckGoroutines(t)
	const idle = 2000
	r := serve(t, Config{Limits: Limits{FirstByte: 500 * time.Millisecond, Connections: 3 * idle, ConnectionsPerUID: 3 * idle}})
	ctx := context.Background()
	conns := make([]net.Conn, 0, idle)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range idle {
		c, err := net.Dial("unix", r.cfg.Socket)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	good, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if h, err := good.Health(ctx); err != nil || h.Status != api.HealthOK {
		t.Fatalf("a well-behaved client beside %d idle ones: %+v, %v", idle, h, err)
	}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waitEOF(t, c, 10*time.Second)
		}()
	}
	wg.Wait()
	// The talking client outlived them all.
	if h, err := good.Health(ctx); err != nil || h.Status != api.HealthOK {
		t.Errorf("the well-behaved client after the idle ones closed: %+v, %v", h, err)
	}
}

// readRefusal reads the coded error a refused connection is sent.
func readRefusal(t *testing.T, c net.Conn) *api.Error {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatalf("no refusal: %q, %v", line, err)
	}
	var m struct{ Error *api.Error }
	if err := jsonUnmarshal(line, &m); err != nil || m.Error == nil {
		t.Fatalf("refusal %q is not a JSON-RPC error: %v", line, err)
	}
	return m.Error
}

// Connections past the per-uid cap, and past the total, are refused with
// RATE_LIMITED naming the limit; a slot freed is usable again.
func TestConnectionCaps(t *testing.T) {
	testkit.CheckGoroutines(t)
	for _, tc := range []struct {
		name   string
		limits Limits
		scope  string
	}{
		{"per uid", Limits{ConnectionsPerUID: 3, Connections: 100}, "connections_per_uid"},
		{"total", Limits{ConnectionsPerUID: 100, Connections: 3}, "connections"},
	} {
		// The per-uid cap is the agent socket's; the control socket
		// (too small a total for a reserve here) meets the total.
		sock := func(r *served) string {
			if tc.scope == "connections_per_uid" {
				return r.cfg.Socket
			}
			return r.cfg.ControlSocket
		}
		t.Run(tc.name, func(t *testing.T) {
			r := serve(t, Config{Limits: tc.limits})
			ctx := context.Background()
			var held []*client.Client
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for range 3 {
				c, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Health(ctx); err != nil { // admitted and served
					t.Fatal(err)
				}
				held = append(held, c)
			}
			extra, err := net.Dial("unix", sock(r))
			if err != nil {
				t.Fatal(err)
			}
			defer extra.Close()
			e := readRefusal(t, extra)
			if d := dataOf(e); e.Code != api.CodeRateLimited || d["scope"] != tc.scope || d["limit"] != float64(3) {
				t.Errorf("over the cap: %+v, want RATE_LIMITED scope %s limit 3", e, tc.scope)
			}
			// Free a slot: the next connection is served.
			r.mu.Lock()
			before := len(r.conns)
			r.mu.Unlock()
			held[0].Close()
			<-held[0].Done()
			held = held[1:]
			waitConns(t, r.Server, "the freed slot", func() bool { return len(r.conns) < before })
			c, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
			if err != nil {
				t.Fatalf("the freed slot: %v", err)
			}
			defer c.Close()
			if _, err := c.Health(ctx); err != nil {
				t.Errorf("the freed slot: %v", err)
			}
		})
	}
}

// The control socket keeps slots that neither TCP nor the agent sockets
// can take: with unauthenticated TCP at its own budget, the agent
// socket's uid at its cap and authenticated TCP holding the rest, the
// user is still served on the control socket.
func TestControlSocketReserveAndTCPBudget(t *testing.T) {
	testkit.CheckGoroutines(t)
	r, addr, token := tcpServer(t, Limits{Connections: 16, ControlReserve: 4, ConnectionsPerUID: 5, UnauthenticatedTCP: 4})
	ctx := context.Background()
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	dialTCP := func() {
		t.Helper()
		c, err := client.DialTCP(ctx, addr, token, client.Options{})
		if err != nil {
			t.Fatalf("authenticated TCP client %d: %v", len(held), err)
		}
		held = append(held, c)
	}
	serve := func(sock string) {
		t.Helper()
		c, err := client.Dial(ctx, sock, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if _, err := c.Health(ctx); err != nil {
			t.Fatalf("connection %d on %s: %v", len(held), filepath.Base(sock), err)
		}
	}
	refused := func(network, address, scope string, limit int) {
		t.Helper()
		c, err := net.Dial(network, address)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		e := readRefusal(t, c)
		if d := dataOf(e); e.Code != api.CodeRateLimited || d["scope"] != scope || d["limit"] != float64(limit) {
			t.Errorf("%s %s: %+v, want RATE_LIMITED scope %s limit %d", network, filepath.Base(address), e, scope, limit)
		}
	}
	rawTCP := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		return c
	}
	// Authenticated TCP clients leave the unauthenticated budget...
	dialTCP()
	dialTCP()
	// ...which 4 connections that never authenticate fill, whoever
	// they are.
	first := rawTCP()
	for range 3 {
		rawTCP()
	}
	refused("tcp", addr, "tcp_unauthenticated", 4)
	// The agent socket's uid has its own cap.
	for range 5 {
		serve(r.cfg.Socket)
	}
	refused("unix", r.cfg.Socket, "connections_per_uid", 5)
	// A connection that authenticates frees its place in the budget.
	fmt.Fprintf(first, `{"jsonrpc":"2.0","id":1,"method":"session.authenticate","params":{"token":%q}}`+"\n", token)
	first.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(first).ReadString('\n'); !strings.Contains(line, `"authenticated":true`) {
		t.Fatalf("authenticating a raw TCP connection: %q, %v", line, err)
	}
	// One more fills what the control reserve leaves (12): TCP (refused
	// after it by the same accept loop) and the agent socket are refused.
	rawTCP()
	refused("tcp", addr, "connections", 12)
	refused("unix", r.cfg.Socket, "connections", 12)
	if _, err := client.DialTCP(ctx, addr, token, client.Options{}); !errors.Is(err, api.ErrRateLimited) {
		t.Errorf("a TCP client beyond the shared connections: %v, want RATE_LIMITED", err)
	}
	// The user is served in the reserve, up to the total.
	for range 4 {
		serve(r.cfg.ControlSocket)
	}
	if _, err := held[len(held)-1].(*client.Client).ConfirmList(ctx); err != nil {
		t.Errorf("confirm.list on the control socket: %v", err)
	}
	refused("unix", r.cfg.ControlSocket, "connections", 16)
}

// waitFor polls cond until it holds, for at most 10 s: for a state the
// daemon reaches asynchronously with no event to wait on.
// waitConns waits until cond holds of s's tracked connections (it is
// called with s.mu held), re-checking each time one is tracked or
// untracked.
func waitConns(t *testing.T, s *Server, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !s.watchConns(ctx, cond) {
		t.Fatalf("%s: not reached within 10s", what)
	}
}

func tcpServer(t *testing.T, lim Limits) (*served, string, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r := serve(t, Config{TCPAddr: addr, Limits: lim})
	token, err := os.ReadFile(r.cfg.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return r, addr, strings.TrimSpace(string(token))
}

// A TCP client that never authenticates is closed after Limits.Auth,
// whether it says nothing or trickles a line.
func TestTCPUnauthenticatedIsClosed(t *testing.T) {
	testkit.CheckGoroutines(t)
	_, addr, _ := tcpServer(t, Limits{Auth: 300 * time.Millisecond})
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	trickle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer trickle.Close()
	fmt.Fprint(trickle, `{"jsonrpc":"2.0","id":1,"method":"session.authenticate","params":{"tok`)
	start := time.Now()
	waitEOF(t, silent, 10*time.Second)
	waitEOF(t, trickle, 10*time.Second)
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("closed after %v, before the 300ms the limit allows", d)
	}
}

// Before authentication a connection holds at most a small line: an
// unterminated megabyte costs the daemon no line buffer, and the
// connection is answered and hung up on once the line crosses 4 KiB.
func TestTCPMemoryBeforeAuthentication(t *testing.T) {
	testkit.CheckGoroutines(t)
	r, addr, _ := tcpServer(t, Limits{Auth: 2 * time.Second})
	const n = 20
	var wg sync.WaitGroup
	junk := bytes.Repeat([]byte("a"), 1<<20) // no newline
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			c.Write(junk) // the daemon reads (and skips) it all
		}()
	}
	wg.Wait()
	if used := r.lineBudget.Used(); used != 0 {
		t.Errorf("%d unauthenticated connections hold %d bytes of line buffers, want 0", n, used)
	}
	for _, c := range conns {
		out := waitEOF(t, c, 10*time.Second)
		if strings.Contains(out, `"result"`) {
			t.Errorf("an unauthenticated connection got a result: %s", out)
		}
	}
}

// An oversized first line on TCP, without its newline, is answered as
// soon as it crosses the 4 KiB bound, and the connection is hung up; the
// daemon neither reads the rest nor waits for the authentication
// deadline.
func TestTCPLongFirstLineAnsweredAtOnce(t *testing.T) {
	testkit.CheckGoroutines(t)
	_, addr, _ := tcpServer(t, Limits{Auth: 5 * time.Second})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, `{"jsonrpc":"2.0","id":3,"method":"session.authenticate","params":{"token":"%s`, strings.Repeat("x", 8<<10))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if want := `{"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"line exceeds the limit of 4096 bytes; closing","data":{"limit":4096}}}` + "\n"; line != want {
		t.Fatalf("an unterminated 8 KiB first line: %q, %v; want %q", line, err, want)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("answered after %v, want at once (the authentication deadline is 5s)", d)
	}
	waitEOF(t, c, 2*time.Second)
}

// Tokens cannot be checked in bulk: the first message is answered alone
// and a wrong token ends the connection, so pipelined guesses go
// unread; and wrong tokens over fresh connections are throttled
// daemon-wide.
func TestTCPTokensAreNotCheckedInBulk(t *testing.T) {
	testkit.CheckGoroutines(t)
	_, addr, token := tcpServer(t, Limits{AuthFailureBurst: 3, AuthFailuresPerSecond: 0.001})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var guesses bytes.Buffer
	for i := range 200 {
		fmt.Fprintf(&guesses, `{"jsonrpc":"2.0","id":%d,"method":"session.authenticate","params":{"token":"guess-%d"}}`+"\n", i, i)
	}
	fmt.Fprintf(&guesses, `{"jsonrpc":"2.0","id":999,"method":"session.authenticate","params":{"token":%q}}`+"\n", token)
	c.Write(guesses.Bytes())
	out := waitEOF(t, c, 10*time.Second)
	if got := strings.Count(out, "\n"); got != 1 || !strings.Contains(out, "invalid token") {
		t.Errorf("200 pipelined guesses got %d answers (%q), want one invalid token and the connection closed", got, out)
	}
	// A batch is no way around it either.
	b, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fmt.Fprintf(b, `[{"jsonrpc":"2.0","id":1,"method":"session.authenticate","params":{"token":%q}},{"jsonrpc":"2.0","id":2,"method":"health.check"}]`+"\n", token)
	if out := waitEOF(t, b, 10*time.Second); !strings.Contains(out, "alone") || strings.Contains(out, `"result"`) {
		t.Errorf("a batch before authentication: %q, want a refusal and the connection closed", out)
	}
	// Two more wrong tokens spend the burst (one was spent above); after
	// that a wrong token is not answered at all (the throttle would hold
	// its answer past the authentication timeout), while the right token
	// is never throttled.
	for i := range 2 {
		if _, err := client.DialTCP(context.Background(), addr, fmt.Sprintf("wrong-%d", i), client.Options{}); !errors.Is(err, api.ErrPermissionDenied) {
			t.Fatalf("wrong token %d: %v, want PERMISSION_DENIED", i, err)
		}
	}
	w, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"method":"session.authenticate","params":{"token":"wrong-again"}}`+"\n")
	if out := waitEOF(t, w, 10*time.Second); out != "" {
		t.Errorf("a wrong token past the throttle's burst was answered: %q, want the connection closed unanswered", out)
	}
	cl, err := client.DialTCP(context.Background(), addr, token, client.Options{})
	if err != nil {
		t.Fatalf("the right token while wrong ones are throttled: %v", err)
	}
	cl.Close()
}

// A message started must be finished in time, on both faces: a frame
// header announcing 4 GiB, half a frame, and an unterminated line are
// answered and closed after Limits.Message.
func TestMessageDeadline(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := serve(t, Config{Limits: Limits{Message: 300 * time.Millisecond}})
	huge := make([]byte, 5)
	huge[0] = byte(frame.ExecuteRequest)
	binary.BigEndian.PutUint32(huge[1:], 0xFFFFFFFF)
	half := make([]byte, 5, 15)
	half[0] = byte(frame.ExecuteRequest)
	binary.BigEndian.PutUint32(half[1:], 100)
	half = append(half, `{"capabil`...)
	for _, tc := range []struct {
		name, send, want string
	}{
		{"frame of 0xFFFFFFFF bytes", string(huge), "must arrive whole"},
		{"half a frame", string(half), "must arrive whole"},
		{"line without a newline", `{"jsonrpc":"2.0","id":1,"method":"health.check","params":{"x":"` + strings.Repeat("y", 100<<10), "must arrive whole"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unix", r.cfg.Socket)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte(tc.send))
			start := time.Now()
			out := waitEOF(t, c, 10*time.Second)
			if !strings.Contains(out, tc.want) {
				t.Errorf("got %q, want %q before the close", trim([]byte(out)), tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("closed after %v", d)
			}
		})
	}
}

// A connection with nothing to do is closed after Limits.Idle; one that
// holds a subscription is not.
func TestIdleTimeout(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := serve(t, Config{Limits: Limits{Idle: 300 * time.Millisecond}})
	ctx := context.Background()
	sub, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := sub.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventAppDisconnected}}); err != nil {
		t.Fatal(err)
	}
	// Two idle periods, each measured by an idle connection's end.
	for _, kind := range []string{"json-rpc", "framed"} {
		c, err := net.Dial("unix", r.cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if kind == "framed" {
			frame.Write(c, frame.Frame{Type: frame.Ping})
		} else {
			fmt.Fprintln(c, `{"jsonrpc":"2.0","id":1,"method":"health.check"}`)
		}
		waitEOF(t, c, 10*time.Second)
	}
	select {
	case <-sub.Done():
		t.Fatal("the subscriber was closed as idle")
	default:
	}
	if _, err := sub.Health(ctx); err != nil {
		t.Errorf("the subscriber after two idle periods: %v", err)
	}
}

// Under a descriptor limit below the connection caps, the caps are
// lowered to fit it: connections that each send one request and then
// stay silent (so no first-byte deadline ends them) cannot use up the
// descriptors, a well-behaved client on the agent socket is refused at
// once with a coded error instead of waiting in the listen queue, and
// the user is served on the control socket. pcpd runs in a child with
// RLIMIT_NOFILE at 128 and the default caps (1024 in all, 512 per uid).
func TestDescriptorLimitLowersTheCaps(t *testing.T) {
	dir, err := os.MkdirTemp("", "pcpd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	_, stderr := startNofileChild(t, dir, 128, -1)
	sock, control := filepath.Join(dir, "pcp.sock"), filepath.Join(dir, "control.sock")
	const attackers = 200 // past 128 descriptors
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range attackers {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatalf("attacker connection %d: %v", len(conns), err)
		}
		conns = append(conns, c)
		fmt.Fprintln(c, `{"jsonrpc":"2.0","id":1,"method":"health.check"}`)
	}
	// Once the daemon has caught up (the last attacker's connection
	// has been answered, served or refused), nothing is left waiting.
	c := conns[len(conns)-1]
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Errorf("the last attacker's connection: %q, %v; want an answer", line, err)
	}
	health := func(sock string) (*api.HealthResult, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, sock, client.Options{})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return c.Health(ctx)
	}
	start := time.Now()
	if _, err := health(sock); err != nil && !errors.Is(err, api.ErrRateLimited) {
		t.Errorf("health.check on the agent socket beside %d silent connections: %v, want an answer or RATE_LIMITED", attackers, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("health.check on the agent socket took %v, want at once", d)
	}
	if h, err := health(control); err != nil || h.Status == "" {
		t.Errorf("health.check on the control socket: %+v, %v; want it served", h, err)
	}
	log := stderr.String()
	if !strings.Contains(log, "connection cap lowered") || !strings.Contains(log, "connections=64") || !strings.Contains(log, "nofile=128") {
		t.Errorf("the daemon's log does not name the lowered caps:\n%s", log)
	}
}

// Accept errors back off instead of spinning, the log stays small, and
// once the connections that used up the descriptors are gone the daemon
// answers again. pcpd runs in a child with RLIMIT_NOFILE lowered, and
// something other than connections (the child itself) takes all but a
// few descriptors, since the caps keep connections from using them up.
func TestAcceptBacksOffWhenDescriptorsRunOut(t *testing.T) {
	dir, err := os.MkdirTemp("", "pcpd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	child, stderr := startNofileChild(t, dir, 64, 4)
	sock := filepath.Join(dir, "pcp.sock")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 150 { // well past 64 descriptors; the backlog holds the rest
		c, err := net.Dial("unix", sock)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	// Some connection is refused with a coded error rather than left
	// hanging: the reserve descriptor sheds load.
	shed := make(chan string, len(conns))
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			if strings.Contains(line, "file_descriptors") {
				shed <- line
			}
		}()
	}
	wg.Wait()
	if len(shed) == 0 {
		t.Error("no connection was refused with RATE_LIMITED file_descriptors while descriptors ran out")
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	// Once the connections are gone, health.check is answered. An attempt
	// turned away while the closed connections still hold descriptors is
	// tried again when the child reports its connections changed.
	healthy := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := client.Dial(ctx, sock, client.Options{})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Health(ctx)
		return err
	}
	deadline := time.After(10 * time.Second)
	for err := healthy(); err != nil; err = healthy() {
		select {
		case <-child.lines:
		case <-time.After(time.Second): // an attempt may also meet the accept loop's back-off
		case <-deadline:
			t.Fatalf("health.check after the descriptors came back: %v", err)
		}
	}
	child.stop()
	t.Logf("%d connections, %d shed; the daemon's log:\n%s", 150, len(shed), stderr.String())
	if lines := strings.Count(stderr.String(), "accept failed"); lines > 20 {
		t.Errorf("%d accept-failure log lines in a few seconds; the log must be rate-limited", lines)
	}
	if len(stderr.String()) > 64<<10 {
		t.Errorf("the daemon wrote %d bytes of log", len(stderr.String()))
	}
}

// Two daemons on one state directory: the second is refused, naming the
// first's pid.
func TestStateDirIsLocked(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := serve(t, Config{})
	cfg := Config{Socket: filepath.Join(filepath.Dir(r.cfg.Socket), "second.sock"), StateDir: r.cfg.StateDir, TrustDir: t.TempDir()}
	_, err := New(cfg)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("in use by another pcpd (pid %d", os.Getpid())) {
		t.Fatalf("second daemon on the state dir: %v, want a refusal naming pid %d", err, os.Getpid())
	}
	if _, err := os.Stat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused daemon left a socket behind: %v", err)
	}
}

// Relative paths are made absolute at start, so apps.socket hands Tier 1
// apps a path they can use from any directory.
func TestRelativePathsMadeAbsolute(t *testing.T) {
	dir, err := os.MkdirTemp("", "pcpd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	t.Chdir(dir)
	cfg := Config{Socket: "run/pcp.sock", StateDir: "state", TrustDir: "trust", PolicyFile: "policy.toml"}
	if err := cfg.Defaults(); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]string{"socket": cfg.Socket, "control": cfg.ControlSocket, "apps": cfg.AppSocketDir, "state": cfg.StateDir, "trust": cfg.TrustDir, "policy": cfg.PolicyFile} {
		if !filepath.IsAbs(p) || !strings.HasPrefix(p, dir) {
			t.Errorf("%s path %q, want absolute under %s", name, p, dir)
		}
	}
}

// A socket directory, or the /tmp/pcp-<uid> fallback, that another user
// owns or can enter is refused and left alone.
func TestUnsafeSocketDirectoryRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test chowns to another user and must run as root (CI does)")
	}
	base := t.TempDir()
	tmp := filepath.Join(base, "tmp")
	os.Mkdir(tmp, 0o777)
	fallback := filepath.Join(tmp, fmt.Sprintf("pcp-%d", os.Getuid()))
	os.Mkdir(fallback, 0o700)
	os.Chown(fallback, 65534, 65534)
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", tmp)
	if _, err := New(Config{StateDir: filepath.Join(base, "state"), TrustDir: base}); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("fallback directory owned by another user: %v, want a refusal", err)
	}
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	if _, err := New(Config{Socket: filepath.Join(open, "pcp.sock"), StateDir: filepath.Join(base, "state2"), TrustDir: base}); err == nil || !strings.Contains(err.Error(), "open to other users") {
		t.Errorf("socket directory open to others: %v, want a refusal", err)
	}
}

// A client refuses a socket served by another user: root's pcpctl must
// not talk to a daemon (or an impostor) of someone else.
func TestClientChecksServerUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test switches users and must run as root (CI does)")
	}
	dir, err := os.MkdirTemp("", "pcpd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chown(dir, 65534, 65534)
	sock := filepath.Join(dir, "impostor.sock")
	stop := startImpostor(t, sock)
	defer stop()
	_, err = client.Dial(context.Background(), sock, client.Options{})
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodePermissionDenied || !strings.Contains(err.Error(), "served by uid 65534") {
		t.Errorf("dialling another user's socket: %v, want PERMISSION_DENIED naming uid 65534", err)
	}
	if _, err := client.DialFramed(context.Background(), sock); err == nil {
		t.Error("the framed client talked to another user's socket")
	}
}

// dataOf is an error's data as a JSON object.
func dataOf(e *api.Error) map[string]any {
	b, _ := json.Marshal(e.Data)
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// Past the throttle's burst, wrong tokens are answered at its rate however
// many connections carry them: each answer waits for the throttle.
func TestTCPWrongTokensAnsweredAtTheThrottlesRate(t *testing.T) {
	testkit.CheckGoroutines(t)
	const perSecond = 20
	_, addr, _ := tcpServer(t, Limits{AuthFailureBurst: 1, AuthFailuresPerSecond: perSecond})
	start := time.Now()
	const guesses = 5
	var wg sync.WaitGroup
	for i := range guesses {
		wg.Go(func() {
			if _, err := client.DialTCP(context.Background(), addr, fmt.Sprintf("wrong-%d", i), client.Options{}); !errors.Is(err, api.ErrPermissionDenied) {
				t.Errorf("wrong token %d: %v, want PERMISSION_DENIED", i, err)
			}
		})
	}
	wg.Wait()
	// The first is the burst; the other four wait a twentieth of a second
	// each, one after the other.
	if took, least := time.Since(start), (guesses-1)*time.Second/perSecond; took < least {
		t.Errorf("%d wrong tokens over fresh connections answered in %v, want at least %v", guesses, took, least)
	}
}
