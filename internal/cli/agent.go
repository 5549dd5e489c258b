package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

// pcpctl agent run starts an agent contained: under bubblewrap, which
// gives it its own PID namespace and mounts that hide PCP's files, the
// display's and the buses' sockets, and then, inside, under Landlock,
// which scopes abstract Unix sockets and signals to its own domain. The
// order is: pcpctl opens the agent's socket on the control socket, runs
// bwrap, bwrap runs this same binary as `pcpctl agent _enter`, which
// restricts itself with Landlock, reports on a status pipe, and execs
// the command. A sandbox that cannot be built is an error, never an agent
// started uncontained (unless --unsafe-no-sandbox).

// ExitStatus is the exit status of a command pcpctl ran (agent run):
// ExitCode returns Code and FormatError prints nothing for it.
type ExitStatus struct{ Code int }

func (e *ExitStatus) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Exit codes of agent run when it cannot run the command.
const (
	exitEnterFailed = 126 // the sandbox helper could not restrict itself
	exitNotFound    = 127 // the command was not found
)

func (e *env) agentCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run an agent contained, with its own PCP socket and identity",
	}
	cmd.AddCommand(e.agentRunCommand(), e.agentCheckCommand(), e.agentEnterCommand())
	return cmd
}

func (e *env) agentRunCommand() *cobra.Command {
	var (
		name      string
		unsafe    bool
		noNetwork bool
	)
	cmd := &cobra.Command{
		Use:   "run [--name NAME] [--no-network] [--unsafe-no-sandbox] -- COMMAND [ARG...]",
		Short: "Start COMMAND contained, reaching PCP only as the agent NAME",
		Long: `Run opens the agent's own socket on pcpd (agents.open, on the control
socket), then starts COMMAND under bubblewrap and Landlock with PCP_SOCKET
pointing at it, waits for it, closes the socket and exits with its status.

Contained, the agent sees the filesystem but not PCP's runtime directory
(the control socket), state, policy or trust directory, nor the X display,
the Wayland socket, the session bus or the accessibility bus (abstract
sockets included); it runs in its own PID namespace and cannot signal or
ptrace pcpd or any of your processes. It keeps the network unless
--no-network. Every request it makes is audited as agent:NAME, and
policy.toml may set [agents.NAME] rules. NAME defaults to COMMAND's base
name. A system that cannot build the sandbox (see 'pcpctl agent check') is
an error; --unsafe-no-sandbox runs COMMAND uncontained instead.`,
		Args: cobra.MinimumNArgs(1),
		RunE: e.run(func(ctx context.Context, cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 {
				return usagef("put -- before the command: pcpctl agent run [flags] -- COMMAND")
			}
			if name == "" {
				name = filepath.Base(args[0])
				if err := api.CheckAgentName(name); err != nil {
					return usagef("%v; name the agent with --name", err)
				}
			} else if err := api.CheckAgentName(name); err != nil {
				return usagef("--name: %v", err)
			}
			return e.agentRun(ctx, runOptions{name: name, unsafe: unsafe, noNetwork: noNetwork, command: args})
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "the agent's name in the audit log and the policy (default: COMMAND's base name)")
	cmd.Flags().BoolVar(&unsafe, "unsafe-no-sandbox", false, "run COMMAND without the sandbox: it can then act as you towards PCP")
	cmd.Flags().BoolVar(&noNetwork, "no-network", false, "give the agent no network either")
	return cmd
}

func (e *env) agentCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Report whether this system can contain an agent",
		Args:  cobra.NoArgs,
		RunE: e.run(func(ctx context.Context, cmd *cobra.Command, args []string) error {
			s := detectSandbox(true)
			fmt.Fprint(e.stdout, s.report())
			if p := s.problems(); len(p) > 0 {
				return fmt.Errorf("this system cannot contain an agent: %s", strings.Join(p, "; "))
			}
			return nil
		}),
	}
}

// agentEnterCommand is the helper bwrap runs inside the sandbox.
func (e *env) agentEnterCommand() *cobra.Command {
	var statusFD int
	cmd := &cobra.Command{
		Use:    "_enter --status-fd FD -- COMMAND [ARG...]",
		Short:  "Restrict this process with Landlock, then exec COMMAND (run by agent run inside the sandbox)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: e.run(func(ctx context.Context, cmd *cobra.Command, args []string) error {
			return enter(statusFD, args, e.stderr)
		}),
	}
	cmd.Flags().IntVar(&statusFD, "status-fd", -1, "where to write \"ok\" once restricted")
	return cmd
}

type runOptions struct {
	name      string
	unsafe    bool
	noNetwork bool
	command   []string
}

