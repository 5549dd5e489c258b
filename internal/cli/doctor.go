package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	stdlog "log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/manifest"
	"github.com/pcp-dev/pcp/internal/policy"
)

// Statuses of a doctor check.
const (
	checkOK   = "ok"
	checkWarn = "warn"
	checkFail = "fail"
)

// doctorProbeTimeout bounds each probe doctor makes (a daemon call, a bus
// round trip, bwrap's trial run), so that one hung part cannot hold up the
// report.
const doctorProbeTimeout = 5 * time.Second

// check is one line of the doctor's report. Fix is the one step that
// mends a warn or a fail.
type check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// doctorReport is what doctor prints; OK is false when a check failed.
type doctorReport struct {
	OK     bool    `json:"ok"`
	Checks []check `json:"checks"`
}

// doctor holds what one run has learned, so that later checks reuse the
// daemon's answers rather than asking again.
type doctor struct {
	e                           *env
	stateDir, trustDir, polFile string

	agent, control *client.Client
	health         *api.HealthResult
	session        *api.SessionContext
	sessionBus     *dbus.Conn
	a11yAddr       string
	x              *xgb.Conn
	xErr           error
	// rootBus is the root window's AT_SPI_BUS, once checkRootProperty
	// has read it.
	rootBus string
}

func init() {
	// xgb logs to stderr when a display has no authority file, which a
	// local display needs none for; the display check reports failures.
	xgb.Logger = stdlog.New(io.Discard, "", 0)
}

func (e *env) doctorCommand() *cobra.Command {
	d := &doctor{e: e}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that pcpd, the desktop and the sandbox are ready, with a fix for each problem",
		Long: `Check what PCP needs, one line a check: ok, warn or fail, and for each
warn or fail the one step that mends it. The exit status is 1 when a check
fails. A check that cannot run says why, as a warn.

  daemon            pcpd answers health.check on the agent socket; its version
  control socket    pcpd answers on the user's control socket
  systemd units     where a systemd user manager runs: pcpd.socket and pcpd.service
                    are installed (pcpctl install --user), current, enabled and
                    active, and the manager holds DISPLAY and DBUS_SESSION_BUS_ADDRESS
                    (a warning only: pcpd started by hand serves as well)
  socket dir        the sockets' directory is the user's and not group or world writable
  state dir         likewise for the state directory (--state-dir)
  socket files      the agent and control sockets are yours and no one else may connect
  trust dir         the trusted publisher keys' directory exists and holds keys (--trust-dir)
  policy            the policy file pcpd uses loads (--policy)
  audit chain       audit.verify finds the audit log's hash chain unbroken
  session bus       $DBUS_SESSION_BUS_ADDRESS is set and answers
  accessibility bus org.a11y.Bus gives the AT-SPI2 bus's address, which answers
  GTK               GTK_A11Y is not "none" and NO_AT_BRIDGE is not 1
  AT_SPI_BUS        the X root window names the accessibility bus (Qt reads it)
  Qt                AT_SPI_BUS, QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1 or org.a11y.Status
                    IsEnabled: Qt apps will register
  display           an X11 display opens, or a Wayland one is present
  XTEST, MIT-SHM    the X server's extensions for input (Tier 3) and capture
  notifications     org.freedesktop.Notifications is owned on the session bus
  bubblewrap        bwrap is on PATH and builds a sandbox (pcpctl agent run)
  landlock          the kernel's Landlock ABI scopes sockets and signals
  apps              which applications pcpd reaches at which tier

Paths default as pcpd's do: the state dir $XDG_STATE_HOME/pcp, the trust dir
$XDG_CONFIG_HOME/pcp/trusted-keys, and the policy file the daemon reports,
else $XDG_CONFIG_HOME/pcp/policy.toml.`,
		Args: cobra.NoArgs,
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			return d.run(ctx)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&d.stateDir, "state-dir", "", "pcpd's state directory (default $XDG_STATE_HOME/pcp)")
	f.StringVar(&d.trustDir, "trust-dir", "", "pcpd's directory of trusted publisher keys (default $XDG_CONFIG_HOME/pcp/trusted-keys)")
	f.StringVar(&d.polFile, "policy", "", "the policy file (default the one pcpd reports, else $XDG_CONFIG_HOME/pcp/policy.toml)")
	return cmd
}

