package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/internal/cli"
)

// stubSystemctl stands in for systemctl --user where no user manager
// runs (none does on a machine booted without systemd, and a real one
// must not be touched by tests): it logs each call to STUB_LOG and
// answers show-environment with STUB_ENV (fails with STUB_NO_MANAGER
// set), is-enabled with STUB_ENABLED, is-active with
// STUB_ACTIVE_pcpd_socket / STUB_ACTIVE_pcpd_service.
const stubSystemctl = `#!/bin/sh
echo "$*" >>"$STUB_LOG"
[ "$1" = --user ] || exit 1
shift
case "$1" in
show-environment)
  if [ -n "$STUB_NO_MANAGER" ]; then echo "Failed to connect to bus: No medium found" >&2; exit 1; fi
  printf '%b' "$STUB_ENV" ;;
is-enabled) echo "${STUB_ENABLED:-disabled}"; [ "${STUB_ENABLED:-}" = enabled ] ;;
is-active)
  v=$(eval echo "\${STUB_ACTIVE_$(echo "$2" | tr . _):-inactive}")
  echo "$v"; [ "$v" = active ] ;;
esac
`

// systemctlEnv puts the stub first on PATH and returns a function giving
// the calls made since the last.
func systemctlEnv(t *testing.T) func() []string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(stubSystemctl), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "log")
	t.Setenv("STUB_LOG", log)
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, k := range []string{"STUB_NO_MANAGER", "STUB_ENV", "STUB_ENABLED", "STUB_ACTIVE_pcpd_socket", "STUB_ACTIVE_pcpd_service"} {
		t.Setenv(k, "")
	}
	return func() []string {
		b, _ := os.ReadFile(log)
		os.Remove(log)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
}

// fakePCPD is an executable standing as the installed pcpd.
func fakePCPD(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pcpd")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func pcpctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := cli.Run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return out.String() + errb.String(), err
}

