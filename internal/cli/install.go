package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/internal/systemd"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

// sessionVars are the desktop's variables pcpd's adapters read, which a
// service started by the user's manager sees only once the session has
// put them into the manager's environment.
var sessionVars = []string{"DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS"}

// systemctlTimeout bounds one systemctl call.
const systemctlTimeout = 30 * time.Second

// installReport is what install and uninstall print with --json.
type installReport struct {
	Dir string `json:"dir"`
	// Manager says whether a systemd user manager answered.
	Manager bool     `json:"manager"`
	Steps   []string `json:"steps"`
}

// installer is one run of install or uninstall: its flags and the steps
// taken so far.
type installer struct {
	e      *env
	user   bool
	pcpd   string
	enable bool
	env    bool
	force  bool
	r      installReport
}

func (e *env) installCommand() *cobra.Command {
	in := &installer{e: e}
	cmd := &cobra.Command{
		Use:   "install --user",
		Short: "Install pcpd's systemd user units: pcpd starts with your session, on the first connection",
		Long: `Install pcpd.socket and pcpd.service into $XDG_CONFIG_HOME/systemd/user
(~/.config/systemd/user). The socket unit binds pcpd's agent, control, MCP
and scomp sockets where pcpd and pcpctl look for them
($XDG_RUNTIME_DIR/pcp/), and the user's service manager starts pcpd on the
first connection to any of them.

When systemctl reaches a user manager, install then reloads it, imports
DISPLAY, WAYLAND_DISPLAY, XAUTHORITY and DBUS_SESSION_BUS_ADDRESS (those
set here) into its environment, so that pcpd reaches the desktop, and
enables and starts pcpd.socket. Without one it writes the units and says
what to run where a user manager runs. Each step it takes is printed.

Run it from inside the desktop session. Importing the variables lasts for
this login; for the next ones, the session must do it (most desktops run
dbus-update-activation-environment --systemd; see docs/systemd.md).`,
		Args: cobra.NoArgs,
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			return in.install(ctx)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&in.user, "user", false, "install for this user (the only kind: pcpd runs per session)")
	f.StringVar(&in.pcpd, "pcpd", "", "the pcpd binary the service runs (default pcpd beside pcpctl, else on PATH)")
	f.BoolVar(&in.enable, "enable", true, "enable and start pcpd.socket when a user manager runs")
	f.BoolVar(&in.env, "import-env", true, "import the desktop's variables set here into the user manager's environment")
	f.BoolVar(&in.force, "force", false, "overwrite unit files of these names that pcpctl did not write")
	return cmd
}

func (e *env) uninstallCommand() *cobra.Command {
	in := &installer{e: e}
	cmd := &cobra.Command{
		Use:   "uninstall --user",
		Short: "Stop, disable and remove pcpd's systemd user units",
		Long: `Stop and disable pcpd.socket and pcpd.service when a user manager runs,
remove the unit files pcpctl install --user wrote (a file of the same name
that pcpctl did not write is left alone), and reload the manager. pcpd's
state (the audit log, the store) is kept.`,
		Args: cobra.NoArgs,
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			return in.uninstall(ctx)
		}),
	}
	cmd.Flags().BoolVar(&in.user, "user", false, "uninstall this user's units")
	return cmd
}

func (in *installer) step(format string, args ...any) {
	in.r.Steps = append(in.r.Steps, fmt.Sprintf(format, args...))
}

// finish prints the steps taken, one a line, or the report as JSON.
func (in *installer) finish() error {
	if in.e.json {
		return printJSON(in.e.stdout, in.r)
	}
	for _, s := range in.r.Steps {
		if _, err := fmt.Fprintln(in.e.stdout, clean(s)); err != nil {
			return err
		}
	}
	return nil
}