// pcpdDirs are pcpd's default state and config directories, as
// daemon.Config.Defaults computes them.
func pcpdDirs() (state, config string) {
	home, _ := os.UserHomeDir()
	state = os.Getenv("XDG_STATE_HOME")
	if state == "" {
		state = filepath.Join(home, ".local", "state")
	}
	config = os.Getenv("XDG_CONFIG_HOME")
	if config == "" {
		config = filepath.Join(home, ".config")
	}
	return filepath.Join(state, "pcp"), filepath.Join(config, "pcp")
}

func (d *doctor) run(ctx context.Context) error {
	defer d.close()
	state, config := pcpdDirs()
	if d.stateDir == "" {
		d.stateDir = state
	}
	if d.trustDir == "" {
		d.trustDir = filepath.Join(config, "trusted-keys")
	}
	var r doctorReport
	add := func(cs ...check) { r.Checks = append(r.Checks, cs...) }
	add(d.checkDaemon(ctx), d.checkControl(ctx), d.checkSystemd(ctx))
	add(d.checkDir("socket dir", filepath.Dir(d.e.socket)))
	if cd := filepath.Dir(d.e.controlSocket); cd != filepath.Dir(d.e.socket) {
		add(d.checkDir("control socket dir", cd))
	}
	add(d.checkDir("state dir", d.stateDir))
	add(d.checkSocketFiles())
	add(d.checkTrustDir(), d.checkPolicy(ctx, config), d.checkAudit(ctx))
	add(d.checkSessionBus(), d.checkA11yBus(), d.checkGTK(), d.checkRootProperty(), d.checkQt())
	add(d.checkDisplay())
	add(d.checkExtensions(ctx)...)
	add(d.checkNotifications())
	add(d.checkSandbox(ctx)...)
	add(d.checkApps(ctx))

	r.OK = !slices.ContainsFunc(r.Checks, func(c check) bool { return c.Status == checkFail })
	if d.e.json {
		if err := printJSON(d.e.stdout, r); err != nil {
			return err
		}
	} else if err := d.print(r); err != nil {
		return err
	}
	if !r.OK {
		return &ExitStatus{Code: ExitFailure}
	}
	return nil
}

func (d *doctor) print(r doctorReport) error {
	t := newTable(d.e.stdout)
	for _, c := range r.Checks {
		t.row(c.Status, c.Name, clean(c.Detail))
		if c.Fix != "" {
			t.row("", "", "fix: "+clean(c.Fix))
		}
	}
	return t.flush()
}

func (d *doctor) close() {
	for _, c := range []*client.Client{d.agent, d.control} {
		if c != nil {
			c.Close()
		}
	}
	if d.sessionBus != nil {
		d.sessionBus.Close()
	}
	if d.x != nil {
		d.x.Close()
	}
}

func probe(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, doctorProbeTimeout)
}

const startPCPD = "start pcpd (pcpd &; or pcpctl install --user, and systemd starts it with the session)"

func (d *doctor) checkDaemon(ctx context.Context) check {
	c := check{Name: "daemon"}
	ctx, cancel := probe(ctx)
	defer cancel()
	cl, err := client.Dial(ctx, d.e.socket, client.Options{})
	if err != nil {
		return fail(c, err.Error(), startPCPD+", or name its socket with --socket")
	}
	d.agent = cl
	h, err := cl.Health(ctx)
	if err != nil {
		return fail(c, fmt.Sprintf("health.check on %s: %v", d.e.socket, err), "restart pcpd; its log says why it does not answer (journalctl --user -u pcpd.service when systemd runs it)")
	}
	d.health = h
	c.Status, c.Detail = checkOK, fmt.Sprintf("pcpd %s on %s, %s", h.Version, d.e.socket, h.Status)
	if h.AuditError != "" {
		return fail(c, c.Detail+": audit log: "+h.AuditError, "restart pcpd once the state dir is writable again; every action is refused until then")
	}
	if h.Status != "ok" {
		var bad []string
		for _, a := range h.Adapters {
			if a.Status != "ok" {
				bad = append(bad, fmt.Sprintf("%s %s (%s)", a.AdapterID, a.Status, a.Detail))
			}
		}
		c.Status = checkWarn
		c.Detail += ": " + strings.Join(bad, "; ")
		c.Fix = "see the checks below for the desktop parts pcpd could not reach"
	}
	return c
}