// agentRun is agent run: open the socket, run the command contained,
// close the socket.
func (e *env) agentRun(ctx context.Context, o runOptions) error {
	var sb sandboxSupport
	if !o.unsafe {
		sb = detectSandbox(false)
		if p := sb.problems(); len(p) > 0 {
			return fmt.Errorf("cannot contain the agent: %s; not starting %s uncontained (see 'pcpctl agent check'; --unsafe-no-sandbox runs it without the sandbox)",
				strings.Join(p, "; "), o.command[0])
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding pcpctl's own binary: %w", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return fmt.Errorf("finding pcpctl's own binary: %w", err)
	}
	user, err := e.connect(ctx, true, client.Options{})
	if err != nil {
		return err
	}
	// Closing the control connection closes the agent's socket too, should
	// pcpctl die before it says agents.close.
	defer user.Close()
	opened, err := call(ctx, e, api.MethodAgentsOpen, func(ctx context.Context) (*api.AgentsOpenResult, error) {
		return user.OpenAgent(ctx, o.name)
	})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		user.CloseAgent(cctx, o.name)
	}()

	envv := agentEnv(os.Environ(), opened.Socket, o.name)
	var cmd *exec.Cmd
	if o.unsafe {
		fmt.Fprintf(e.stderr, "pcpctl: warning: running %s without the sandbox (--unsafe-no-sandbox): it can act as you towards PCP\n", o.command[0])
		cmd = exec.CommandContext(ctx, o.command[0], o.command[1:]...)
	} else {
		plan := sandboxPlan{
			endpoint: opened.Socket, hide: append(opened.Hide, pcpDirs()...), readOnly: opened.ReadOnly, exe: exe,
			env: os.Environ(), noNetwork: o.noNetwork, newSession: sb.legacyTIOCSTI, command: o.command,
		}
		for _, d := range opened.Hide {
			// PCP's own directories, missing ones (no policy file yet)
			// included: hidden, nothing can be put there for pcpd to
			// find later.
			if err := os.MkdirAll(d, 0o700); err != nil {
				return fmt.Errorf("creating %s to hide it: %w", d, err)
			}
		}
		cmd = exec.CommandContext(ctx, sb.bwrap, plan.args()...)
	}
	cmd.Env = envv
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	cmd.WaitDelay = time.Second
	var status *os.File
	if !o.unsafe {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer r.Close()
		cmd.ExtraFiles = []*os.File{w} // fd 3 in bwrap, and so in _enter
		status = r
		defer w.Close()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting bwrap: %w", err)
		}
		w.Close()
	} else if err := cmd.Start(); err != nil {
		return err
	}
	if status != nil {
		line, _ := bufio.NewReader(io.LimitReader(status, 4096)).ReadString('\n')
		if strings.TrimSpace(line) != "ok" {
			err := cmd.Wait()
			why := strings.TrimSpace(strings.TrimPrefix(line, "error: "))
			if why == "" {
				why = fmt.Sprintf("bwrap failed (%v; its message is above)", err)
			}
			return fmt.Errorf("the sandbox did not start: %s; %s was not started", why, o.command[0])
		}
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		code := xe.ExitCode()
		if ws, ok := xe.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return &ExitStatus{Code: code}
	}
	return err
}

// agentEnv is the agent's environment: PCP_SOCKET names its own socket
// (its MCP socket, for `pcpctl mcp`, is mcp.sock beside it, and its scomp
// socket scomp.sock), PCP_AGENT its name, and what would point it at the
// user's display, buses, control socket or the shared scomp endpoints
// (PCP_SCOMP_*) is gone (the sockets are hidden anyway).
func agentEnv(environ []string, socket, name string) []string {
	drop := map[string]bool{
		"DISPLAY": true, "WAYLAND_DISPLAY": true, "WAYLAND_SOCKET": true, "XAUTHORITY": true,
		"DBUS_SESSION_BUS_ADDRESS": true, "AT_SPI_BUS_ADDRESS": true,
		"PCP_SOCKET": true, "PCP_CONTROL_SOCKET": true, "PCP_MCP_SOCKET": true, "PCP_AGENT": true,
	}
	out := make([]string, 0, len(environ)+2)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] && !strings.HasPrefix(k, "PCP_SCOMP_") {
			out = append(out, kv)
		}
	}
	return append(out, "PCP_SOCKET="+socket, "PCP_AGENT="+name)
}

// pcpDirs are the directories of the sockets this pcpctl would use, in
// case they differ from the daemon's own (hidden too).
func pcpDirs() []string {
	return []string{filepath.Dir(client.DefaultSocket()), filepath.Dir(client.DefaultControlSocket())}
}

// enter runs inside the sandbox: it restricts itself with Landlock, says
// so on the status pipe, and execs the command. It returns only on
// failure, as an ExitStatus.
func enter(statusFD int, argv []string, stderr io.Writer) error {
	var status *os.File
	if statusFD >= 0 {
		status = os.NewFile(uintptr(statusFD), "status")
	}
	fail := func(code int, format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		if status != nil {
			fmt.Fprintf(status, "error: %s\n", msg)
			status.Close()
		}
		fmt.Fprintf(stderr, "pcpctl agent: %s\n", msg)
		return &ExitStatus{Code: code}
	}
	if err := restrictSelf(); err != nil {
		return fail(exitEnterFailed, "landlock: %v", err)
	}
	if status != nil {
		// Contained: from here on a failure is the command's.
		if _, err := status.WriteString("ok\n"); err != nil {
			return fail(exitEnterFailed, "status pipe: %v", err)
		}
		status.Close()
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "pcpctl agent: %v\n", err)
		return &ExitStatus{Code: exitNotFound}
	}
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(stderr, "pcpctl agent: exec %s: %v\n", path, err)
	return &ExitStatus{Code: exitNotFound}
}

