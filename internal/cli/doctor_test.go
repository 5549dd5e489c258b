package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/internal/cli"
	"github.com/pcp-dev/pcp/internal/daemon"
	"github.com/pcp-dev/pcp/internal/testkit"
)

type doctorCheck struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

type doctorReport struct {
	OK     bool          `json:"ok"`
	Checks []doctorCheck `json:"checks"`
}

// doctor runs pcpctl doctor --json against d and returns its report and
// the error Run returned.
func (d *testDaemon) doctor(t *testing.T) (map[string]doctorCheck, doctorReport, error) {
	t.Helper()
	out, errOut, err := d.run(t, "--json", "doctor", "--state-dir", d.stateDir, "--trust-dir", d.trustDir)
	if errOut != "" {
		t.Errorf("doctor wrote to stderr: %s", errOut)
	}
	var r doctorReport
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Fatalf("doctor --json: %v (run error %v): %.500s", jerr, err, out)
	}
	byName := map[string]doctorCheck{}
	for _, c := range r.Checks {
		if c.Status != "ok" && c.Status != "warn" && c.Status != "fail" {
			t.Errorf("check %s: status %q, want ok, warn or fail", c.Name, c.Status)
		}
		if c.Status != "ok" && c.Fix == "" {
			t.Errorf("check %s is %s with no fix: %s", c.Name, c.Status, c.Detail)
		}
		byName[c.Name] = c
	}
	return byName, r, err
}

// wantStatus fails unless the named check has status want and, for a
// fail, a fix containing fix.
func wantStatus(t *testing.T, checks map[string]doctorCheck, name, want, fix string) {
	t.Helper()
	c, ok := checks[name]
	if !ok {
		t.Fatalf("no %q check in the report", name)
	}
	if c.Status != want {
		t.Errorf("check %s: got %s (%s; fix %q), want %s", name, c.Status, c.Detail, c.Fix, want)
	}
	if !strings.Contains(c.Fix, fix) {
		t.Errorf("check %s: fix %q, want it to contain %q", name, c.Fix, fix)
	}
}

func wantFailed(t *testing.T, r doctorReport, err error) {
	t.Helper()
	if r.OK {
		t.Error("report ok, want not ok")
	}
	if got := cli.ExitCode(err); got != cli.ExitFailure {
		t.Errorf("exit code %d (error %v), want %d", got, err, cli.ExitFailure)
	}
	if s := cli.FormatError(err); s != "" {
		t.Errorf("FormatError: got %q, want nothing beyond the report", s)
	}
}

// On the headless desktop with pcpd bound to it, every check is ok; each
// part taken away turns its check to fail, with the fix.
func TestDoctorDesktop(t *testing.T) {
	desk, err := testkit.StartDesktop(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(desk.Stop)
	for k, v := range desk.Vars {
		t.Setenv(k, v)
	}
	t.Setenv("QT_LINUX_ACCESSIBILITY_ALWAYS_ON", "")
	t.Setenv("WAYLAND_DISPLAY", "")
	dunst, err := desk.StartDunst()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dunst.Stop)

	d := startDaemon(t, func(c *daemon.Config) {
		c.Accessibility = true
		c.AccessibilityBus = desk.Vars["AT_SPI_BUS_ADDRESS"]
		c.X11 = true
		c.X11Display = desk.Vars["DISPLAY"]
	})
	d.mustRun(t, "manifest", "keygen", "--out", filepath.Join(d.trustDir, "acme"))
	if err := os.Remove(filepath.Join(d.trustDir, "acme.key")); err != nil {
		t.Fatal(err)
	}

	checks, r, err := d.doctor(t)
	if err != nil || !r.OK {
		t.Errorf("doctor: error %v, ok %v, want success", err, r.OK)
	}
	for _, c := range r.Checks {
		if c.Status != "ok" {
			t.Errorf("check %s: got %s (%s; fix %q), want ok", c.Name, c.Status, c.Detail, c.Fix)
		}
	}
	for name, want := range map[string]string{
		"daemon":            "pcpd ",
		"trust dir":         "1 keys (acme)",
		"accessibility bus": desk.Vars["AT_SPI_BUS_ADDRESS"],
		"AT_SPI_BUS":        desk.Vars["AT_SPI_BUS_ADDRESS"],
		"XTEST":             "pcpd's display " + desk.Vars["DISPLAY"],
		"apps":              "x11 ok",
	} {
		if c := checks[name]; !strings.Contains(c.Detail, want) {
			t.Errorf("check %s: detail %q, want it to contain %q", name, c.Detail, want)
		}
	}

	// Qt finds the accessibility bus through the root window's property.
	xprop := exec.Command("xprop", "-root", "-remove", "AT_SPI_BUS")
	xprop.Env = desk.Env
	if out, err := xprop.CombinedOutput(); err != nil {
		t.Fatalf("xprop: %v: %s", err, out)
	}
	// The trust dir gone, no signed app can register.
	if err := os.RemoveAll(d.trustDir); err != nil {
		t.Fatal(err)
	}
	// GTK 3 apps started from here would not register.
	t.Setenv("NO_AT_BRIDGE", "1")
	// The accessibility bus stopped, its address still in the session's
	// environment.
	if err := desk.StopAccessibilityBus(); err != nil {
		t.Fatal(err)
	}

	checks, r, err = d.doctor(t)
	wantFailed(t, r, err)
	wantStatus(t, checks, "AT_SPI_BUS", "fail", "xprop -root -f AT_SPI_BUS 8s -set AT_SPI_BUS")
	wantStatus(t, checks, "trust dir", "fail", "mkdir -p -m 700 "+d.trustDir)
	wantStatus(t, checks, "Qt", "warn", "QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1")
	wantStatus(t, checks, "GTK", "fail", "unset NO_AT_BRIDGE")
	wantStatus(t, checks, "accessibility bus", "fail", "at-spi-bus-launcher")
	if c := checks["accessibility bus"]; !strings.Contains(c.Detail, desk.Vars["AT_SPI_BUS_ADDRESS"]) {
		t.Errorf("accessibility bus: detail %q, want it to name the stopped bus %s", c.Detail, desk.Vars["AT_SPI_BUS_ADDRESS"])
	}
	// pcpd answers still; its AT-SPI2 adapter may report the bus gone.
	if c := checks["daemon"]; c.Status == "fail" || !strings.Contains(c.Detail, "pcpd ") {
		t.Errorf("daemon: %s (%s), want pcpd reachable", c.Status, c.Detail)
	}
	// Where no systemd user manager runs (this desktop has none), the
	// units are not asked for.
	wantStatus(t, checks, "systemd units", "ok", "")

	// The human report: one line a check, its fix under it.
	out, _, err := d.run(t, "doctor", "--state-dir", d.stateDir, "--trust-dir", d.trustDir)
	if cli.ExitCode(err) != cli.ExitFailure {
		t.Errorf("doctor: exit code %d, want %d", cli.ExitCode(err), cli.ExitFailure)
	}
	lines := strings.Split(out, "\n")
	found := false
	for i, l := range lines {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "fail" && f[1] == "AT_SPI_BUS" {
			found = i+1 < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "fix: xprop -root")
		}
	}
	if !found {
		t.Errorf("doctor: no fail line for AT_SPI_BUS followed by its fix:\n%s", out)
	}
}