func (d *doctor) checkControl(ctx context.Context) check {
	c := check{Name: "control socket"}
	ctx, cancel := probe(ctx)
	defer cancel()
	cl, err := client.Dial(ctx, d.e.controlSocket, client.Options{})
	if err != nil {
		return fail(c, err.Error(), startPCPD+", or name the socket with --control-socket")
	}
	d.control = cl
	return ok(c, d.e.controlSocket)
}

// checkDir checks that dir, when it exists, is the user's and writable by
// no one else: pcpd's sockets and database are the user's authority.
func (d *doctor) checkDir(name, dir string) check {
	c := check{Name: name}
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return warn(c, dir+" does not exist", "pcpd makes it on start; "+startPCPD)
	}
	if err != nil {
		return warn(c, err.Error(), "make "+dir+" readable by you")
	}
	if !fi.IsDir() {
		return fail(c, dir+" is not a directory", "remove "+dir+"; pcpd makes the directory on start")
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st != nil && int(st.Uid) != os.Getuid() {
		return fail(c, fmt.Sprintf("%s belongs to uid %d, not you (uid %d)", dir, st.Uid, os.Getuid()), "chown "+strconv.Itoa(os.Getuid())+" "+dir)
	}
	if m := fi.Mode().Perm(); m&0o022 != 0 {
		return fail(c, fmt.Sprintf("%s is %#o: others may write in it", dir, m), "chmod go-w "+dir)
	}
	return ok(c, fmt.Sprintf("%s (%#o, yours)", dir, fi.Mode().Perm()))
}

// checkSocketFiles checks that the agent and control sockets, where they
// exist, are sockets of the user's that no one else may connect to
// (connecting takes write permission).
func (d *doctor) checkSocketFiles() check {
	c := check{Name: "socket files"}
	var seen []string
	for _, p := range []string{d.e.socket, d.e.controlSocket} {
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return warn(c, err.Error(), "make "+filepath.Dir(p)+" readable by you")
		}
		if fi.Mode().Type() != fs.ModeSocket {
			return fail(c, fmt.Sprintf("%s is a %v, not a socket", p, fi.Mode().Type()), "remove "+p+" and restart pcpd")
		}
		if st, _ := fi.Sys().(*syscall.Stat_t); st != nil && int(st.Uid) != os.Getuid() {
			return fail(c, fmt.Sprintf("%s belongs to uid %d, not you (uid %d)", p, st.Uid, os.Getuid()), "remove "+p+" and restart pcpd")
		}
		if m := fi.Mode().Perm(); m&0o022 != 0 {
			return fail(c, fmt.Sprintf("%s is %#o: others may connect", p, m), "chmod 600 "+p+" (and SocketMode=0600 in a socket unit of your own)")
		}
		seen = append(seen, fmt.Sprintf("%s (%#o)", p, fi.Mode().Perm()))
	}
	if len(seen) == 0 {
		return warn(c, "no socket at "+d.e.socket+" or "+d.e.controlSocket, startPCPD)
	}
	return ok(c, strings.Join(seen, ", "))
}

func (d *doctor) checkTrustDir() check {
	c := check{Name: "trust dir"}
	dir := d.trustDir
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		const fix = " and copy each publisher's key into it as NAME.pem (pcpctl manifest keygen makes one)"
		if d.health != nil && d.health.AllowUnsigned {
			// A development daemon: unsigned apps still register.
			return warn(c, dir+" does not exist: only unsigned apps register (pcpd --allow-unsigned)", "mkdir -p -m 700 "+dir+fix)
		}
		return fail(c, dir+" does not exist: no signed app can register", "mkdir -p -m 700 "+dir+fix)
	}
	ts, errs := manifest.LoadTrustDir(dir)
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, err := range errs {
			msgs[i] = err.Error()
		}
		return warn(c, strings.Join(msgs, "; "), "replace or remove the files named; each must be a PEM PUBLIC KEY")
	}
	if ts.Len() == 0 {
		return warn(c, dir+" holds no keys: only built-in and unsigned apps (with pcpd --allow-unsigned) register",
			"copy each publisher's key into "+dir+" as NAME.pem")
	}
	if d.health != nil && d.health.AllowUnsigned {
		return warn(c, fmt.Sprintf("%s: %d keys (%s), but pcpd accepts unsigned manifests", dir, ts.Len(), strings.Join(ts.Publishers(), ", ")),
			"restart pcpd without --allow-unsigned outside development")
	}
	return ok(c, fmt.Sprintf("%s: %d keys (%s)", dir, ts.Len(), strings.Join(ts.Publishers(), ", ")))
}

