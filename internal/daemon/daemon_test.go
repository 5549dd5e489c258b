package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/testkit"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

// A child process of this test binary, run as another user, dials the
// socket named by PCP_TEST_DIAL and prints the first line it gets.
func TestMain(m *testing.M) {
	runBenchChild()
	runTestChild()
	if path := os.Getenv("PCP_TEST_DIAL"); path != "" {
		c, err := net.Dial("unix", path)
		if err != nil {
			fmt.Println("dial error:", err)
			os.Exit(0)
		}
		fmt.Fprintln(c, `{"jsonrpc":"2.0","id":1,"method":"health.check"}`)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Print(line)
		os.Exit(0)
	}
	code := m.Run()
	if pcpctlBuild.path != "" {
		os.RemoveAll(filepath.Dir(pcpctlBuild.path))
	}
	os.Exit(code)
}

type running struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan error
}

// start runs a real daemon on sockets in a fresh short directory.
func start(t *testing.T, cfg Config) *running {
	t.Helper()
	dir, err := os.MkdirTemp("", "pcpd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(dir, "run", "pcp.sock")
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(dir, "state")
	}
	if cfg.TrustDir == "" {
		cfg.TrustDir = filepath.Join(dir, "trust")
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ready := make(chan struct{})
	cfg.Ready = func() { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- Run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-r.done:
		t.Fatalf("daemon failed to start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon not ready after 10s")
	}
	r.cfg.Defaults()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	<-r.done
	r.done <- nil
}

func TestServesBothSocketsAndShutsDownCleanly(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := start(t, Config{})
	ctx := context.Background()
	for _, path := range []string{r.cfg.Socket, r.cfg.ControlSocket} {
		c, err := client.Dial(ctx, path, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		h, err := c.Health(ctx)
		if err != nil || h.Status != api.HealthOK {
			t.Fatalf("health on %s: %+v, %v", path, h, err)
		}
		c.Close()
	}
	st, err := os.Stat(filepath.Dir(r.cfg.Socket))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("socket dir mode = %v, want 0700", st.Mode().Perm())
	}
	// A second daemon on the same socket is refused.
	cfg2 := r.cfg
	cfg2.Ready = nil
	cfg2.StateDir = t.TempDir()
	ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := Run(ctx2, cfg2); err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Errorf("second daemon: %v, want 'another daemon'", err)
	}
	r.stop()
	if _, err := os.Stat(r.cfg.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind after shutdown: %v", err)
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	testkit.CheckGoroutines(t)
	dir, _ := os.MkdirTemp("", "pcpd")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "pcp.sock")
	// A socket file nobody listens on, as a killed daemon leaves behind.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	r := start(t, Config{Socket: sock})
	c, err := client.Dial(context.Background(), r.cfg.Socket, client.Options{})
	if err != nil {
		t.Fatalf("dial after stale socket: %v", err)
	}
	c.Close()
}

func TestTCPNeedsToken(t *testing.T) {
	testkit.CheckGoroutines(t)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	r2 := start(t, Config{TCPAddr: addr})
	token, err := os.ReadFile(r2.cfg.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(r2.cfg.TokenFile)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", st.Mode().Perm())
	}
	ctx := context.Background()
	if _, err := client.DialTCP(ctx, addr, "wrong", client.Options{}); !errors.Is(err, api.ErrPermissionDenied) {
		t.Errorf("wrong token: got %v, want PERMISSION_DENIED", err)
	}
	c, err := client.DialTCP(ctx, addr, string(token), client.Options{})
	if err != nil {
		t.Fatalf("right token: %v", err)
	}
	defer c.Close()
	if _, err := c.Health(ctx); err != nil {
		t.Errorf("health after auth: %v", err)
	}
	if err := Run(ctx, Config{TCPAddr: "0.0.0.0:7878", Socket: filepath.Join(t.TempDir(), "x.sock")}); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("non-loopback tcp: %v, want refusal", err)
	}
}

func TestAllowPeer(t *testing.T) {
	if !unixsock.AllowPeer(1000, 1000) || unixsock.AllowPeer(1001, 1000) || unixsock.AllowPeer(0, 1000) {
		t.Error("allowPeer must accept exactly the daemon's own uid")
	}
}

// A process of another user that reaches the socket (here the directory
// is opened up on purpose) is refused with a coded error.
func TestOtherUserRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test switches users and must run as root (CI does)")
	}
	r := start(t, Config{})
	dir := filepath.Dir(r.cfg.Socket)
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	os.Chmod(r.cfg.Socket, 0o777)
	// The test binary must be executable by the other user.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "child")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PCP_TEST_DIAL="+r.cfg.Socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	if !strings.Contains(string(out), `"code":-32004`) || !strings.Contains(string(out), "uid 65534") {
		t.Errorf("other user got %q, want a PERMISSION_DENIED refusal naming uid 65534", out)
	}
}

// Many clients, each with many requests in flight, over the real socket.
func TestManyConcurrentClients(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := start(t, Config{})
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			var inner sync.WaitGroup
			for range 32 {
				inner.Add(1)
				go func() {
					defer inner.Done()
					res, err := c.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "pcp.inspection.list_apps", AppID: "pcp.inspection"})
					if err != nil || res.Status != api.StatusSuccess {
						t.Errorf("invoke: %+v, %v", res, err)
					}
				}()
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	c, _ := client.Dial(ctx, r.cfg.ControlSocket, client.Options{})
	defer c.Close()
	v, err := c.AuditVerify(ctx)
	if err != nil || !v.OK || v.Entries != 16*32 {
		t.Errorf("audit: %+v, %v; want %d entries", v, err, 16*32)
	}
}

// Both faces share the agent socket: the first byte decides.
func TestFramedAndJSONRPCOnOneSocket(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := start(t, Config{})
	c, err := net.Dial("unix", r.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := frame.Write(c, frame.Frame{Type: frame.Ping}); err != nil {
		t.Fatal(err)
	}
	f, err := frame.NewReader(c, 1<<20).Next()
	if err != nil || f.Type != frame.Pong || !strings.Contains(string(f.Payload), `"capability_count":6`) {
		t.Fatalf("framed ping: %v %s, %v", f.Type, f.Payload, err)
	}
	for _, first := range []string{"{", " {", "\n{", "\t{", "["} {
		j, err := net.Dial("unix", r.cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		j.SetDeadline(time.Now().Add(5 * time.Second))
		req := first[:len(first)-1] + `{"jsonrpc":"2.0","id":1,"method":"health.check"}`
		if first == "[" {
			req = `[{"jsonrpc":"2.0","id":1,"method":"health.check"}]`
		}
		fmt.Fprintln(j, req)
		line, err := bufio.NewReader(j).ReadString('\n')
		j.Close()
		if err != nil || !strings.Contains(line, `"status":"ok"`) {
			t.Errorf("JSON-RPC starting with %q: %q, %v", first, line, err)
		}
	}
}
