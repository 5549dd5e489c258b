// Command agentprobe is started by internal/cli's sandbox test with
// `pcpctl agent run`: inside the sandbox it tries every way a same-user
// agent could act as the user towards PCP, and the two things it may do
// (its own socket, the network), and prints one JSON object: for each
// case whether the attempt succeeded and what happened.
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
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

// Targets is what the test tells the probe to try, as JSON in argv[1].
type Targets struct {
	ControlSocket string `json:"control_socket"`
	SharedSocket  string `json:"shared_socket"`
	StateDir      string `json:"state_dir"`
	PolicyFile    string `json:"policy_file"`
	PolicyMarker  string `json:"policy_marker"`
	TrustDir      string `json:"trust_dir"`
	X11Socket     string `json:"x11_socket"`
	X11Abstract   string `json:"x11_abstract"`
	AbstractBus   string `json:"abstract_bus"`
	SessionBus    string `json:"session_bus"`
	A11yBus       string `json:"a11y_bus"`
	Wayland       string `json:"wayland"`
	TCP           string `json:"tcp"`
	PcpdPID       int    `json:"pcpd_pid"`
	UserPID       int    `json:"user_pid"`
	PcpctlPIDFIFO string `json:"pcpctl_pid_fifo"`
	Pcpd          string `json:"pcpd"`
	Pcpctl        string `json:"pcpctl"`
	// PcpdExe is the running daemon's executable.
	PcpdExe string `json:"pcpd_exe"`
	// ConfirmCapability needs the user's confirmation for this agent.
	ConfirmCapability string `json:"confirm_capability"`
	ConfirmApp        string `json:"confirm_app"`
}

// Result is one case's outcome: Succeeded is whether the attempt worked.
type Result struct {
	Succeeded bool   `json:"succeeded"`
	Detail    string `json:"detail"`
}