// checkPolicy loads the file the daemon says it uses, else pcpd's
// default, as pcpd would on start or SIGHUP.
func (d *doctor) checkPolicy(ctx context.Context, config string) check {
	c := check{Name: "policy"}
	path := d.polFile
	if path == "" && d.agent != nil {
		pctx, cancel := probe(ctx)
		var v api.PolicyView
		if err := d.agent.Call(pctx, api.MethodPolicyShow, &api.PolicyShowParams{}, &v); err == nil {
			path = v.Path
		}
		cancel()
	}
	if path == "" {
		path = filepath.Join(config, "policy.toml")
	}
	p, err := policy.Load(path)
	if err != nil {
		return fail(c, err.Error(), "correct the file, then pcpctl policy reload")
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return ok(c, path+" does not exist: the built-in defaults apply")
	}
	return ok(c, p.Path()+" loads")
}

func (d *doctor) checkAudit(ctx context.Context) check {
	c := check{Name: "audit chain"}
	if d.control == nil {
		return warn(c, "not checked: the control socket does not answer", startPCPD)
	}
	ctx, cancel := probe(ctx)
	defer cancel()
	v, err := d.control.AuditVerify(ctx)
	if err != nil {
		return warn(c, "audit.verify: "+err.Error(), "run pcpctl audit verify to see why")
	}
	if !v.OK {
		return fail(c, fmt.Sprintf("broken at entry %d of %d: %s", v.BrokenSeq, v.Entries, v.Problem),
			"keep "+d.stateDir+"/audit for inspection (docs/audit.md says how to repair the log); pcpctl audit tail shows the entries around it")
	}
	return ok(c, fmt.Sprintf("%d entries verify", v.Entries))
}

func (d *doctor) checkSessionBus() check {
	c := check{Name: "session bus"}
	addr := os.Getenv("DBUS_SESSION_BUS_ADDRESS")
	if addr == "" {
		return fail(c, "DBUS_SESSION_BUS_ADDRESS is not set", "run inside the desktop session, or export DBUS_SESSION_BUS_ADDRESS from it")
	}
	conn, err := dbus.Connect(addr)
	if err != nil {
		return fail(c, addr+": "+err.Error(), "start the session bus (dbus-daemon --session) or correct DBUS_SESSION_BUS_ADDRESS")
	}
	d.sessionBus = conn
	return ok(c, addr)
}

func (d *doctor) checkA11yBus() check {
	c := check{Name: "accessibility bus"}
	addr := os.Getenv("AT_SPI_BUS_ADDRESS")
	const fix = "install at-spi2-core and turn accessibility on (gsettings set org.gnome.desktop.interface toolkit-accessibility true), or start /usr/libexec/at-spi-bus-launcher"
	if addr == "" {
		if d.sessionBus == nil {
			return warn(c, "not checked: no session bus to ask org.a11y.Bus", "see the session bus check")
		}
		var a string
		call := d.sessionBus.Object("org.a11y.Bus", "/org/a11y/bus").Call("org.a11y.Bus.GetAddress", 0)
		if err := call.Store(&a); err != nil {
			return fail(c, "org.a11y.Bus GetAddress: "+err.Error(), fix)
		}
		addr = a
	}
	conn, err := dbus.Connect(addr)
	if err != nil {
		return fail(c, addr+": "+err.Error(), fix)
	}
	conn.Close()
	d.a11yAddr = addr
	return ok(c, addr)
}

