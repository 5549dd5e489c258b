package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/systemd"
)

// pcpdBin is the pcpd these tests run, built once by TestMain.
var pcpdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pcpdbin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pcpdBin = filepath.Join(dir, "pcpd")
	// go test puts its own go first on PATH.
	build := exec.Command("go", "build", "-o", pcpdBin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// activation is pcpd run by systemd's own systemd-socket-activate, which
// binds the sockets, waits for the first connection on any of them, then
// execs pcpd (in its own process) with LISTEN_FDS.
type activation struct {
	dir, run string // run is XDG_RUNTIME_DIR
	cmd      *exec.Cmd
	// lines carries pcpd's (and systemd-socket-activate's) stderr.
	lines  chan string
	mu     sync.Mutex
	stderr strings.Builder
	notify *net.UnixConn // NOTIFY_SOCKET
	exited chan struct{}
	err    error // the process's exit, once exited is closed
}

// newActivation makes the directories: run/pcp as pcpd.socket's
// DirectoryMode=0700 leaves it.
func newActivation(t *testing.T) *activation {
	t.Helper()
	dir, err := os.MkdirTemp("", "pcpact")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	a := &activation{dir: dir, run: filepath.Join(dir, "run"), lines: make(chan string, 256), exited: make(chan struct{})}
	if err := os.MkdirAll(filepath.Join(a.run, "pcp"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.run, 0o700); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *activation) path(name string) string { return filepath.Join(a.run, "pcp", name) }

// start runs systemd-socket-activate listening on socks, with fdnames
// (colon-separated, "" for none), and waits until it listens on each.
func (a *activation) start(t *testing.T, socks []string, fdnames string, extra ...string) {
	t.Helper()
	ssa, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Fatal("systemd-socket-activate is not installed (Debian's systemd package has it; scripts/test installs it)")
	}
	nsock := filepath.Join(a.dir, "notify")
	a.notify, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: nsock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.notify.Close() })
	args := extra
	for _, s := range socks {
		args = append(args, "--listen="+s)
	}
	if fdnames != "" {
		args = append(args, "--fdname="+fdnames)
	}
	// systemd-socket-activate passes its child only the variables named.
	for _, kv := range []string{"XDG_RUNTIME_DIR=" + a.run, "HOME=" + filepath.Join(a.dir, "home"),
		"XDG_STATE_HOME=" + filepath.Join(a.dir, "state"), "XDG_CONFIG_HOME=" + filepath.Join(a.dir, "config"), "NOTIFY_SOCKET=" + nsock} {
		args = append(args, "--setenv="+kv)
	}
	args = append(args, pcpdBin, "--atspi=false", "--x11=false", "--notify=false")
	a.cmd = exec.Command(ssa, args...)
	a.cmd.Env = append(os.Environ(), "SYSTEMD_LOG_TARGET=console")
	pipe, err := a.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.stop)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			a.mu.Lock()
			a.stderr.WriteString(sc.Text() + "\n")
			a.mu.Unlock()
			select {
			case a.lines <- sc.Text():
			default:
			}
		}
		a.err = a.cmd.Wait()
		close(a.exited)
	}()
	for range socks {
		a.waitLine(t, "Listening on ")
	}
}

// waitLine waits for a stderr line containing want.
func (a *activation) waitLine(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l := <-a.lines:
			if strings.Contains(l, want) {
				return l
			}
		case <-a.exited:
			t.Fatalf("exited (%v) before writing %q:\n%s", a.err, want, a.log())
		case <-timeout:
			t.Fatalf("no %q on stderr after 30s:\n%s", want, a.log())
		}
	}
}

func (a *activation) log() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stderr.String()
}

// comm is the name of the process's executable: systemd-socket-activate
// until the first connection, pcpd once it has exec'd.
func (a *activation) comm(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", a.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// notified waits for the datagram pcpd sends on NOTIFY_SOCKET.
func (a *activation) notified(t *testing.T, want string) {
	t.Helper()
	a.notify.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 4096)
	n, err := a.notify.Read(buf)
	if err != nil {
		t.Fatalf("waiting for %s on NOTIFY_SOCKET: %v\n%s", want, err, a.log())
	}
	if got := string(buf[:n]); got != want {
		t.Fatalf("NOTIFY_SOCKET: got %q, want %q", got, want)
	}
}