func main() {
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var t Targets
	if err := json.Unmarshal(raw, &t); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := map[string]Result{}
	try := func(name string, f func() (string, error)) {
		d, err := f()
		if err != nil {
			out[name] = Result{false, err.Error()}
		} else {
			out[name] = Result{true, d}
		}
	}

	// What it may do: its own socket, the network.
	own := os.Getenv("PCP_SOCKET")
	var confID string
	try("own_socket_health", func() (string, error) { return health(ctx, own) })
	try("own_socket_ping", func() (string, error) {
		return invoke(ctx, own, &api.InvokeCapabilityParams{CapabilityID: "pcp.inspection.ping", AppID: "pcp.inspection"})
	})
	try("own_socket_confirmation_requested", func() (string, error) {
		_, err := invoke(ctx, own, &api.InvokeCapabilityParams{CapabilityID: t.ConfirmCapability, AppID: t.ConfirmApp})
		var pe *api.Error
		if !errors.As(err, &pe) || pe.Code != api.CodeConfirmationRequired {
			return "", fmt.Errorf("want CONFIRMATION_REQUIRED, got %v", err)
		}
		b, _ := json.Marshal(pe.Data)
		var d struct {
			ConfirmationID string `json:"confirmation_id"`
		}
		json.Unmarshal(b, &d)
		confID = d.ConfirmationID
		return confID, nil
	})
	try("own_mcp_via_pcpctl", func() (string, error) {
		// An agent host inside the sandbox runs `pcpctl mcp`, which finds
		// mcp.sock beside $PCP_SOCKET: the agent's own MCP endpoint.
		lines := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agentprobe","version":"1"}}}` + "\n" +
			`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"pcp_invoke","arguments":{"capability_id":"pcp.inspection.ping"}}}` + "\n"
		o, err := run(ctx, lines, t.Pcpctl, "mcp")
		if err != nil {
			return "", err
		}
		for _, l := range strings.Split(o, "\n") {
			var m struct {
				ID     int `json:"id"`
				Result *struct {
					IsError bool `json:"isError"`
				} `json:"result"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && m.ID == 2 && m.Result != nil && !m.Result.IsError {
				return l, nil
			}
		}
		return "", fmt.Errorf("no successful pcp_invoke answer in %q", o)
	})
	try("own_scomp_ping", func() (string, error) {
		// client.DialScomp finds scomp.sock beside $PCP_SOCKET: the
		// agent's own scomp endpoint.
		sc, err := client.DialScomp(ctx, "")
		if err != nil {
			return "", err
		}
		defer sc.Close()
		v, err := sc.Eval(ctx, "const r = await pcp_inspection_ping({}); r")
		return string(v), err
	})
	try("network_tcp", func() (string, error) {
		c, err := net.DialTimeout("tcp", t.TCP, 5*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		return bufio.NewReader(c).ReadString('\n')
	})

	// What it must not: act as the user.
	try("admin_invoke", func() (string, error) {
		return invoke(ctx, own, &api.InvokeCapabilityParams{CapabilityID: t.ConfirmCapability, AppID: t.ConfirmApp, Admin: true})
	})
	try("approve_on_own_socket", func() (string, error) {
		c, err := client.Dial(ctx, own, client.Options{})
		if err != nil {
			return "", err
		}
		defer c.Close()
		r, err := c.ConfirmApprove(ctx, confID, "")
		return fmt.Sprint(r), err
	})
	try("control_socket", func() (string, error) { return health(ctx, t.ControlSocket) })
	try("shared_agent_socket", func() (string, error) { return health(ctx, t.SharedSocket) })
	try("pcpctl_confirm_approve", func() (string, error) {
		return run(ctx, "", t.Pcpctl, "--control-socket", t.ControlSocket, "confirm", "approve", confID)
	})
	try("pcpctl_confirm_approve_default_socket", func() (string, error) {
		return run(ctx, "", t.Pcpctl, "confirm", "approve", confID)
	})
	try("pcpctl_serve_submit", func() (string, error) {
		line := fmt.Sprintf(`{"op":"submit","view":"confirmations","form":"approve","values":{"confirmation_id":%q}}`+"\n", confID)
		o, err := run(ctx, line, t.Pcpctl, "--control-socket", t.ControlSocket, "serve")
		if err == nil && !strings.Contains(o, `"ok":true`) {
			err = errors.New(o)
		}
		if err == nil && !strings.Contains(o, "approved") {
			err = errors.New(o)
		}
		return o, err
	})
	db := filepath.Join(t.StateDir, "pcp.db")
	try("state_db_read", func() (string, error) {
		b, err := os.ReadFile(db)
		if err == nil && !strings.HasPrefix(string(b), "SQLite format") {
			err = fmt.Errorf("read %d bytes, not the database", len(b))
		}
		return "", err
	})
	try("state_db_open_rw", func() (string, error) {
		f, err := os.OpenFile(db, os.O_RDWR, 0)
		if err == nil {
			f.Close()
		}
		return "", err
	})
	try("state_dir_write", func() (string, error) {
		return "", os.WriteFile(filepath.Join(t.StateDir, "pcp.db"), []byte("x"), 0o600)
	})
	try("policy_read", func() (string, error) {
		b, err := os.ReadFile(t.PolicyFile)
		if err == nil && !strings.Contains(string(b), t.PolicyMarker) {
			err = fmt.Errorf("read %d bytes, not the user's policy", len(b))
		}
		return "", err
	})
	try("policy_write", func() (string, error) {
		return "", os.WriteFile(t.PolicyFile, []byte("[apps.\"org.pcp.notes\"]\ntrust_level = \"auto\"\n"), 0o600)
	})
	try("trust_dir_add_key", func() (string, error) {
		return "", os.WriteFile(filepath.Join(t.TrustDir, "agent.pub"), []byte("key"), 0o600)
	})
	try("unmount_hiding", func() (string, error) { return "", syscall.Unmount(t.StateDir, syscall.MNT_DETACH) })
	try("new_user_namespace", func() (string, error) { return run(ctx, "", "unshare", "--user", "--map-root-user", "true") })
	try("x11_socket", func() (string, error) { return dial("unix", t.X11Socket) })
	try("x11_abstract_socket", func() (string, error) { return dial("unix", "@"+t.X11Abstract) })
	try("bus_abstract_socket", func() (string, error) { return dial("unix", "@"+t.AbstractBus) })
	try("session_bus", func() (string, error) { return dial("unix", t.SessionBus) })
	try("a11y_bus", func() (string, error) { return dial("unix", t.A11yBus) })
	try("wayland_socket", func() (string, error) { return dial("unix", t.Wayland) })
	try("kill0_pcpd", func() (string, error) { return "", syscall.Kill(t.PcpdPID, 0) })
	try("sighup_pcpd", func() (string, error) { return "", syscall.Kill(t.PcpdPID, syscall.SIGHUP) })
	try("kill0_user_process", func() (string, error) { return "", syscall.Kill(t.UserPID, 0) })
	// Pid 1 here is bwrap's, outside the agent's Landlock domain: what
	// stops this is Landlock's signal scope, not the PID namespace.
	try("kill0_outside_landlock_domain", func() (string, error) {
		err := syscall.Kill(1, 0)
		if err != nil && !errors.Is(err, syscall.EPERM) {
			err = fmt.Errorf("%w (want EPERM from Landlock)", err)
		}
		return "", err
	})
	try("kill0_pcpctl", func() (string, error) {
		b, err := os.ReadFile(t.PcpctlPIDFIFO)
		if err != nil {
			return "", err
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return "", err
		}
		return "", syscall.Kill(pid, 0)
	})
	try("ptrace_pcpd", func() (string, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := unix.PtraceSeize(t.PcpdPID); err != nil {
			return "", err
		}
		unix.PtraceDetach(t.PcpdPID)
		return "", nil
	})
	try("second_pcpd", func() (string, error) { return secondDaemon(ctx, t) })
	// Last: replacing the binaries the user runs next. A rename over
	// them would work on a running binary; only the read-only bind
	// stops it.
	try("replace_pcpctl_binary", func() (string, error) { return "", replace(t.Pcpctl) })
	try("replace_pcpd_binary", func() (string, error) { return "", replace(t.PcpdExe) })

	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}

// replace renames a new file over path.
func replace(path string) error {
	tmp := path + ".agent"
	if err := os.WriteFile(tmp, []byte("#!/bin/sh\n"), 0o755); err != nil {
		return err
	}
	defer os.Remove(tmp)
	return os.Rename(tmp, path)
}

func health(ctx context.Context, path string) (string, error) {
	c, err := client.Dial(ctx, path, client.Options{})
	if err != nil {
		return "", err
	}
	defer c.Close()
	h, err := c.Health(ctx)
	if err != nil {
		return "", err
	}
	return h.Status, nil
}

func invoke(ctx context.Context, path string, p *api.InvokeCapabilityParams) (string, error) {
	c, err := client.Dial(ctx, path, client.Options{})
	if err != nil {
		return "", err
	}
	defer c.Close()
	r, err := c.InvokeCapability(ctx, p)
	if err != nil {
		return "", err
	}
	return r.Status, nil
}

func dial(network, addr string) (string, error) {
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	c.Close()
	return "connected", nil
}

// run runs a command with stdin and reports its output; a non-zero exit
// is an error carrying the output.
func run(ctx context.Context, stdin, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// secondDaemon starts pcpd on the user's state dir, unsigned manifests
// allowed: it succeeds if that daemon says it is ready.
func secondDaemon(ctx context.Context, t Targets) (string, error) {
	cmd := exec.CommandContext(ctx, t.Pcpd, "--state-dir", t.StateDir, "--allow-unsigned")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(stderr)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), "pcpd ready") {
			cmd.Process.Kill()
			cmd.Wait()
			return sc.Text(), nil
		}
	}
	err = cmd.Wait()
	return "", fmt.Errorf("%v: %s", err, strings.Join(lines, " | "))
}