func (d *doctor) checkGTK() check {
	c := check{Name: "GTK"}
	if v := os.Getenv("GTK_A11Y"); v == "none" {
		return fail(c, "GTK_A11Y=none: GTK 4 apps will not register on the accessibility bus", "unset GTK_A11Y")
	}
	if v := os.Getenv("NO_AT_BRIDGE"); v == "1" {
		return fail(c, "NO_AT_BRIDGE=1: GTK 3 apps will not register on the accessibility bus", "unset NO_AT_BRIDGE")
	}
	return ok(c, "GTK_A11Y and NO_AT_BRIDGE let GTK apps register")
}

func (d *doctor) checkQt() check {
	c := check{Name: "Qt"}
	if os.Getenv("QT_LINUX_ACCESSIBILITY_ALWAYS_ON") == "1" {
		return ok(c, "QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1")
	}
	if d.rootBus != "" {
		// Qt 5 connects to the bus the root window names and registers.
		return ok(c, "the root window's AT_SPI_BUS names the accessibility bus")
	}
	const fix = "export QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1 in the session"
	if d.sessionBus == nil {
		return warn(c, "QT_LINUX_ACCESSIBILITY_ALWAYS_ON is not 1 and there is no session bus to ask org.a11y.Status", fix)
	}
	v, err := d.sessionBus.Object("org.a11y.Bus", "/org/a11y/bus").GetProperty("org.a11y.Status.IsEnabled")
	if err != nil {
		return warn(c, "QT_LINUX_ACCESSIBILITY_ALWAYS_ON is not 1 and org.a11y.Status IsEnabled: "+err.Error(), fix)
	}
	if on, _ := v.Value().(bool); on {
		return ok(c, "org.a11y.Status IsEnabled is true")
	}
	return warn(c, "QT_LINUX_ACCESSIBILITY_ALWAYS_ON is not 1 and org.a11y.Status IsEnabled is false: Qt apps will not register", fix)
}

// display opens $DISPLAY once for the checks that read it.
func (d *doctor) display() (*xgb.Conn, error) {
	if d.x == nil && d.xErr == nil {
		d.x, d.xErr = xgb.NewConnDisplay(os.Getenv("DISPLAY"))
	}
	return d.x, d.xErr
}

func (d *doctor) checkRootProperty() check {
	c := check{Name: "AT_SPI_BUS"}
	if os.Getenv("DISPLAY") == "" {
		return warn(c, "not checked: DISPLAY is not set", "run inside the X11 session, or export DISPLAY from it")
	}
	x, err := d.display()
	if err != nil {
		return warn(c, "not checked: "+err.Error(), "see the display check")
	}
	bus := d.a11yAddr
	if bus == "" {
		bus = `"$(dbus-send --session --print-reply=literal --dest=org.a11y.Bus /org/a11y/bus org.a11y.Bus.GetAddress)"`
	}
	fix := "xprop -root -f AT_SPI_BUS 8s -set AT_SPI_BUS " + bus
	name := "AT_SPI_BUS"
	atom, err := xproto.InternAtom(x, true, uint16(len(name)), name).Reply()
	if err != nil {
		return warn(c, "InternAtom: "+err.Error(), "see the display check")
	}
	if atom.Atom == xproto.AtomNone {
		return fail(c, "the root window has no AT_SPI_BUS property: Qt apps will not find the accessibility bus", fix)
	}
	root := xproto.Setup(x).DefaultScreen(x).Root
	p, err := xproto.GetProperty(x, false, root, atom.Atom, xproto.AtomAny, 0, 1024).Reply()
	if err != nil {
		return warn(c, "GetProperty: "+err.Error(), "see the display check")
	}
	if p.Type == xproto.AtomNone || len(p.Value) == 0 {
		return fail(c, "the root window has no AT_SPI_BUS property: Qt apps will not find the accessibility bus", fix)
	}
	v := string(p.Value)
	d.rootBus = v
	if d.a11yAddr != "" && v != d.a11yAddr {
		return warn(c, fmt.Sprintf("the root window names %s, the accessibility bus is %s", v, d.a11yAddr), fix)
	}
	return ok(c, v)
}