// sandboxPlan is what the sandbox is made of.
type sandboxPlan struct {
	endpoint              string   // the agent's socket: the one PCP path it sees
	hide                  []string // directories to hide (empty, read-only)
	readOnly              []string // files to keep read-only (pcpd)
	exe                   string   // pcpctl, bound read-only for _enter and against replacement
	env                   []string // the caller's environment, for the display and buses
	noNetwork, newSession bool
	command               []string
}

// args are bwrap's arguments for the plan. Mounts apply in order: the
// whole filesystem, a fresh /dev and /proc (of the new PID namespace), an
// empty private $XDG_RUNTIME_DIR, empty tmpfs over each hidden directory,
// /dev/null over each socket outside them, then the agent's socket and
// pcpctl bound in, and the hidden directories made read-only, so that
// nothing written there is ever seen by pcpd.
func (p sandboxPlan) args() []string {
	getenv := func(k string) string {
		for _, kv := range p.env {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	}
	a := []string{
		"--die-with-parent",
		// Its own user namespace, in which it may make no other, with no
		// capabilities: root outside stays without them inside, so it
		// cannot unmount what hides PCP's files.
		"--unshare-user", "--disable-userns", "--cap-drop", "ALL",
		"--unshare-pid", "--unshare-ipc",
	}
	if p.noNetwork {
		a = append(a, "--unshare-net")
	}
	if p.newSession {
		// The kernel still lets a process push input into its terminal
		// (TIOCSTI): without a session of its own the agent could type
		// commands into the user's shell.
		a = append(a, "--new-session")
	}
	a = append(a, "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc")

	var hidden []string // tmpfs mounted, in order
	under := func(path string) bool {
		for _, h := range hidden {
			if path == h || strings.HasPrefix(path, h+"/") {
				return true
			}
		}
		return false
	}
	runtime := getenv("XDG_RUNTIME_DIR")
	if filepath.IsAbs(runtime) && isDir(runtime) {
		runtime = filepath.Clean(runtime)
		a = append(a, "--perms", "0700", "--tmpfs", runtime)
		hidden = append(hidden, runtime)
	}
	dirs := append([]string{"/tmp/.X11-unix", "/tmp/.ICE-unix"}, p.hide...)
	for i := range dirs {
		dirs[i] = filepath.Clean(dirs[i])
	}
	slices.Sort(dirs) // a directory before those inside it
	var readOnly []string
	for _, d := range dirs {
		if !filepath.IsAbs(d) || d == "/" || under(d) || !isDir(d) {
			continue
		}
		a = append(a, "--perms", "0700", "--tmpfs", d)
		hidden = append(hidden, d)
		readOnly = append(readOnly, d)
	}
	for _, f := range socketPaths(getenv, runtime) {
		if under(f) {
			continue
		}
		if _, err := os.Stat(f); err == nil {
			a = append(a, "--ro-bind", "/dev/null", f)
		}
	}
	// The agent's own directory: its socket, and mcp.sock and scomp.sock
	// beside it.
	ep := filepath.Dir(p.endpoint)
	a = append(a, "--bind", ep, ep, "--ro-bind", p.exe, p.exe)
	for _, f := range p.readOnly {
		if filepath.IsAbs(f) && f != p.exe && !under(f) {
			if _, err := os.Stat(f); err == nil {
				a = append(a, "--ro-bind", f, f)
			}
		}
	}
	for _, d := range readOnly {
		a = append(a, "--remount-ro", d)
	}
	a = append(a, "--", p.exe, "agent", "_enter", "--status-fd", "3", "--")
	return append(a, p.command...)
}

// socketPaths are the display's and buses' sockets named by the
// environment: the session and accessibility buses' unix:path= addresses
// and the Wayland socket. Abstract addresses are Landlock's to stop.
func socketPaths(getenv func(string) string, runtime string) []string {
	var out []string
	for _, k := range []string{"DBUS_SESSION_BUS_ADDRESS", "AT_SPI_BUS_ADDRESS"} {
		for _, addr := range strings.Split(getenv(k), ";") {
			rest, ok := strings.CutPrefix(addr, "unix:")
			if !ok {
				continue
			}
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "path="); ok {
					out = append(out, filepath.Clean(dbusUnescape(v)))
				}
			}
		}
	}
	if w := getenv("WAYLAND_DISPLAY"); w != "" {
		if !filepath.IsAbs(w) && runtime != "" {
			w = filepath.Join(runtime, w)
		}
		if filepath.IsAbs(w) {
			out = append(out, filepath.Clean(w))
		}
	}
	return out
}

// dbusUnescape undoes D-Bus address escaping (%XX).
func dbusUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