// Without a user manager, install writes the units (which pass
// systemd-analyze verify) and says what to run where one runs; with one,
// it reloads it, imports the desktop's variables set here, and enables
// and starts pcpd.socket. A second install finds them up to date;
// uninstall stops, disables and removes them.
func TestInstallUser(t *testing.T) {
	calls := systemctlEnv(t)
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	dir := filepath.Join(cfg, "systemd", "user")
	pcpd := fakePCPD(t)
	sock := filepath.Join(t.TempDir(), "pcp.sock")
	run := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", run)

	t.Setenv("STUB_NO_MANAGER", "1")
	out, err := pcpctl(t, "--socket", sock, "install", "--user", "--pcpd", pcpd)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	for _, want := range []string{"wrote " + filepath.Join(dir, "pcpd.socket"), "wrote " + filepath.Join(dir, "pcpd.service"),
		"no systemd user manager answers", "systemctl --user daemon-reload && systemctl --user enable --now pcpd.socket"} {
		if !strings.Contains(out, want) {
			t.Errorf("install without a manager: output lacks %q:\n%s", want, out)
		}
	}
	svc, err := os.ReadFile(filepath.Join(dir, "pcpd.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svc), "\nExecStart=\""+pcpd+"\"\n") {
		t.Errorf("pcpd.service does not run %s:\n%s", pcpd, svc)
	}
	if diff := cmp.Diff([]string{"--user show-environment"}, calls()); diff != "" {
		t.Errorf("systemctl calls (-want +got):\n%s", diff)
	}
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not installed (Debian's systemd package; scripts/test installs it)")
	}
	verify := exec.Command(sa, "--user", "verify", filepath.Join(dir, "pcpd.socket"), filepath.Join(dir, "pcpd.service"))
	verify.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+run)
	if vout, err := verify.CombinedOutput(); err != nil || len(vout) > 0 {
		t.Errorf("systemd-analyze verify of the installed units: %v: %s", err, vout)
	}

	t.Setenv("STUB_NO_MANAGER", "")
	t.Setenv("DISPLAY", ":7")
	t.Setenv("WAYLAND_DISPLAY", "")
	t.Setenv("XAUTHORITY", "")
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/tmp/bus")
	out, err = pcpctl(t, "--socket", sock, "install", "--user", "--pcpd", pcpd)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	want := []string{"--user show-environment", "--user daemon-reload", "--user import-environment DISPLAY DBUS_SESSION_BUS_ADDRESS",
		"--user is-active pcpd.socket", "--user enable --now pcpd.socket", "--user is-active pcpd.service"}
	if diff := cmp.Diff(want, calls()); diff != "" {
		t.Errorf("systemctl calls (-want +got):\n%s", diff)
	}
	for _, want := range []string{"pcpd.socket is up to date", "pcpd.service is up to date", "imported DISPLAY, DBUS_SESSION_BUS_ADDRESS",
		"enabled and started pcpd.socket: pcpd starts on the first connection to " + sock,
		"note: pcpd.socket listens on " + filepath.Join(run, "pcp", "pcp.sock") + "; this pcpctl uses " + sock + " (--socket or PCP_SOCKET)"} {
		if !strings.Contains(out, want) {
			t.Errorf("install: output lacks %q:\n%s", want, out)
		}
	}

	// A running pcpd.service is restarted onto the new units; --json
	// reports the steps.
	t.Setenv("STUB_ACTIVE_pcpd_service", "active")
	out, err = pcpctl(t, "--socket", sock, "--json", "install", "--user", "--pcpd", pcpd, "--import-env=false")
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	var r struct {
		Dir     string   `json:"dir"`
		Manager bool     `json:"manager"`
		Steps   []string `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("install --json: %v: %s", err, out)
	}
	if r.Dir != dir || !r.Manager || r.Steps[len(r.Steps)-1] != "restarted pcpd.service onto the new units" {
		t.Errorf("install --json: %+v", r)
	}
	if got := calls(); got[len(got)-1] != "--user restart pcpd.service" {
		t.Errorf("systemctl calls %q, want the service restarted last", got)
	}

	t.Setenv("STUB_ACTIVE_pcpd_service", "")
	out, err = pcpctl(t, "uninstall", "--user")
	if err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	want = []string{"--user show-environment", "--user disable --now pcpd.socket pcpd.service", "--user daemon-reload"}
	if diff := cmp.Diff(want, calls()); diff != "" {
		t.Errorf("uninstall: systemctl calls (-want +got):\n%s", diff)
	}
	for _, name := range []string{"pcpd.socket", "pcpd.service"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s after uninstall: %v", name, err)
		}
		if !strings.Contains(out, "removed "+filepath.Join(dir, name)) {
			t.Errorf("uninstall: output lacks the removal of %s:\n%s", name, out)
		}
	}
	out, err = pcpctl(t, "uninstall", "--user")
	if err != nil || !strings.Contains(out, "no units of pcpctl install in "+dir) {
		t.Errorf("a second uninstall: %v: %s", err, out)
	}
}

// A pcpd started by hand on the agent socket keeps it: install enables
// pcpd.socket for the next login but does not start it over that pcpd.
func TestInstallBesideRunningPCPD(t *testing.T) {
	calls := systemctlEnv(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	d := startDaemon(t)
	out, err := pcpctl(t, "--socket", d.socket, "install", "--user", "--pcpd", fakePCPD(t), "--import-env=false")
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	want := []string{"--user show-environment", "--user daemon-reload", "--user is-active pcpd.socket", "--user enable pcpd.socket"}
	if diff := cmp.Diff(want, calls()); diff != "" {
		t.Errorf("systemctl calls (-want +got):\n%s", diff)
	}
	if !strings.Contains(out, "enabled pcpd.socket for the next login; not started: a pcpd started by hand (pid ") ||
		!strings.Contains(out, "serves "+d.socket+"; stop it, then: systemctl --user start pcpd.socket") {
		t.Errorf("install: output %s", out)
	}
}

// Units of the same names that pcpctl did not write are not replaced
// without --force, nor removed; install and uninstall need --user; a
// pcpd that cannot be found is named as the problem.
func TestInstallRefusals(t *testing.T) {
	systemctlEnv(t)
	t.Setenv("STUB_NO_MANAGER", "1")
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	dir := filepath.Join(cfg, "systemd", "user")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(dir, "pcpd.service")
	if err := os.WriteFile(mine, []byte("[Service]\nExecStart=/opt/pcpd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pcpd := fakePCPD(t)
	out, err := pcpctl(t, "install", "--user", "--pcpd", pcpd)
	if err == nil || !strings.Contains(err.Error(), mine+" exists and was not written by pcpctl install; move it away or pass --force") {
		t.Errorf("install over a unit of the user's: %v\n%s", err, out)
	}
	out, err = pcpctl(t, "uninstall", "--user")
	if err != nil || !strings.Contains(out, "left "+mine+" alone") {
		t.Errorf("uninstall: %v: %s", err, out)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("uninstall removed the user's own unit: %v", err)
	}
	if out, err := pcpctl(t, "install", "--user", "--pcpd", pcpd, "--force"); err != nil || !strings.Contains(out, "updated "+mine) {
		t.Errorf("install --force: %v: %s", err, out)
	}

	for _, args := range [][]string{{"install"}, {"uninstall"}} {
		_, err := pcpctl(t, args...)
		if cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "--user is the only kind") {
			t.Errorf("%s without --user: %v (exit %d), want a usage error", args[0], err, cli.ExitCode(err))
		}
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := pcpctl(t, "install", "--user"); err == nil || !strings.Contains(err.Error(), "pcpd is neither beside pcpctl nor on PATH; name it with --pcpd") {
		t.Errorf("install with no pcpd to find: %v", err)
	}
	if _, err := pcpctl(t, "install", "--user", "--pcpd", filepath.Join(cfg, "nope")); err == nil || !strings.Contains(err.Error(), "is not an executable file") {
		t.Errorf("install --pcpd at nothing: %v", err)
	}
}

// Where a user manager runs, doctor checks the units: missing, out of
// date, pointing at no pcpd, disabled, inactive, or a manager without
// the desktop's variables each warn with the fix; all in order is ok.
// Where none runs, the check is ok and asks nothing.
func TestDoctorSystemd(t *testing.T) {
	systemctlEnv(t)
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	dir := t.TempDir()
	d := &testDaemon{socket: filepath.Join(dir, "a.sock"), control: filepath.Join(dir, "c.sock"), stateDir: dir, trustDir: dir}
	check := func(status, detail, fix string) {
		t.Helper()
		checks, _, _ := d.doctor(t)
		c := checks["systemd units"]
		if c.Status != status || !strings.Contains(c.Detail, detail) || !strings.Contains(c.Fix, fix) {
			t.Errorf("systemd units: %s %q (fix %q), want %s %q (fix %q)", c.Status, c.Detail, c.Fix, status, detail, fix)
		}
	}
	t.Setenv("STUB_NO_MANAGER", "1")
	check("ok", "no systemd user manager answers", "")
	t.Setenv("STUB_NO_MANAGER", "")
	t.Setenv("STUB_ENV", `HOME=/root\nDISPLAY=:7\nDBUS_SESSION_BUS_ADDRESS=unix:path=/tmp/bus\n`)
	check("warn", "pcpd's units are not in "+filepath.Join(cfg, "systemd", "user"), "pcpctl install --user")

	pcpd := fakePCPD(t)
	t.Setenv("STUB_NO_MANAGER", "1")
	if out, err := pcpctl(t, "install", "--user", "--pcpd", pcpd); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	t.Setenv("STUB_NO_MANAGER", "")
	check("warn", "pcpd.socket is disabled, not enabled", "systemctl --user enable --now pcpd.socket")
	t.Setenv("STUB_ENABLED", "enabled")
	check("warn", "pcpd.socket is inactive", "systemctl --user start pcpd.socket")
	t.Setenv("STUB_ACTIVE_pcpd_socket", "active")
	check("ok", "pcpd.socket enabled and active, pcpd.service inactive, running "+pcpd, "")
	t.Setenv("STUB_ENV", `HOME=/root\n`)
	check("warn", "the user manager's environment lacks DISPLAY and DBUS_SESSION_BUS_ADDRESS", "systemctl --user import-environment DISPLAY WAYLAND_DISPLAY XAUTHORITY DBUS_SESSION_BUS_ADDRESS")

	svc := filepath.Join(cfg, "systemd", "user", "pcpd.service")
	b, err := os.ReadFile(svc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(svc, append(b, "# edited\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	check("warn", "differ from this pcpctl's", "pcpctl install --user")
	if err := os.Remove(pcpd); err != nil {
		t.Fatal(err)
	}
	check("warn", "pcpd.service runs "+pcpd+", which is not an executable file", "pcpctl install --user")
}
