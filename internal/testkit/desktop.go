package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
)

// Desktop is a headless accessible desktop started by scripts/desktop:
// Xvfb, openbox, a session D-Bus, the accessibility bus and, when asked,
// the GTK apps the tests drive (gtk3-widget-factory, gnome-calculator);
// StartApp starts others. Each
// Desktop has its own display and buses, so packages that run at the same
// time do not share application state.
type Desktop struct {
	// Dir holds the desktop's state; Env its environment, as KEY=VALUE.
	Dir string
	Env []string
	// Vars is Env as a map.
	Vars   map[string]string
	script string
}

// StartDesktop starts a desktop with scripts/desktop (found by walking up
// from the working directory to go.mod). The desktop's packages must be
// installed (scripts/test and scripts/desktop install them); a desktop
// that cannot start is an error, never a reason to skip.
func StartDesktop(apps bool) (*Desktop, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	// A short directory: the sockets inside must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "pcpdesk")
	if err != nil {
		return nil, err
	}
	d := &Desktop{Dir: dir, script: filepath.Join(root, "scripts", "desktop"), Vars: map[string]string{}}
	args := []string{"start", dir}
	if apps {
		args = append(args, "--apps")
	}
	cmd := exec.Command(d.script, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		d.Stop()
		return nil, fmt.Errorf("scripts/desktop start: %v\n%s", err, out)
	}
	if err := d.readEnv(); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// readEnv reads the "export KEY=VALUE" lines scripts/desktop wrote.
func (d *Desktop) readEnv() error {
	f, err := os.Open(filepath.Join(d.Dir, "env"))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "export ")
		if !ok {
			continue
		}
		// printf %q quotes as bash does; the values written are plain
		// paths and addresses, quoted only for characters like ','.
		if u, err := unquoteShell(line); err == nil {
			line = u
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		d.Vars[k] = v
		d.Env = append(d.Env, k+"="+v)
	}
	if d.Vars["DISPLAY"] == "" || d.Vars["AT_SPI_BUS_ADDRESS"] == "" {
		return errors.New("scripts/desktop wrote no DISPLAY or AT_SPI_BUS_ADDRESS")
	}
	return sc.Err()
}

// Setenv puts the desktop's environment into this process, for code that
// reads it from there (D-Bus addresses, DISPLAY).
func (d *Desktop) Setenv() {
	for k, v := range d.Vars {
		os.Setenv(k, v)
	}
}

// Stop stops every process of the desktop and removes its directory.
func (d *Desktop) Stop() {
	exec.Command(d.script, "stop", d.Dir).Run()
	os.RemoveAll(d.Dir)
}

// WaitApps waits until each named application is on the accessibility
// bus, by asking Debian's pyatspi (python3-pyatspi): an independent
// reader, so a failure here is the desktop's, not the adapter's.
func (d *Desktop) WaitApps(timeout time.Duration, names ...string) error {
	want := strings.Join(names, ",")
	script := `import pyatspi,sys
names=set(a.name for a in pyatspi.Registry.getDesktop(0) if a is not None)
sys.exit(0 if set(sys.argv[1].split(",")) <= names else 1)`
	deadline := time.Now().Add(timeout)
	for {
		cmd := exec.Command("/usr/bin/python3", "-c", script, want)
		cmd.Env = append(os.Environ(), d.Env...)
		if cmd.Run() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("applications %s not on the accessibility bus after %v", want, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "scripts", "desktop")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/desktop not found above the working directory")
		}
		dir = parent
	}
}