// Without pcpd, the daemon's checks fail and those that need it say why
// they did not run.
func TestDoctorNoDaemon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := &testDaemon{socket: filepath.Join(dir, "a.sock"), control: filepath.Join(dir, "c.sock"), stateDir: dir, trustDir: dir}
	checks, r, err := d.doctor(t)
	wantFailed(t, r, err)
	wantStatus(t, checks, "daemon", "fail", "start pcpd")
	wantStatus(t, checks, "control socket", "fail", "start pcpd")
	wantStatus(t, checks, "audit chain", "warn", "start pcpd")
	wantStatus(t, checks, "apps", "warn", "start pcpd")
	wantStatus(t, checks, "socket files", "warn", "start pcpd")
}

// The toolkits' switches: GTK_A11Y=none keeps GTK 4 apps off the
// accessibility bus; QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1 makes Qt register
// whatever the root window says.
func TestDoctorToolkitEnv(t *testing.T) {
	dir := t.TempDir()
	d := &testDaemon{socket: filepath.Join(dir, "a.sock"), control: filepath.Join(dir, "c.sock"), stateDir: dir, trustDir: dir}
	t.Setenv("NO_AT_BRIDGE", "")
	t.Setenv("GTK_A11Y", "none")
	t.Setenv("QT_LINUX_ACCESSIBILITY_ALWAYS_ON", "1")
	checks, _, _ := d.doctor(t)
	wantStatus(t, checks, "GTK", "fail", "unset GTK_A11Y")
	wantStatus(t, checks, "Qt", "ok", "")
	t.Setenv("GTK_A11Y", "atspi")
	checks, _, _ = d.doctor(t)
	wantStatus(t, checks, "GTK", "ok", "")
}

// A world-writable state dir, a policy file that does not load and a
// tampered audit chain each fail.
func TestDoctorDaemonState(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	d.mustRun(t, "invoke", "pcp.inspection.health")
	checks, _, _ := d.doctor(t)
	wantStatus(t, checks, "daemon", "ok", "")
	wantStatus(t, checks, "control socket", "ok", "")
	wantStatus(t, checks, "socket dir", "ok", "")
	wantStatus(t, checks, "state dir", "ok", "")
	wantStatus(t, checks, "socket files", "ok", "")
	wantStatus(t, checks, "audit chain", "ok", "")
	wantStatus(t, checks, "trust dir", "warn", "NAME.pem")

	// A development daemon takes unsigned apps: a missing trust dir is
	// then a warning.
	dev := startDaemon(t, func(c *daemon.Config) { c.AllowUnsigned = true })
	if err := os.Remove(dev.trustDir); err != nil {
		t.Fatal(err)
	}
	devChecks, _, _ := dev.doctor(t)
	wantStatus(t, devChecks, "trust dir", "warn", "mkdir -p -m 700 "+dev.trustDir)

	if err := os.Chmod(d.stateDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.control, 0o666); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(d.stateDir, 0o700)
	seg := filepath.Join(d.stateDir, "audit", "00000000000000000000.log")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[16+8+72+5] ^= 0x20 // a byte of entry 1
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, []byte("[rate_limits\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	out, _, err := d.run(t, "--json", "doctor", "--state-dir", d.stateDir, "--trust-dir", d.trustDir, "--policy", pol)
	var r doctorReport
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Fatalf("%v: %.500s", jerr, out)
	}
	checks = map[string]doctorCheck{}
	for _, c := range r.Checks {
		checks[c.Name] = c
	}
	wantFailed(t, r, err)
	wantStatus(t, checks, "state dir", "fail", "chmod go-w "+d.stateDir)
	wantStatus(t, checks, "socket files", "fail", "chmod 600 "+d.control)
	wantStatus(t, checks, "audit chain", "fail", d.stateDir+"/audit")
	wantStatus(t, checks, "policy", "fail", "pcpctl policy reload")
	if c := checks["audit chain"]; !strings.Contains(c.Detail, "broken at entry 1 ") {
		t.Errorf("audit chain: detail %q, want it broken at entry 1", c.Detail)
	}
}