func (d *doctor) checkDisplay() check {
	c := check{Name: "display"}
	xd, wd := os.Getenv("DISPLAY"), os.Getenv("WAYLAND_DISPLAY")
	if xd == "" && wd == "" {
		return fail(c, "neither DISPLAY nor WAYLAND_DISPLAY is set", "run inside the desktop session, or export DISPLAY from it")
	}
	if xd != "" {
		if _, err := d.display(); err != nil {
			return fail(c, "X11 display "+xd+": "+err.Error(), "start the X server, or correct DISPLAY (and XAUTHORITY)")
		}
		return ok(c, "X11 "+xd)
	}
	return warn(c, "Wayland "+wd+" only: Tier 3 (input, capture, windows) needs X11 or Xwayland", "run the session on X11, or export DISPLAY for Xwayland")
}

// checkExtensions asks the daemon's X11 adapter first (its session
// context's system_state "x11"), else the display itself.
func (d *doctor) checkExtensions(ctx context.Context) []check {
	xt, shm := check{Name: "XTEST"}, check{Name: "MIT-SHM"}
	var has func(string) (bool, error)
	from := ""
	if d.agent != nil {
		sctx, cancel := probe(ctx)
		sc, err := d.agent.SessionContext(sctx)
		cancel()
		if err == nil {
			d.session = sc
			if raw, err := json.Marshal(sc.SystemState["x11"]); err == nil {
				var in struct {
					Display string `json:"display"`
					XTest   *bool  `json:"xtest"`
					MITSHM  *bool  `json:"mit_shm"`
				}
				if json.Unmarshal(raw, &in) == nil && in.XTest != nil && in.MITSHM != nil {
					from = "pcpd's display " + in.Display
					has = func(n string) (bool, error) {
						if n == "XTEST" {
							return *in.XTest, nil
						}
						return *in.MITSHM, nil
					}
				}
			}
		}
	}
	if has == nil {
		if os.Getenv("DISPLAY") == "" {
			const why = "not checked: pcpd reports no X11 display and DISPLAY is not set"
			return []check{warn(xt, why, "see the display check"), warn(shm, why, "see the display check")}
		}
		x, err := d.display()
		if err != nil {
			why := "not checked: " + err.Error()
			return []check{warn(xt, why, "see the display check"), warn(shm, why, "see the display check")}
		}
		from = "display " + os.Getenv("DISPLAY")
		has = func(n string) (bool, error) {
			r, err := xproto.QueryExtension(x, uint16(len(n)), n).Reply()
			if err != nil {
				return false, err
			}
			return r.Present, nil
		}
	}
	one := func(c check, name, missing, fix string) check {
		present, err := has(name)
		switch {
		case err != nil:
			return warn(c, "QueryExtension: "+err.Error(), "see the display check")
		case !present:
			return fail(c, from+" lacks "+name+": "+missing, fix)
		}
		return ok(c, from+" has "+name)
	}
	return []check{
		one(xt, "XTEST", "Tier 3 input (clicks, keys) is unavailable", "run an X server with the XTEST extension (Xorg and Xvfb have it unless started with -extension XTEST)"),
		one(shm, "MIT-SHM", "screen capture falls back to slower copies", "run an X server with MIT-SHM, on the same host as pcpd"),
	}
}

func (d *doctor) checkNotifications() check {
	c := check{Name: "notifications"}
	const fix = "start a notification daemon (dunst, or the desktop's own); pcpctl confirm still answers confirmations"
	if d.sessionBus == nil {
		return warn(c, "not checked: no session bus", "see the session bus check")
	}
	var owned bool
	if err := d.sessionBus.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, "org.freedesktop.Notifications").Store(&owned); err != nil {
		return warn(c, "NameHasOwner: "+err.Error(), fix)
	}
	if !owned {
		return warn(c, "no one owns org.freedesktop.Notifications: confirmations show no notification", fix)
	}
	return ok(c, "org.freedesktop.Notifications is owned")
}

