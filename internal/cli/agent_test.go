package cli_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/cli"
	"github.com/pcp-dev/pcp/internal/daemon"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// buildBinaries builds pcpctl, pcpd and the probe into a fresh directory:
// agent run re-executes its own binary inside the sandbox, so the test
// runs the real pcpctl, not this test binary.
func buildBinaries(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "pcpbin")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	// go test puts its own go first on PATH.
	gobin, err := exec.LookPath("go")
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(gobin, "build", "-o", dir+string(filepath.Separator), "../../cmd/pcpctl", "../../cmd/pcpd", "./testdata/agentprobe")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// userLayout is a user's PCP files laid out as pcpd lays them out by
// default, under one root: runtime dir, state dir, config dir.
type userLayout struct {
	root, socket, control, state, trust, policy string
}

func newLayout(tb testing.TB) userLayout {
	tb.Helper()
	root, err := os.MkdirTemp("", "pcpsbx") // short: socket paths
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(root) })
	l := userLayout{
		root:    root,
		socket:  filepath.Join(root, "run", "pcp", "pcp.sock"),
		control: filepath.Join(root, "run", "pcp", "control.sock"),
		state:   filepath.Join(root, "state", "pcp"),
		trust:   filepath.Join(root, "config", "pcp", "trusted-keys"),
		policy:  filepath.Join(root, "config", "pcp", "policy.toml"),
	}
	if err := os.MkdirAll(l.trust, 0o700); err != nil {
		tb.Fatal(err)
	}
	return l
}

// serve runs a real daemon on the layout in this process.
func (l userLayout) serve(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	errc := make(chan error, 1)
	cfg := daemon.Config{Socket: l.socket, ControlSocket: l.control, StateDir: l.state, TrustDir: l.trust, PolicyFile: l.policy,
		Logger: slog.New(slog.DiscardHandler), Ready: func() { close(ready) }}
	go func() { errc <- daemon.Run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-errc:
		cancel()
		tb.Fatalf("daemon.Run: %v", err)
	}
	tb.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			tb.Errorf("daemon.Run: %v", err)
		}
	})
}

// busPath is the unix:path= of a D-Bus address.
func busPath(tb testing.TB, addr string) string {
	for _, kv := range strings.Split(strings.TrimPrefix(addr, "unix:"), ",") {
		if p, ok := strings.CutPrefix(kv, "path="); ok {
			return p
		}
	}
	tb.Fatalf("bus address %q has no path", addr)
	return ""
}

type probeResult struct {
	Succeeded bool   `json:"succeeded"`
	Detail    string `json:"detail"`
}