// findPCPD is the pcpd the service runs: --pcpd, else pcpd beside this
// executable, else on PATH; an absolute path to an executable file.
func (in *installer) findPCPD() (string, error) {
	p := in.pcpd
	if p == "" {
		if self, err := os.Executable(); err == nil {
			if c := filepath.Join(filepath.Dir(self), "pcpd"); isExecutable(c) {
				p = c
			}
		}
	}
	if p == "" {
		lp, err := exec.LookPath("pcpd")
		if err != nil {
			return "", errors.New("pcpd is neither beside pcpctl nor on PATH; name it with --pcpd")
		}
		p = lp
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if !isExecutable(abs) {
		return "", fmt.Errorf("%s is not an executable file; name pcpd with --pcpd", abs)
	}
	return abs, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// userManager reports whether systemctl reaches the user's service
// manager, and why not.
func userManager(ctx context.Context) (bool, string) {
	if _, err := exec.LookPath("systemctl"); err != nil {
		return false, "systemctl is not on PATH"
	}
	if _, err := systemctlUser(ctx, "show-environment"); err != nil {
		return false, "no systemd user manager answers (" + err.Error() + ")"
	}
	return true, ""
}

// systemctlUser runs systemctl --user with args and returns its output;
// its error holds what systemctl wrote to stderr.
func systemctlUser(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, systemctlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "systemctl", append([]string{"--user"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return out.String(), fmt.Errorf("systemctl --user %s: %s", strings.Join(args, " "), msg)
	}
	return out.String(), nil
}

const enableHint = "systemctl --user daemon-reload && systemctl --user enable --now pcpd.socket"

func (in *installer) install(ctx context.Context) error {
	if !in.user {
		return usagef("pcpd runs per session: install --user is the only kind")
	}
	pcpd, err := in.findPCPD()
	if err != nil {
		return err
	}
	units, err := systemd.Units(pcpd)
	if err != nil {
		return err
	}
	dir, err := systemd.UserDir()
	if err != nil {
		return err
	}
	in.r.Dir = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	for _, u := range units {
		if err := in.writeUnit(dir, u); err != nil {
			return err
		}
	}
	ok, why := userManager(ctx)
	in.r.Manager = ok
	if !ok {
		in.step("%s: the units are written; where a systemd user manager runs, start them with: %s", why, enableHint)
		return in.finish()
	}
	if _, err := systemctlUser(ctx, "daemon-reload"); err != nil {
		return in.failed(err)
	}
	in.step("reloaded the user manager (systemctl --user daemon-reload)")
	if in.env {
		in.importEnv(ctx)
	}
	if !in.enable {
		in.step("not enabled (--enable=false); to start pcpd with the session: systemctl --user enable --now pcpd.socket")
		return in.finish()
	}
	return in.enableSocket(ctx)
}

// failed prints the steps taken so far, then returns err.
func (in *installer) failed(err error) error {
	in.finish()
	return err
}

// writeUnit writes u into dir, replacing the file atomically, unless a
// file of that name that pcpctl did not write is there.
func (in *installer) writeUnit(dir string, u systemd.Unit) error {
	path := filepath.Join(dir, u.Name)
	old, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(old, u.Content):
		in.step("%s is up to date", path)
		return nil
	case err == nil && !bytes.HasPrefix(old, []byte(systemd.Marker)) && !in.force:
		return fmt.Errorf("%s exists and was not written by pcpctl install; move it away or pass --force", path)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+u.Name+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, werr := tmp.Write(u.Content)
	if err := tmp.Chmod(0o644); werr == nil {
		werr = err
	}
	if err := tmp.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, werr)
	}
	if old != nil {
		in.step("updated %s", path)
	} else {
		in.step("wrote %s", path)
	}
	return nil
}

// importEnv puts the desktop's variables set here into the manager's
// environment, for the pcpd it starts.
func (in *installer) importEnv(ctx context.Context) {
	var set []string
	for _, k := range sessionVars {
		if os.Getenv(k) != "" {
			set = append(set, k)
		}
	}
	if len(set) == 0 {
		in.step("none of %s is set here: pcpd will not reach the desktop until the session imports them (systemctl --user import-environment %s)",
			strings.Join(sessionVars, ", "), strings.Join(sessionVars, " "))
		return
	}
	if _, err := systemctlUser(ctx, append([]string{"import-environment"}, set...)...); err != nil {
		in.step("could not import %s: %v", strings.Join(set, ", "), err)
		return
	}
	in.step("imported %s into the user manager's environment for this login (for the next ones: docs/systemd.md)", strings.Join(set, ", "))
}

// enableSocket enables pcpd.socket and, unless a pcpd started by hand
// serves the agent socket already, starts it; a pcpd.service already
// running is restarted onto the units just written.
func (in *installer) enableSocket(ctx context.Context) error {
	active := func(unit string) bool {
		out, _ := systemctlUser(ctx, "is-active", unit)
		return strings.TrimSpace(out) == "active"
	}
	if !active(systemd.SocketUnit) {
		if pid, ok := socketServer(in.e.socket); ok {
			if _, err := systemctlUser(ctx, "enable", systemd.SocketUnit); err != nil {
				return in.failed(err)
			}
			in.step("enabled pcpd.socket for the next login; not started: a pcpd started by hand (pid %d) serves %s; stop it, then: systemctl --user start pcpd.socket", pid, in.e.socket)
			return in.finish()
		}
	}
	if _, err := systemctlUser(ctx, "enable", "--now", systemd.SocketUnit); err != nil {
		return in.failed(err)
	}
	in.step("enabled and started pcpd.socket: pcpd starts on the first connection to %s", in.e.socket)
	if run := os.Getenv("XDG_RUNTIME_DIR"); run != "" {
		if def := filepath.Join(run, "pcp", "pcp.sock"); in.e.socket != def {
			in.step("note: pcpd.socket listens on %s; this pcpctl uses %s (--socket or PCP_SOCKET), where nothing starts pcpd", def, in.e.socket)
		}
	}
	if active(systemd.ServiceUnit) {
		if _, err := systemctlUser(ctx, "restart", systemd.ServiceUnit); err != nil {
			return in.failed(err)
		}
		in.step("restarted pcpd.service onto the new units")
	}
	return in.finish()
}

// socketServer reports the pid listening on the Unix socket at path,
// when one answers there.
func socketServer(path string) (int, bool) {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	_, pid, err := unixsock.PeerCred(c.(*net.UnixConn))
	if err != nil {
		return 0, false
	}
	return pid, true
}

// ours reports whether a unit file is at path and whether pcpctl wrote
// it (it begins with systemd.Marker).
func ours(path string) (exists, written bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, bytes.HasPrefix(b, []byte(systemd.Marker)), nil
}

func (in *installer) uninstall(ctx context.Context) error {
	if !in.user {
		return usagef("pcpd runs per session: uninstall --user is the only kind")
	}
	dir, err := systemd.UserDir()
	if err != nil {
		return err
	}
	in.r.Dir = dir
	var mine []string
	for _, name := range []string{systemd.SocketUnit, systemd.ServiceUnit} {
		path := filepath.Join(dir, name)
		exists, written, err := ours(path)
		if err != nil {
			return err
		}
		switch {
		case !exists:
		case !written:
			in.step("left %s alone: pcpctl install did not write it", path)
		default:
			mine = append(mine, name)
		}
	}
	if len(mine) == 0 {
		in.step("no units of pcpctl install in %s", dir)
		return in.finish()
	}
	ok, why := userManager(ctx)
	in.r.Manager = ok
	if ok {
		if _, err := systemctlUser(ctx, append([]string{"disable", "--now"}, mine...)...); err != nil {
			return in.failed(err)
		}
		in.step("stopped and disabled %s", strings.Join(mine, ", "))
	} else {
		in.step("%s: nothing to stop", why)
	}
	for _, name := range mine {
		path := filepath.Join(dir, name)
		if err := os.Remove(path); err != nil {
			return in.failed(err)
		}
		in.step("removed %s", path)
	}
	if ok {
		if _, err := systemctlUser(ctx, "daemon-reload"); err != nil {
			return in.failed(err)
		}
		in.step("reloaded the user manager (systemctl --user daemon-reload)")
	}
	return in.finish()
}
