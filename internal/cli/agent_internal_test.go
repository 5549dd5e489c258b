package cli

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSandboxProblems(t *testing.T) {
	ok := sandboxSupport{bwrap: "/usr/bin/bwrap", landlockABI: 7, errata: 0x7}
	if p := ok.problems(); len(p) != 0 {
		t.Errorf("a capable system: %v", p)
	}
	tests := []struct {
		name string
		s    sandboxSupport
		want string
	}{
		{"no bwrap", sandboxSupport{landlockABI: 7, errata: 7}, "bubblewrap (bwrap) is not installed"},
		{"no landlock", sandboxSupport{bwrap: "b", landlockErr: errors.New("function not implemented")}, "Landlock is not available"},
		{"old landlock", sandboxSupport{bwrap: "b", landlockABI: 5, errata: 7}, "Landlock ABI 5 cannot scope"},
		{"signal erratum", sandboxSupport{bwrap: "b", landlockABI: 6, errata: 1}, "erratum 2"},
		{"no userns", sandboxSupport{bwrap: "b", landlockABI: 7, errata: 7, userns: "user namespaces are disabled"}, "user namespaces are disabled"},
	}
	for _, tt := range tests {
		p := tt.s.problems()
		if len(p) != 1 || !strings.Contains(p[0], tt.want) {
			t.Errorf("%s: problems %q, want one containing %q", tt.name, p, tt.want)
		}
	}
}

func TestSandboxPlanArgs(t *testing.T) {
	run := t.TempDir()
	state := t.TempDir()
	p := sandboxPlan{
		endpoint: run + "/pcp/agents/a/pcp.sock", hide: []string{run + "/pcp", state, state + "/sub", "/nonexistent-pcp-dir"},
		exe: "/usr/bin/pcpctl", env: []string{"XDG_RUNTIME_DIR=" + run, "DBUS_SESSION_BUS_ADDRESS=unix:path=" + run + "/bus,guid=1"},
		newSession: true, command: []string{"agent", "-x"},
	}
	a := p.args()
	s := strings.Join(a, " ")
	for _, want := range []string{
		"--unshare-user --disable-userns --cap-drop ALL --unshare-pid",
		"--new-session",
		"--perms 0700 --tmpfs " + run + " ",
		"--perms 0700 --tmpfs " + state + " ",
		"--bind " + filepath.Dir(p.endpoint) + " " + filepath.Dir(p.endpoint),
		"--ro-bind /usr/bin/pcpctl /usr/bin/pcpctl",
		"--remount-ro " + state,
		"-- /usr/bin/pcpctl agent _enter --status-fd 3 -- agent -x",
	} {
		if !strings.Contains(s+" ", want) {
			t.Errorf("args lack %q:\n%s", want, s)
		}
	}
	// Inside a hidden directory, or missing: nothing more to mount.
	for _, not := range []string{run + "/pcp", state + "/sub", "/nonexistent-pcp-dir", run + "/bus", "--unshare-net"} {
		if slices.Contains(a, not) {
			t.Errorf("args mount %s:\n%s", not, s)
		}
	}
	if i, j := slices.Index(a, "--remount-ro"), slices.Index(a, "--bind"); i < j {
		t.Errorf("read-only before the binds:\n%s", s)
	}
}

func TestAgentEnv(t *testing.T) {
	got := agentEnv([]string{"HOME=/h", "DISPLAY=:0", "PCP_CONTROL_SOCKET=/c", "DBUS_SESSION_BUS_ADDRESS=x", "PCP_SOCKET=/old", "PCP_SCOMP_SOCKET=/s", "PCP_SCOMP_TOKEN_FILE=/t"}, "/new", "n")
	want := []string{"HOME=/h", "PCP_SOCKET=/new", "PCP_AGENT=n"}
	if !slices.Equal(got, want) {
		t.Errorf("agentEnv = %q, want %q", got, want)
	}
}

func TestSocketPaths(t *testing.T) {
	env := map[string]string{
		"DBUS_SESSION_BUS_ADDRESS": "unix:abstract=/tmp/dbus-x;unix:path=/run/user/1/b%2cus,guid=1",
		"AT_SPI_BUS_ADDRESS":       "unix:path=/run/user/1/at-spi/bus_0,guid=2",
		"WAYLAND_DISPLAY":          "wayland-1",
	}
	got := socketPaths(func(k string) string { return env[k] }, "/run/user/1")
	want := []string{"/run/user/1/b,us", "/run/user/1/at-spi/bus_0", "/run/user/1/wayland-1"}
	if !slices.Equal(got, want) {
		t.Errorf("socketPaths = %q, want %q", got, want)
	}
}
