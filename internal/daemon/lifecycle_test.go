package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// served is a Server under test, serving on sockets in a fresh short
// directory.
type served struct {
	*Server
	cfg    Config // with defaults filled
	log    *testkit.SyncBuffer
	served chan error
}

// serve starts a Server; the test's cleanup closes it.
func serve(t *testing.T, cfg Config) *served {
	t.Helper()
	if cfg.Socket == "" {
		dir, err := os.MkdirTemp("", "pcpd")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		cfg.Socket = filepath.Join(dir, "run", "pcp.sock")
		if cfg.StateDir == "" {
			cfg.StateDir = filepath.Join(dir, "state")
		}
		cfg.TrustDir = filepath.Join(dir, "trust")
	}
	logs := &testkit.SyncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	ready := make(chan struct{})
	cfg.Ready = func() { close(ready) }
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &served{Server: s, cfg: s.cfg, log: logs, served: make(chan error, 1)}
	go func() { r.served <- s.Serve(context.Background()) }()
	<-ready
	t.Cleanup(func() {
		s.Close()
		if err := <-r.served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return r
}

// waitEOF waits for the daemon to close c, reading (and discarding) what
// it sends first; it returns what was read.
func waitEOF(t *testing.T, c net.Conn, within time.Duration) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	b, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("the daemon did not close the connection within %v: %v (read %q)", within, err, trim(b))
	}
	return string(b)
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "connection reset") }

func trim(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

// A slow JSON-RPC app: invocations wait until released.
type slowApp struct {
	arrived chan struct{}
	release chan struct{}
}

const slowAppID = "org.pcp.test.slow"

var slowManifest = json.RawMessage(`{"version":"1.0","capabilities":[{"name":"wait","tier":1,"trust_level":"auto",` +
	`"parameters":[{"name":"n","type":"integer","required":false}]}],"signature":""}`)

func (a *slowApp) dial(t *testing.T, ctx context.Context, socket string) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, socket, client.Options{Handler: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		a.arrived <- struct{}{}
		<-a.release
		var p api.InvokeCapabilityParams
		json.Unmarshal(params, &p)
		return &api.CapabilityResult{Status: api.StatusSuccess, Data: p.Params}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	if _, err := c.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: slowAppID, Manifest: slowManifest, Serve: &yes}); err != nil {
		t.Fatal(err)
	}
	return c
}

// serveSlowApp starts a daemon without rate limits, the slow app (room
// for n invocations) and an agent connection.
func serveSlowApp(t *testing.T, n int) (*served, *slowApp, *client.Client) {
	t.Helper()
	r := serve(t, Config{AllowUnsigned: true, RateLimits: &core.RateLimits{}})
	ctx := context.Background()
	app := &slowApp{arrived: make(chan struct{}, n), release: make(chan struct{})}
	appConn := app.dial(t, ctx, r.cfg.Socket)
	t.Cleanup(func() { appConn.Close() })
	agent, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	return r, app, agent
}

// Shutdown with 100 requests in flight: every one is answered, and every
// answer the client got has its audit entry, as the next start shows.
func TestShutdownDrainsRequestsInFlight(t *testing.T) {
	testkit.CheckGoroutines(t)
	const n = 100
	r, app, agent := serveSlowApp(t, n)
	ctx := context.Background()

	type answer struct {
		n   int
		res *api.CapabilityResult
		err error
	}
	answers := make(chan answer, n)
	for i := range n {
		go func() {
			res, err := agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: slowAppID + ".wait", AppID: slowAppID,
				Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
			answers <- answer{i, res, err}
		}()
	}
	for range n {
		<-app.arrived // all n are in the app's hands: in flight
	}
	shut := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		shut <- r.Shutdown(sctx)
	}()
	<-r.quit // Shutdown has begun: nothing new is accepted
	if c, err := client.Dial(ctx, r.cfg.Socket, client.Options{}); err == nil {
		c.Close()
		t.Error("a new connection was accepted during Shutdown")
	}
	close(app.release)
	var ok []int
	for range n {
		a := <-answers
		if a.err != nil || a.res.Status != api.StatusSuccess {
			t.Errorf("request %d: %+v, %v; want it answered during the drain", a.n, a.res, a.err)
			continue
		}
		ok = append(ok, a.n)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	// The next daemon on the same state dir has every acknowledged entry.
	cfg := r.cfg
	cfg.Socket = filepath.Join(filepath.Dir(r.cfg.Socket), "again.sock")
	cfg.ControlSocket, cfg.AppSocketDir = "", ""
	r2 := serve(t, cfg)
	user, err := client.Dial(ctx, r2.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	tail, err := user.AuditTail(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	logged := map[string]bool{}
	for _, e := range tail.Entries {
		if e.CapabilityID == slowAppID+".wait" && e.Outcome == "success" {
			logged[e.ParamsDigest] = true
		}
	}
	for _, i := range ok {
		if !logged[audit.ParamsDigest(json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)))] {
			t.Errorf("request %d was answered but has no audit entry after the restart", i)
		}
	}
}

