package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/daemon"
)

// verify lints the unit files at paths with systemd's own
// `systemd-analyze --user verify` and returns what it said; any output
// is a finding (it exits 0 on unknown keys).
func verify(t *testing.T, paths ...string) (string, error) {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not installed (Debian's systemd package has it; scripts/test installs it)")
	}
	home := t.TempDir()
	run := filepath.Join(home, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sa, append([]string{"--user", "verify"}, paths...)...)
	// A user manager's runtime directory and an empty configuration, so
	// that only the units named are read.
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+run, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "config"))
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// write puts units into a user unit directory under dir and returns
// their paths.
func write(t *testing.T, dir string, units []Unit) []string {
	t.Helper()
	ud := filepath.Join(dir, "systemd", "user")
	if err := os.MkdirAll(ud, 0o755); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, u := range units {
		p := filepath.Join(ud, u.Name)
		if err := os.WriteFile(p, u.Content, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// installedPCPD copies an executable to a path with a space, a '%' and a
// '$' in it, as pcpd installed there.
func installedPCPD(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), `my bin 100% $HOME`)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "pcpd")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The units pass systemd-analyze verify with ExecStart at an installed
// pcpd, however its path is spelled; the same units with ExecStart at a
// file that is not there do not (the lint catches what it should).
func TestUnitsVerify(t *testing.T) {
	pcpd := installedPCPD(t)
	units, err := Units(pcpd)
	if err != nil {
		t.Fatal(err)
	}
	paths := write(t, t.TempDir(), units)
	if out, err := verify(t, paths...); err != nil || out != "" {
		t.Errorf("systemd-analyze verify: %v: %s", err, out)
	}

	gone, err := Units(filepath.Join(t.TempDir(), "pcpd"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := verify(t, write(t, t.TempDir(), gone)...)
	if err == nil || !strings.Contains(out, "is not executable") {
		t.Errorf("systemd-analyze verify with no pcpd at ExecStart: %v: %q, want it to fail", err, out)
	}
}

func TestUnitsRefuse(t *testing.T) {
	for _, p := range []string{"pcpd", "bin/pcpd", "/usr/bin/pc\npd", `/a"b/pcpd`, `/a'b/pcpd`, `/a\b/pcpd`} {
		if _, err := Units(p); err == nil {
			t.Errorf("Units(%q): no error, want one", p)
		}
	}
}

func TestExecQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/bin/pcpd":    `"/usr/bin/pcpd"`,
		`/a b/c/pcpd`:      `"/a b/c/pcpd"`,
		`/100%/$HOME/pcpd`: `"/100%%/$HOME/pcpd"`,
	} {
		if got := execQuote(in); got != want {
			t.Errorf("execQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// pcpd.socket listens where pcpd and pcpctl look by default: %t is the
// user manager's XDG_RUNTIME_DIR.
func TestSocketUnitAgreesWithDefaults(t *testing.T) {
	run := "/run/user/1000"
	t.Setenv("XDG_RUNTIME_DIR", run)
	t.Setenv("PCP_SOCKET", "")
	t.Setenv("PCP_CONTROL_SOCKET", "")
	var cfg daemon.Config
	if err := cfg.Defaults(); err != nil {
		t.Fatal(err)
	}
	units, err := Units("/usr/bin/pcpd")
	if err != nil {
		t.Fatal(err)
	}
	var listen []string
	for _, l := range strings.Split(string(units[0].Content), "\n") {
		if v, ok := strings.CutPrefix(l, "ListenStream="); ok {
			listen = append(listen, strings.ReplaceAll(v, "%t", run))
		}
	}
	want := []string{cfg.Socket, cfg.ControlSocket, cfg.MCP.Socket, cfg.Scomp.Socket}
	if strings.Join(listen, " ") != strings.Join(want, " ") {
		t.Errorf("pcpd.socket listens on %v, pcpd's defaults are %v", listen, want)
	}
	if client.DefaultSocket() != listen[0] || client.DefaultControlSocket() != listen[1] {
		t.Errorf("client defaults %s, %s; pcpd.socket %s, %s", client.DefaultSocket(), client.DefaultControlSocket(), listen[0], listen[1])
	}
	for _, l := range []string{"SocketMode=0600", "DirectoryMode=0700"} {
		if !strings.Contains(string(units[0].Content), "\n"+l+"\n") {
			t.Errorf("pcpd.socket lacks %s", l)
		}
	}
	for _, u := range units {
		if !strings.HasPrefix(string(u.Content), Marker) {
			t.Errorf("%s does not begin with the marker uninstall looks for", u.Name)
		}
	}
}

func TestUserDir(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_CONFIG_HOME", "/cfg")
	if d, _ := UserDir(); d != "/cfg/systemd/user" {
		t.Errorf("UserDir with XDG_CONFIG_HOME: %s", d)
	}
	for _, v := range []string{"", "relative/cfg"} {
		t.Setenv("XDG_CONFIG_HOME", v)
		if d, _ := UserDir(); d != "/home/u/.config/systemd/user" {
			t.Errorf("UserDir with XDG_CONFIG_HOME=%q: %s", v, d)
		}
	}
}