// wait waits for the process to exit and returns its exit code.
func (a *activation) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("still running after 30s:\n%s", a.log())
	}
	var ee *exec.ExitError
	if errors.As(a.err, &ee) {
		return ee.ExitCode()
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	return 0
}

func (a *activation) stop() {
	select {
	case <-a.exited:
		return
	default:
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(15 * time.Second):
		a.cmd.Process.Kill()
		<-a.exited
	}
}

func dial(t *testing.T, path string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, path, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantAgentAndControl checks that the agent socket serves an agent and
// the control socket the user: policy.reload is the user's alone.
func wantAgentAndControl(t *testing.T, agent, control *client.Client) {
	t.Helper()
	ctx := callCtx(t)
	h, err := agent.Health(ctx)
	if err != nil {
		t.Fatalf("health.check on the agent socket: %v", err)
	}
	if h.Version != core.Version {
		t.Errorf("health.check: version %q, want %q", h.Version, core.Version)
	}
	var v api.PolicyView
	if err := agent.Call(ctx, api.MethodPolicyReload, nil, &v); !errors.Is(err, api.ErrPermissionDenied) {
		t.Errorf("policy.reload on the agent socket: got %v, want PERMISSION_DENIED", err)
	}
	if err := control.Call(ctx, api.MethodPolicyReload, nil, &v); err != nil {
		t.Errorf("policy.reload on the control socket: %v", err)
	}
	if _, err := control.ConfirmList(ctx); err != nil {
		t.Errorf("confirm.list on the control socket: %v", err)
	}
}

// The first connection to the agent socket starts pcpd, which takes the
// sockets by their names (--fdname agent:control) and serves both: an
// agent's request on one, a user-only method on the other. pcpd tells the
// manager READY=1 and, on SIGTERM, STOPPING=1, and leaves the socket
// files, which are the manager's, in place.
func TestSocketActivationByName(t *testing.T) {
	a := newActivation(t)
	agentSock, controlSock := a.path("pcp.sock"), a.path("control.sock")
	a.start(t, []string{agentSock, controlSock}, "agent:control")
	if got := a.comm(t); got == "pcpd" {
		t.Fatal("pcpd runs before any connection")
	}
	if _, err := os.Stat(filepath.Join(a.dir, "state", "pcp", "pcp.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the store exists before any connection: %v", err)
	}

	agent := dial(t, agentSock)
	ctx := callCtx(t)
	if _, err := agent.Health(ctx); err != nil {
		t.Fatalf("first request: %v\n%s", err, a.log())
	}
	a.notified(t, "READY=1")
	if got := a.comm(t); got != "pcpd" {
		t.Errorf("after the first connection the process is %q, want pcpd", got)
	}
	for _, want := range []string{"socket=agent path=" + agentSock + " fd=3 name=agent", "socket=control path=" + controlSock + " fd=4 name=control"} {
		if !strings.Contains(a.log(), want) {
			t.Errorf("log lacks %q:\n%s", want, a.log())
		}
	}
	control := dial(t, controlSock)
	wantAgentAndControl(t, agent, control)

	a.cmd.Process.Signal(syscall.SIGTERM)
	a.notified(t, "STOPPING=1")
	if code := a.wait(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0:\n%s", code, a.log())
	}
	for _, p := range []string{agentSock, controlSock} {
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Errorf("%s after pcpd exited: %v, want the manager's socket still there", p, err)
		}
	}
}

// listenStreams reads pcpd.socket's ListenStream= paths, with %t (the
// user manager's runtime directory) replaced by run.
func listenStreams(t *testing.T, run string) []string {
	t.Helper()
	units, err := systemd.Units("/usr/bin/pcpd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(units[0].Content), "\n") {
		if v, ok := strings.CutPrefix(l, "ListenStream="); ok {
			out = append(out, strings.ReplaceAll(v, "%t", run))
		}
	}
	if len(out) != 4 {
		t.Fatalf("pcpd.socket listens on %v, want the agent, control, MCP and scomp sockets", out)
	}
	return out
}

