package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pcp-dev/pcp/internal/systemd"
)

// checkSystemd checks, where a systemd user manager runs, that pcpd's
// units are installed, current, enabled and active, and that the manager
// holds the desktop's variables the pcpd it starts needs. It only warns:
// pcpd started by hand serves as well.
func (d *doctor) checkSystemd(ctx context.Context) check {
	c := check{Name: "systemd units"}
	ctx, cancel := probe(ctx)
	defer cancel()
	manager, why := userManager(ctx)
	if !manager {
		return ok(c, why+": pcpd is started by hand")
	}
	dir, err := systemd.UserDir()
	if err != nil {
		return warn(c, err.Error(), "set HOME or XDG_CONFIG_HOME")
	}
	const install = "pcpctl install --user"
	svc, err := os.ReadFile(filepath.Join(dir, systemd.ServiceUnit))
	sock, serr := os.ReadFile(filepath.Join(dir, systemd.SocketUnit))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(serr, fs.ErrNotExist) {
		return warn(c, "pcpd's units are not in "+dir+": pcpd does not start with the session", install)
	}
	if err = errors.Join(err, serr); err != nil {
		return warn(c, err.Error(), "make "+dir+" readable by you")
	}
	pcpd := execStart(svc)
	if !isExecutable(pcpd) {
		return warn(c, fmt.Sprintf("pcpd.service runs %s, which is not an executable file", pcpd), install+" (--pcpd PATH)")
	}
	if want, err := systemd.Units(pcpd); err == nil && (!bytes.Equal(want[0].Content, sock) || !bytes.Equal(want[1].Content, svc)) {
		return warn(c, "the units in "+dir+" differ from this pcpctl's", install)
	}
	state := func(verb, unit string) string {
		out, _ := systemctlUser(ctx, verb, unit)
		return strings.TrimSpace(out)
	}
	if s := state("is-enabled", systemd.SocketUnit); s != "enabled" {
		return warn(c, "pcpd.socket is "+s+", not enabled: pcpd does not start at the next login", "systemctl --user enable --now pcpd.socket")
	}
	if s := state("is-active", systemd.SocketUnit); s != "active" {
		return warn(c, "pcpd.socket is "+s+": nothing listens for pcpd", "systemctl --user start pcpd.socket (systemctl --user status pcpd.socket says why it stopped)")
	}
	out, err := systemctlUser(ctx, "show-environment")
	if err != nil {
		return warn(c, err.Error(), "systemctl --user status")
	}
	env := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && v != "" {
			env[k] = true
		}
	}
	var missing []string
	if !env["DISPLAY"] && !env["WAYLAND_DISPLAY"] {
		missing = append(missing, "DISPLAY")
	}
	if !env["DBUS_SESSION_BUS_ADDRESS"] {
		missing = append(missing, "DBUS_SESSION_BUS_ADDRESS")
	}
	if len(missing) > 0 {
		return warn(c, "the user manager's environment lacks "+strings.Join(missing, " and ")+": the pcpd it starts cannot reach the desktop",
			"from the session: systemctl --user import-environment "+strings.Join(sessionVars, " ")+" && systemctl --user restart pcpd.service")
	}
	return ok(c, "pcpd.socket enabled and active, pcpd.service "+state("is-active", systemd.ServiceUnit)+", running "+pcpd)
}

// execStart is the executable pcpd.service's ExecStart= names.
func execStart(unit []byte) string {
	for _, l := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			v = strings.TrimSpace(v)
			if strings.HasPrefix(v, `"`) {
				if end := strings.Index(v[1:], `"`); end >= 0 {
					v = v[1 : end+1]
				}
			} else if f := strings.Fields(v); len(f) > 0 {
				v = f[0]
			}
			return strings.ReplaceAll(v, "%%", "%")
		}
	}
	return ""
}