// The agent sandbox, from inside: a probe started with `pcpctl agent run`
// against a real pcpd and a real headless desktop tries each way a
// same-user agent could act as the user towards PCP (each attack of issue
// 11's "Why" among them) and the two things it may do. The test runs as
// CI does, as root: the mounts, not file permissions, must hide PCP.
func TestAgentSandbox(t *testing.T) {
	bin := buildBinaries(t)
	desk, err := testkit.StartDesktop(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(desk.Stop)
	l := newLayout(t)
	const marker = "# pcp-test-marker: the user's own policy"
	policy := marker + "\n[agents.probe.apps.\"pcp.inspection\".capabilities.health]\ntrust_level = \"confirm\"\n"
	if err := os.WriteFile(l.policy, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	l.serve(t)

	// Stand-ins for what the desktop does not run, and the network.
	nonce := make([]byte, 6)
	rand.Read(nonce)
	abstractBus := "pcp-test-bus-" + hex.EncodeToString(nonce)
	run := desk.Vars["XDG_RUNTIME_DIR"]
	wayland := filepath.Join(run, "wayland-pcp-test")
	var listeners []net.Listener
	for _, addr := range []string{"@" + abstractBus, wayland} {
		ln, err := net.Listen("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, ln)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listeners = append(listeners, tcp)
	for _, ln := range listeners {
		t.Cleanup(func() { ln.Close() })
	}
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	userProc := exec.Command("sleep", "600")
	if err := userProc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { userProc.Process.Kill(); userProc.Wait() })
	fifo := filepath.Join(bin, "pcpctl.pid")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	display := strings.TrimPrefix(desk.Vars["DISPLAY"], ":")
	self, err := os.Executable() // the daemon runs in this process
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]any{
		"control_socket": l.control, "shared_socket": l.socket, "state_dir": l.state,
		"policy_file": l.policy, "policy_marker": marker, "trust_dir": l.trust,
		"x11_socket": "/tmp/.X11-unix/X" + display, "x11_abstract": "/tmp/.X11-unix/X" + display,
		"abstract_bus": abstractBus, "session_bus": busPath(t, desk.Vars["DBUS_SESSION_BUS_ADDRESS"]),
		"a11y_bus": busPath(t, desk.Vars["AT_SPI_BUS_ADDRESS"]), "wayland": wayland, "tcp": tcp.Addr().String(),
		"pcpd_pid": os.Getpid(), "user_pid": userProc.Process.Pid, "pcpctl_pid_fifo": fifo,
		"pcpd": filepath.Join(bin, "pcpd"), "pcpctl": filepath.Join(bin, "pcpctl"), "pcpd_exe": self,
		"confirm_capability": "pcp.inspection.health", "confirm_app": "pcp.inspection",
	}
	// Every socket the probe must not reach is reachable from here: what
	// stops it inside is the sandbox.
	for _, addr := range []string{l.control, l.socket, "/tmp/.X11-unix/X" + display, "@/tmp/.X11-unix/X" + display, "@" + abstractBus,
		targets["session_bus"].(string), targets["a11y_bus"].(string), wayland} {
		c, err := net.Dial("unix", addr)
		if err != nil {
			t.Fatalf("outside the sandbox, %s: %v", addr, err)
		}
		c.Close()
	}
	raw, _ := json.Marshal(targets)
	targetsFile := filepath.Join(bin, "targets.json")
	if err := os.WriteFile(targetsFile, raw, 0o644); err != nil {
		t.Fatal(err)
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	cmd := exec.Command(filepath.Join(bin, "pcpctl"), "agent", "run", "--name", "probe", "--", filepath.Join(bin, "agentprobe"), targetsFile)
	cmd.Env = append(os.Environ(), desk.Env...)
	cmd.Env = append(cmd.Env, "PCP_SOCKET="+l.socket, "WAYLAND_DISPLAY="+filepath.Base(wayland))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0) // until the probe reads
		if err == nil {
			fmt.Fprintf(f, "%d\n", cmd.Process.Pid)
			f.Close()
		}
	}()
	err = cmd.Wait()
	select {
	case <-wrote:
	default: // the probe never read it: unblock the writer
		if f, err := os.OpenFile(fifo, os.O_RDONLY, 0); err == nil {
			f.Close()
		}
		<-wrote
	}
	if err != nil {
		t.Fatalf("pcpctl agent run: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	var got map[string]probeResult
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("probe output: %v\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}

	allowed := []string{"own_socket_health", "own_socket_ping", "own_socket_confirmation_requested", "own_mcp_via_pcpctl", "own_scomp_ping", "network_tcp"}
	forbidden := []string{
		"admin_invoke", "approve_on_own_socket", "control_socket", "shared_agent_socket",
		"pcpctl_confirm_approve", "pcpctl_confirm_approve_default_socket", "pcpctl_serve_submit",
		"state_db_read", "state_db_open_rw", "state_dir_write", "policy_read", "policy_write", "trust_dir_add_key",
		"unmount_hiding", "new_user_namespace",
		"x11_socket", "x11_abstract_socket", "bus_abstract_socket", "session_bus", "a11y_bus", "wayland_socket",
		"kill0_pcpd", "sighup_pcpd", "kill0_user_process", "kill0_pcpctl", "kill0_outside_landlock_domain", "ptrace_pcpd", "second_pcpd",
		"replace_pcpctl_binary", "replace_pcpd_binary",
	}
	for _, name := range allowed {
		if r, ok := got[name]; !ok || !r.Succeeded {
			t.Errorf("%s: %+v, want it to succeed", name, r)
		}
	}
	for _, name := range forbidden {
		if r, ok := got[name]; !ok || r.Succeeded {
			t.Errorf("%s: %+v (present %v), want it to fail", name, r, ok)
		} else {
			t.Logf("%s: refused: %s", name, r.Detail)
		}
	}
	if len(got) != len(allowed)+len(forbidden) {
		t.Errorf("the probe ran %d cases, the test checks %d", len(got), len(allowed)+len(forbidden))
	}

	select {
	case <-hup:
		t.Error("pcpd received the agent's SIGHUP")
	default:
	}
	// Nothing of the user's changed, and the log names the agent.
	if b, err := os.ReadFile(l.policy); err != nil || string(b) != policy {
		t.Errorf("policy file now %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(l.trust, "agent.pub")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a key appeared in the trust dir: %v", err)
	}
	ctx := context.Background()
	user, err := client.Dial(ctx, l.control, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	if v, err := user.AuditVerify(ctx); err != nil || !v.OK {
		t.Errorf("audit verify: %+v, %v", v, err)
	}
	tail, err := user.AuditTail(ctx, 200)
	if err != nil {
		t.Fatal(err)
	}
	var invokes, agentEntries int
	for _, e := range tail.Entries {
		switch e.Kind {
		case api.AuditInvoke:
			invokes++
			if e.Actor != "agent:probe" {
				t.Errorf("invoke entry %d: actor %q, want agent:probe", e.Seq, e.Actor)
			}
		case api.AuditAgent:
			agentEntries++
		case api.AuditConfirmation:
			if e.Outcome == api.ConfirmApproved {
				t.Errorf("entry %d: a confirmation was approved: %+v", e.Seq, e)
			}
		}
	}
	if invokes < 3 || agentEntries != 2 {
		t.Errorf("%d invoke entries (want the probe's), %d agent entries (want opened and closed)", invokes, agentEntries)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(l.socket), "agents", "probe")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the agent's socket directory outlived it: %v", err)
	}
	out, _, err := runCLI(t, "--socket", l.socket, "audit", "tail", "-n", "50")
	if err != nil || !strings.Contains(out, "agent:probe") {
		t.Errorf("pcpctl audit tail: %v\n%s", err, out)
	}
}

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := cli.Run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), err
}

// agent run gives the command's exit status back, and --unsafe-no-sandbox
// runs it uncontained on its own socket all the same.
func TestAgentRunExitStatusAndUnsafe(t *testing.T) {
	bin := buildBinaries(t)
	l := newLayout(t)
	l.serve(t)
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"agent", "run", "--", "sh", "-c", "exit 7"}, 7},
		{[]string{"agent", "run", "--", "sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM)},
		{[]string{"agent", "run", "--", "no-such-command-pcp"}, 127},
		{[]string{"agent", "run", "--unsafe-no-sandbox", "--name", "loose", "--", "sh", "-c", "test \"$PCP_AGENT\" = loose && test -S \"$PCP_SOCKET\" && exit 5"}, 5},
	} {
		cmd := exec.Command(filepath.Join(bin, "pcpctl"), tt.args...)
		cmd.Env = append(os.Environ(), "PCP_SOCKET="+l.socket)
		out, err := cmd.CombinedOutput()
		var xe *exec.ExitError
		if !errors.As(err, &xe) || xe.ExitCode() != tt.code {
			t.Errorf("pcpctl %v: %v, want exit status %d\n%s", tt.args, err, tt.code, out)
		}
	}
}

// Without bubblewrap the agent is not started, and the error says why.
func TestAgentRunRefusesWithoutSandbox(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	marker := filepath.Join(t.TempDir(), "ran")
	_, _, err := runCLI(t, "--socket", filepath.Join(t.TempDir(), "none.sock"), "agent", "run", "--", "/bin/touch", marker)
	if err == nil || !strings.Contains(err.Error(), "bubblewrap") || !strings.Contains(err.Error(), "not starting /bin/touch uncontained") {
		t.Errorf("agent run without bwrap: %v, want a refusal naming bubblewrap", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Error("the command ran")
	}
	if _, _, err := runCLI(t, "agent", "run", "--name", "../x", "--", "true"); !cli.IsUsage(err) {
		t.Errorf("a bad --name: %v, want a usage error", err)
	}
}

// The sandbox's start-up cost: `pcpctl agent run -- true` (open the
// socket, bwrap, Landlock, exec, close) against `true` alone, the two
// interleaved in one loop so that both see the same machine. It reports
// the overhead per start; the goal is at most 50 ms.
func BenchmarkAgentRun(b *testing.B) {
	bin := buildBinaries(b)
	l := newLayout(b)
	l.serve(b)
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	env := append(os.Environ(), "PCP_SOCKET="+l.socket)
	start := func(argv ...string) time.Duration {
		t0 := time.Now()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", argv, err, out)
		}
		return time.Since(t0)
	}
	var bare, sandboxed time.Duration
	for b.Loop() {
		bare += start(truePath)
		sandboxed += start(filepath.Join(bin, "pcpctl"), "agent", "run", "--name", "bench", "--", truePath)
	}
	n := float64(b.N)
	b.ReportMetric(float64(bare.Microseconds())/n/1000, "bare-ms/op")
	b.ReportMetric(float64(sandboxed.Microseconds())/n/1000, "sandboxed-ms/op")
	b.ReportMetric(float64((sandboxed-bare).Microseconds())/n/1000, "overhead-ms/op")
}