// As the installed pcpd.socket passes them (every descriptor named for
// the unit, pcpd.socket), pcpd matches the four sockets by path. The
// first connection here is the user's, on the control socket; then the
// agent socket and the MCP socket answer too.
func TestSocketActivationUnitSockets(t *testing.T) {
	a := newActivation(t)
	socks := listenStreams(t, a.run)
	names := strings.TrimSuffix(strings.Repeat(systemd.SocketUnit+":", len(socks)), ":")
	a.start(t, socks, names)

	control := dial(t, a.path("control.sock"))
	if _, err := control.ConfirmList(callCtx(t)); err != nil {
		t.Fatalf("first request, on the control socket: %v\n%s", err, a.log())
	}
	a.notified(t, "READY=1")
	agent := dial(t, a.path("pcp.sock"))
	wantAgentAndControl(t, agent, control)
	for i, role := range []string{"agent", "control", "mcp", "scomp"} {
		want := fmt.Sprintf("socket=%s path=%s fd=%d name=%s", role, socks[i], 3+i, systemd.SocketUnit)
		if !strings.Contains(a.log(), want) {
			t.Errorf("log lacks %q:\n%s", want, a.log())
		}
	}

	// MCP's stdio framing on mcp.sock: one JSON-RPC message a line.
	c, err := net.Dial("unix", a.path("mcp.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"activation-test","version":"1"}}}` + "\n"
	if _, err := c.Write([]byte(init)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatalf("MCP initialize on the activated mcp.sock: %v", err)
	}
	var resp struct {
		Result struct {
			ServerInfo struct{ Name string } `json:"serverInfo"`
		} `json:"result"`
	}
	if err := json.Unmarshal(line, &resp); err != nil || resp.Result.ServerInfo.Name == "" {
		t.Errorf("MCP initialize: %v: %s", err, line)
	}
}

// Sockets that do not match pcpd's, or descriptors that are not listening
// Unix stream sockets, stop pcpd with an error that says which and why.
func TestSocketActivationMismatch(t *testing.T) {
	tests := []struct {
		name    string
		socks   func(a *activation) []string
		fdnames string
		extra   []string
		want    string
	}{
		{"swapped names", func(a *activation) []string { return []string{a.path("pcp.sock"), a.path("control.sock")} }, "control:agent", nil,
			"socket activation: fd 3 is named control but bound to %s/pcp.sock, pcpd's agent socket"},
		{"named agent elsewhere", func(a *activation) []string { return []string{a.path("other.sock")} }, "agent", nil,
			"socket activation: fd 3 is named agent but bound to %s/other.sock, not to pcpd's agent socket %s/pcp.sock"},
		{"a socket of no role", func(a *activation) []string { return []string{a.path("pcp.sock"), a.path("extra.sock")} }, "", nil,
			"socket activation: fd 4 (unnamed, %s/extra.sock) matches none of pcpd's sockets"},
		{"a datagram socket", func(a *activation) []string { return []string{a.path("pcp.sock")} }, "agent", []string{"--datagram"},
			"socket activation: fd 3 (agent): not a stream socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newActivation(t)
			a.start(t, tt.socks(a), tt.fdnames, tt.extra...)
			// Any connection starts pcpd; it then refuses the sockets.
			typ := "unix"
			if len(tt.extra) > 0 {
				typ = "unixgram"
			}
			c, err := net.Dial(typ, tt.socks(a)[0])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("\n"))
			if code := a.wait(t); code != 1 {
				t.Errorf("exit code %d, want 1:\n%s", code, a.log())
			}
			dir := filepath.Join(a.run, "pcp")
			want := strings.ReplaceAll(tt.want, "%s", dir)
			if !strings.Contains(a.log(), "pcpd: "+want) {
				t.Errorf("stderr lacks %q:\n%s", want, a.log())
			}
		})
	}
}

