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
	if strings.ContainsAny(pcpd, "\n\r") {
		return nil, fmt.Errorf("pcpd's path %q holds a line break", pcpd)
	}
	svc := strings.Replace(serviceUnit, "@PCPD@", execQuote(pcpd), 1)
	return []Unit{{Name: SocketUnit, Content: []byte(socketUnit)}, {Name: ServiceUnit, Content: []byte(svc)}}, nil
}

// execQuote quotes a path for ExecStart=: double quotes around it, with
// the backslash and the quote escaped as in C, and the specifier and
// variable characters doubled so that systemd takes them literally.
func execQuote(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `%`, `%%`, `$`, `$$`)
	return `"` + r.Replace(p) + `"`
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