// checkSandbox probes what pcpctl agent run needs, as agent check does,
// and has bwrap build a throwaway sandbox.
func (d *doctor) checkSandbox(ctx context.Context) []check {
	s := detectSandbox(true)
	bw, ll := check{Name: "bubblewrap"}, check{Name: "landlock"}
	switch {
	case s.bwrap == "":
		bw = fail(bw, "bwrap is not on PATH: pcpctl agent run cannot contain an agent", "apt-get install bubblewrap")
	case s.userns != "":
		bw = fail(bw, s.userns, "allow unprivileged user namespaces for bwrap")
	default:
		pctx, cancel := probe(ctx)
		out, err := exec.CommandContext(pctx, s.bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true").CombinedOutput()
		cancel()
		if err != nil {
			bw = fail(bw, fmt.Sprintf("%s cannot build a sandbox: %v: %s", s.bwrap, err, strings.TrimSpace(string(out))), "allow bwrap user namespaces (pcpctl agent check says more)")
		} else {
			bw = ok(bw, fmt.Sprintf("%s (%s) builds a sandbox", s.bwrap, s.bwrapVersion))
		}
	}
	switch {
	case s.landlockErr != nil:
		ll = fail(ll, fmt.Sprintf("Landlock is not available: %v", s.landlockErr), "boot Linux 6.12 or later with lsm=landlock")
	case s.landlockABI < minLandlockABI:
		ll = fail(ll, fmt.Sprintf("ABI %d cannot scope abstract Unix sockets and signals (ABI %d needed)", s.landlockABI, minLandlockABI), "boot Linux 6.12 or later")
	case s.errata&landlockSignalErratum == 0:
		ll = fail(ll, fmt.Sprintf("ABI %d lacks the fix for signal scoping (erratum 2)", s.landlockABI), "update the kernel")
	default:
		ll = ok(ll, fmt.Sprintf("ABI %d, errata %#x", s.landlockABI, s.errata))
	}
	return []check{bw, ll}
}

// checkApps lists the applications pcpd reaches, by tier: Tier 1 apps by
// their registered capabilities, Tier 2 and 3 by the adapters health.check
// reports and what the session context counts.
func (d *doctor) checkApps(ctx context.Context) check {
	c := check{Name: "apps"}
	if d.agent == nil || d.health == nil {
		return warn(c, "not checked: pcpd does not answer", startPCPD)
	}
	qctx, cancel := probe(ctx)
	defer cancel()
	caps, err := d.agent.QueryCapabilities(qctx, &api.QueryCapabilitiesParams{})
	if err != nil {
		return warn(c, "query.capabilities: "+err.Error(), "run pcpctl caps to see why")
	}
	byTier := map[int][]string{}
	for _, cp := range caps.Capabilities {
		if strings.HasPrefix(cp.AppID, "pcp.") || !cp.Available {
			continue
		}
		if !slices.Contains(byTier[cp.Tier], cp.AppID) {
			byTier[cp.Tier] = append(byTier[cp.Tier], cp.AppID)
		}
	}
	var parts []string
	reached := false
	for tier := 1; tier <= 3; tier++ {
		apps := byTier[tier]
		slices.Sort(apps)
		var what []string
		if len(apps) > 0 {
			what = append(what, strings.Join(apps, ", "))
			reached = true
		}
		for _, a := range d.health.Adapters {
			if !slices.Contains(a.SupportedTiers, tier) {
				continue
			}
			s := fmt.Sprintf("%s %s", a.AdapterID, a.Status)
			if tier == 2 && d.session != nil {
				if n, ok := d.session.SystemState["atspi_apps"].(float64); ok {
					s += fmt.Sprintf(", %d accessible apps", int(n))
				}
			}
			if tier == 3 && d.session != nil {
				s += fmt.Sprintf(", %d surfaces", len(d.session.ActiveSurfaces))
			}
			if a.Status == "ok" {
				reached = true
			}
			what = append(what, s)
		}
		if len(what) == 0 {
			what = []string{"none"}
		}
		parts = append(parts, fmt.Sprintf("tier %d: %s", tier, strings.Join(what, "; ")))
	}
	if !reached {
		return warn(c, strings.Join(parts, " | "), "start an app with a PCP manifest, or run pcpd inside the desktop session for Tiers 2 and 3")
	}
	return ok(c, strings.Join(parts, " | "))
}

func ok(c check, detail string) check {
	c.Status, c.Detail = checkOK, detail
	return c
}

func warn(c check, detail, fix string) check {
	c.Status, c.Detail, c.Fix = checkWarn, detail, fix
	return c
}

func fail(c check, detail, fix string) check {
	c.Status, c.Detail, c.Fix = checkFail, detail, fix
	return c
}