// unquoteShell undoes bash's printf %q for the simple cases it produces
// here: backslash escapes, or a $'...' string.
func unquoteShell(s string) (string, error) {
	if strings.Contains(s, "$'") {
		i := strings.Index(s, "$'")
		q, err := strconv.Unquote(`"` + strings.ReplaceAll(strings.TrimSuffix(s[i+2:], "'"), `"`, `\"`) + `"`)
		if err != nil {
			return "", err
		}
		return s[:i] + q, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String(), nil
}

// pyatspiScript walks one application's tree with pyatspi: "minimal"
// reads role, name and children; "full" also states, action names and
// up to 4096 characters of text. It prints "<nodes> <ms>" a walk.
const pyatspiScript = `
import sys, time
import pyatspi
mode, appname, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3])
TEXT = {pyatspi.ROLE_TEXT, pyatspi.ROLE_ENTRY, pyatspi.ROLE_PARAGRAPH, pyatspi.ROLE_TERMINAL, pyatspi.ROLE_SPIN_BUTTON}
def walk():
    t0 = time.perf_counter()
    app = None
    for a in pyatspi.Registry.getDesktop(0):
        if a is not None and a.name == appname:
            app = a
    if app is None:
        return 0, 0.0
    n, stack = 0, [app]
    while stack:
        a = stack.pop()
        if a is None:
            continue
        n += 1
        role, name = a.getRole(), a.name
        if mode == "full":
            a.getState().getStates()
            try:
                act = a.queryAction()
                [act.getName(i) for i in range(act.nActions)]
            except NotImplementedError:
                pass
            if role in TEXT:
                try:
                    tx = a.queryText()
                    tx.getText(0, min(tx.characterCount, 4096))
                except NotImplementedError:
                    pass
        stack.extend(a[i] for i in range(a.childCount))
    return n, (time.perf_counter() - t0) * 1000
for _ in range(iterations):
    n, ms = walk()
    print(n, ms)
`

// PyatspiWalk walks appName's accessible tree with Debian's pyatspi
// (/usr/bin/python3, python3-pyatspi) iterations times in one fresh
// process, timed by Python's own clock, and returns the node count and the
// milliseconds of each walk. It is the independent baseline of the
// AT-SPI2 benchmarks. env is the desktop's environment; nil means this
// process's.
func PyatspiWalk(env []string, appName, mode string, iterations int) (nodes int, ms []float64, err error) {
	cmd := exec.Command("/usr/bin/python3", "-c", pyatspiScript, mode, appName, strconv.Itoa(iterations))
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, nil, fmt.Errorf("pyatspi walk: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m float64
		if _, err := fmt.Sscan(line, &nodes, &m); err != nil {
			return 0, nil, fmt.Errorf("pyatspi walk printed %q", out)
		}
		ms = append(ms, m)
	}
	if nodes == 0 {
		return 0, nil, fmt.Errorf("pyatspi found no application named %q", appName)
	}
	return nodes, ms, nil
}

// QtExample is the path of one of Debian's qtbase5-examples, e.g.
// QtExample("widgets/widgets/calculator").
func QtExample(rel string) string {
	return filepath.Join("/usr/lib/x86_64-linux-gnu/qt5/examples", rel, filepath.Base(rel))
}

// App is an application StartApp started on the desktop.
type App struct {
	Cmd *exec.Cmd
	// Exited is closed when the process has ended; Err is its error.
	Exited chan struct{}
	Err    error
}

// Alive reports whether the application is still running.
func (a *App) Alive() bool {
	select {
	case <-a.Exited:
		return false
	default:
		return true
	}
}

// Stop ends the application (SIGTERM, then SIGKILL after 5 s) and waits.
func (a *App) Stop() {
	if !a.Alive() {
		return
	}
	a.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.Exited:
	case <-time.After(5 * time.Second):
		a.Cmd.Process.Kill()
		<-a.Exited
	}
}

// StartApp starts name with args inside the desktop's environment, its
// output in Dir/NAME.log, and records its PID so that Stop ends it too.
// Stop it with (*App).Stop; it does not wait for the app to register on
// the accessibility bus (WaitApps does).
func (d *Desktop) StartApp(name string, args ...string) (*App, error) {
	logf, err := os.CreateTemp(d.Dir, filepath.Base(name)+".*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), d.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	if f, err := os.OpenFile(filepath.Join(d.Dir, "pids"), os.O_APPEND|os.O_WRONLY, 0); err == nil {
		fmt.Fprintln(f, cmd.Process.Pid)
		f.Close()
	}
	a := &App{Cmd: cmd, Exited: make(chan struct{})}
	go func() {
		a.Err = cmd.Wait()
		logf.Close()
		close(a.Exited)
	}()
	return a, nil
}

// StopAccessibilityBus stops the desktop's accessibility bus as a crash
// or a logout would: the bus launcher and the bus's dbus-daemon (found by
// the PCP_DESKTOP_DIR their environment carries) are killed, and it
// returns once a connection to the bus has seen it go. The session bus
// may start a new launcher on the next org.a11y.Bus call; the address in
// Vars answers no more.
func (d *Desktop) StopAccessibilityBus() error {
	conn, err := dbus.Connect(d.Vars["AT_SPI_BUS_ADDRESS"])
	if err != nil {
		return fmt.Errorf("connecting to the accessibility bus: %w", err)
	}
	defer conn.Close()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	killed := 0
	for _, p := range procs {
		env, err := os.ReadFile(filepath.Join(p, "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), "PCP_DESKTOP_DIR="+d.Dir) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		if !strings.Contains(string(cmdline), "at-spi-bus-launcher") && !strings.Contains(string(cmdline), "at-spi2/accessibility.conf") {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if killed == 0 {
		return errors.New("no accessibility bus process of this desktop found")
	}
	select {
	case <-conn.Context().Done():
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("the accessibility bus still answers 10s after its processes were killed")
	}
}
