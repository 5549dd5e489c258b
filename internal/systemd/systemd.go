// Package systemd holds pcpd's systemd user units, embedded in the
// binaries: pcpd.socket binds the agent, control, MCP and scomp sockets
// where pcpd would ($XDG_RUNTIME_DIR/pcp/), and pcpd.service runs pcpd
// when the first connection arrives (socket activation: pcpd takes the
// sockets with daemon.ListenFDs). pcpctl install --user writes them.
package systemd

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The unit files' names.
const (
	SocketUnit  = "pcpd.socket"
	ServiceUnit = "pcpd.service"
)

// Marker begins every unit file PCP writes; uninstall removes only files
// that carry it.
const Marker = "# Installed by pcpctl install --user"

var (
	//go:embed pcpd.socket
	socketUnit string
	//go:embed pcpd.service
	serviceUnit string
)

// Unit is one unit file, ready to be written.
type Unit struct {
	Name    string
	Content []byte
}

// Units renders the two units for the pcpd binary at pcpd, an absolute
// path, socket first.
func Units(pcpd string) ([]Unit, error) {
	if !filepath.IsAbs(pcpd) {
		return nil, fmt.Errorf("pcpd's path %q is not absolute", pcpd)
	}
	// systemd refuses to run an executable whose path holds a quote, a
	// backslash or a control character.
	if i := strings.IndexFunc(pcpd, func(r rune) bool { return r < 0x20 || r == 0x7f || strings.ContainsRune(`"'\`, r) }); i >= 0 {
		return nil, fmt.Errorf("pcpd's path %q holds %q, which systemd does not take in an executable's path; install pcpd elsewhere", pcpd, pcpd[i])
	}
	svc := strings.Replace(serviceUnit, "@PCPD@", execQuote(pcpd), 1)
	return []Unit{{Name: SocketUnit, Content: []byte(socketUnit)}, {Name: ServiceUnit, Content: []byte(svc)}}, nil
}

// execQuote quotes a path for ExecStart=: double quotes around it (for
// spaces), and '%' doubled so that systemd does not read a specifier.
// Units has refused the characters that would need more ('$' is literal
// in the executable's name).
func execQuote(p string) string {
	return `"` + strings.ReplaceAll(p, "%", "%%") + `"`
}

// UserDir is where a user's own units go: $XDG_CONFIG_HOME/systemd/user,
// else ~/.config/systemd/user (a relative XDG_CONFIG_HOME is ignored,
// as the XDG base directory spec says).
func UserDir() (string, error) {
	config := os.Getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(config) { // unset, or relative: the XDG spec ignores it
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the user's unit directory: %w", err)
		}
		config = filepath.Join(home, ".config")
	}
	return filepath.Join(config, "systemd", "user"), nil
}