// LISTEN_* that are wrong on their face stop pcpd before it opens
// anything.
func TestListenEnvErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, script string
		want         *regexp.Regexp
	}{
		{"another process's", `LISTEN_FDS=1 LISTEN_PID=1 exec "$0"`,
			regexp.MustCompile(`socket activation: LISTEN_PID=1 is not this process \(pid \d+\)`)},
		{"no LISTEN_PID", `LISTEN_FDS=1 exec "$0"`,
			regexp.MustCompile(`socket activation: LISTEN_FDS is set without LISTEN_PID`)},
		{"names and count disagree", `LISTEN_FDS=1 LISTEN_PID=$$ LISTEN_FDNAMES=agent:control exec "$0" 3</dev/null`,
			regexp.MustCompile(`socket activation: LISTEN_FDNAMES="agent:control" names 2 descriptors, LISTEN_FDS passes 1`)},
		{"a file, not a socket", `LISTEN_FDS=1 LISTEN_PID=$$ LISTEN_FDNAMES=agent exec "$0" 3</dev/null`,
			regexp.MustCompile(`socket activation: fd 3 \(agent\): not a socket`)},
		// Nothing passed at fd 3: the runtime may have put a descriptor
		// of its own there by the time pcpd looks.
		{"nothing at fd 3", `LISTEN_FDS=1 LISTEN_PID=$$ exec "$0" 3<&-`,
			regexp.MustCompile(`socket activation: fd 3: not (open|a socket)`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", tt.script, pcpdBin)
			cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+dir, "XDG_STATE_HOME="+dir)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("got %v, want exit status 1", err)
			}
			if !tt.want.Match(out) {
				t.Errorf("output %q, want it to match %q", out, tt.want)
			}
		})
	}
}

// The time from a client's first connection to pcpd's first reply when
// the manager starts pcpd on that connection ("activated"), beside the
// time from starting pcpd by hand to the first reply once it says it is
// ready ("started", the baseline: the same process start, store open and
// request, with nothing between them but pcpd's READY=1).
func BenchmarkFirstReply(b *testing.B) {
	ssa, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		b.Fatal("systemd-socket-activate is not installed (Debian's systemd package; scripts/test installs it)")
	}
	dir, err := os.MkdirTemp("", "pcpbench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	run := filepath.Join(dir, "run")
	if err := os.MkdirAll(filepath.Join(run, "pcp"), 0o700); err != nil {
		b.Fatal(err)
	}
	os.Chmod(run, 0o700)
	nsock := filepath.Join(dir, "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: nsock, Net: "unixgram"})
	if err != nil {
		b.Fatal(err)
	}
	defer notify.Close()
	env := []string{"XDG_RUNTIME_DIR=" + run, "HOME=" + dir, "XDG_STATE_HOME=" + filepath.Join(dir, "state"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "NOTIFY_SOCKET=" + nsock}
	pcpdArgs := []string{"--atspi=false", "--x11=false", "--notify=false", "--log-level=error"}
	agentSock := filepath.Join(run, "pcp", "pcp.sock")
	waitNotify := func(want string) {
		notify.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 256)
		for {
			n, err := notify.Read(buf)
			if err != nil {
				b.Fatalf("waiting for %s: %v", want, err)
			}
			if string(buf[:n]) == want {
				return
			}
		}
	}
	health := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, agentSock, client.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Health(ctx); err != nil {
			b.Fatal(err)
		}
	}
	stop := func(cmd *exec.Cmd) {
		cmd.Process.Signal(syscall.SIGTERM)
		waitNotify("STOPPING=1")
		cmd.Wait()
	}

	b.Run("started", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(pcpdBin, pcpdArgs...)
			cmd.Env = append(os.Environ(), env...)
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			waitNotify("READY=1")
			health()
			b.StopTimer()
			stop(cmd)
			b.StartTimer()
		}
	})
	b.Run("activated", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			args := []string{"--listen=" + agentSock, "--listen=" + filepath.Join(run, "pcp", "control.sock"), "--fdname=agent:control"}
			for _, kv := range env {
				args = append(args, "--setenv="+kv)
			}
			cmd := exec.Command(ssa, append(append(args, pcpdBin), pcpdArgs...)...)
			pipe, err := cmd.StderrPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			sc := bufio.NewScanner(pipe)
			for n := 0; n < 2 && sc.Scan(); {
				if strings.Contains(sc.Text(), "Listening on ") {
					n++
				}
			}
			go func() {
				for sc.Scan() {
				}
			}()
			b.StartTimer()
			health()
			b.StopTimer()
			waitNotify("READY=1")
			stop(cmd)
			os.Remove(agentSock)
			os.Remove(filepath.Join(run, "pcp", "control.sock"))
			b.StartTimer()
		}
	})
}