// A Shutdown whose deadline passes closes what is left and says so.
func TestShutdownDeadlineClosesTheRest(t *testing.T) {
	testkit.CheckGoroutines(t)
	r, app, agent := serveSlowApp(t, 1)
	defer close(app.release)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: slowAppID + ".wait", AppID: slowAppID})
		done <- err
	}()
	<-app.arrived
	sctx, cancel := context.WithCancel(ctx)
	cancel() // no time at all to drain
	if err := r.Shutdown(sctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown past its deadline: %v, want context.Canceled", err)
	}
	if err := <-done; err == nil {
		t.Error("the request in flight succeeded although Shutdown closed its connection")
	}
}

// panicService is an in-process service whose one capability panics.
type panicService struct{}

func (panicService) AppID() string { return "pcp.test" }
func (panicService) Manifest() *api.Manifest {
	return &api.Manifest{Version: "1.0", Publisher: "pcpd", Capabilities: []api.CapabilityDecl{{Name: "panic", Tier: 1, TrustLevel: api.TrustAuto}}}
}
func (panicService) Invoke(context.Context, *api.Capability, api.InvocationSource, json.RawMessage) (*api.CapabilityResult, error) {
	panic("secret-panic-text")
}

// A handler's panic is logged with its stack; the peer gets a plain
// INTERNAL_ERROR, on both faces, and the connection goes on.
func TestHandlerPanicDoesNotReachThePeer(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := serve(t, Config{})
	if err := r.b.AddService(panicService{}); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", r.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintln(c, `{"jsonrpc":"2.0","id":1,"method":"invoke.capability","params":{"capability_id":"pcp.test.panic","app_id":"pcp.test","source":"SystemIntelligence"}}`)
	fmt.Fprintln(c, `{"jsonrpc":"2.0","id":2,"method":"health.check"}`)
	rd := bufio.NewReader(c)
	got := map[string]string{}
	for range 2 { // requests are served concurrently: either may come first
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, "secret-panic-text") {
			t.Errorf("the panic's text reached the peer: %s", line)
		}
		got[line[:len(`{"jsonrpc":"2.0","id":1`)]] = line
	}
	if want := `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"internal error"}}` + "\n"; got[`{"jsonrpc":"2.0","id":1`] != want {
		t.Errorf("the panicking request got %q, want %q", got[`{"jsonrpc":"2.0","id":1`], want)
	}
	if !strings.Contains(got[`{"jsonrpc":"2.0","id":2`], `"status":"ok"`) {
		t.Errorf("the connection did not go on after the panic: %q", got)
	}

	f, err := client.DialFramed(context.Background(), r.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = f.Request(context.Background(), frame.ExecuteRequest, &api.ExecuteRequest{Capability: "pcp.test.panic"}, nil)
	var fe *client.FrameError
	if !errors.As(err, &fe) || fe.Err.Code != api.CodeInternalError || fe.Err.Message != "internal error" {
		t.Errorf("framed: %v, want a plain INTERNAL_ERROR", err)
	}
	if log := r.log.String(); !strings.Contains(log, "secret-panic-text") || !strings.Contains(log, "goroutine") {
		t.Errorf("the panic is not logged with its stack:\n%s", log)
	}
}

// The Ready callback, Serve twice, Close twice.
func TestServerLifecycleCalls(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := serve(t, Config{})
	if err := r.Serve(context.Background()); !errors.Is(err, ErrServerClosed) {
		t.Errorf("second Serve: %v, want ErrServerClosed", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after Close: %v", err)
	}
	if _, err := os.Stat(r.cfg.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	// Cancelling Serve's context closes the server.
	s2, err := New(Config{Socket: filepath.Join(filepath.Dir(r.cfg.Socket), "b.sock"), StateDir: t.TempDir(), TrustDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var serveErr atomic.Value
	go func() { defer wg.Done(); serveErr.Store(s2.Serve(ctx)) }()
	cancel()
	wg.Wait()
	if err, _ := serveErr.Load().(error); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after its ctx ended: %v", err)
	}
}
