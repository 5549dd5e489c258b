package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/pcp-dev/pcp/internal/unixsock"
)

// Socket activation (sd_listen_fds(3)): the service manager binds pcpd's
// sockets itself and starts pcpd on the first connection, handing them
// over as file descriptors 3, 4, … with LISTEN_FDS (their count),
// LISTEN_PID (the process they are meant for) and LISTEN_FDNAMES (their
// names, colon-separated). pcpd serves an inherited socket exactly as one
// of its own: the same peer-credential check and connection caps; only
// the stale-file handling is skipped, and the file is left in place on
// exit, since the manager owns it and keeps listening.

// The names an activated socket may carry (FileDescriptorName= in a
// socket unit, --fdname of systemd-socket-activate). A socket with any
// other name (systemd's default is the socket unit's name) is matched to
// pcpd's sockets by the path it is bound to.
const (
	FDNameAgent   = "agent"
	FDNameControl = "control"
	FDNameMCP     = "mcp"
	FDNameScomp   = "scomp"
)

// listenFDsStart is the first descriptor passed (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// maxListenFDs bounds LISTEN_FDS: pcpd has four sockets to inherit.
const maxListenFDs = 64

// Activated is a listening socket the service manager passed to pcpd.
type Activated struct {
	// FD is the descriptor it arrived as; Name its LISTEN_FDNAMES entry
	// ("" when none was given); Path the file it is bound to.
	FD   int
	Name string
	Path string

	l *net.UnixListener
	// taken is set once a listener of the server serves it.
	taken bool
}

// ListenFDs takes the sockets passed with LISTEN_FDS, and unsets the
// LISTEN_* variables so that no process pcpd starts sees them. It
// returns none when LISTEN_FDS is unset, and an error saying what is
// wrong when the variables are inconsistent, are meant for another
// process, or a descriptor is not a listening Unix stream socket bound
// to a path. Call it once, before anything opens a file.
func ListenFDs() ([]*Activated, error) {
	fds, pid, names := os.Getenv("LISTEN_FDS"), os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDNAMES")
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDNAMES")
	list, err := parseListenEnv(fds, pid, names, os.Getpid())
	if err != nil {
		return nil, err
	}
	var out []*Activated
	for i, name := range list {
		a, err := inherit(listenFDsStart+i, name)
		if err != nil {
			closeActivated(out)
			// inherit has closed fd i; the rest are still ours to close.
			for j := i + 1; j < len(list); j++ {
				syscall.Close(listenFDsStart + j)
			}
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// parseListenEnv checks the LISTEN_* values against this process's pid
// and returns one name per descriptor passed ("" each when LISTEN_FDNAMES
// is unset); none when LISTEN_FDS is unset or 0.
func parseListenEnv(fds, pid, names string, self int) ([]string, error) {
	if fds == "" {
		if pid != "" || names != "" {
			return nil, errors.New("socket activation: LISTEN_PID or LISTEN_FDNAMES is set without LISTEN_FDS")
		}
		return nil, nil
	}
	n, err := strconv.Atoi(fds)
	if err != nil || n < 0 || n > maxListenFDs {
		return nil, fmt.Errorf("socket activation: LISTEN_FDS=%q is not a count of descriptors (0 to %d)", fds, maxListenFDs)
	}
	if pid == "" {
		return nil, errors.New("socket activation: LISTEN_FDS is set without LISTEN_PID")
	}
	p, err := strconv.Atoi(pid)
	if err != nil || p <= 0 {
		return nil, fmt.Errorf("socket activation: LISTEN_PID=%q is not a process id", pid)
	}
	if p != self {
		return nil, fmt.Errorf("socket activation: LISTEN_PID=%d is not this process (pid %d): the sockets were passed to another process; unset LISTEN_FDS, LISTEN_PID and LISTEN_FDNAMES", p, self)
	}
	if n == 0 {
		if names != "" {
			return nil, fmt.Errorf("socket activation: LISTEN_FDNAMES=%q names descriptors but LISTEN_FDS is 0", names)
		}
		return nil, nil
	}
	out := make([]string, n)
	if names == "" {
		return out, nil
	}
	list := strings.Split(names, ":")
	if len(list) != n {
		return nil, fmt.Errorf("socket activation: LISTEN_FDNAMES=%q names %d descriptors, LISTEN_FDS passes %d", names, len(list), n)
	}
	for i, name := range list {
		if err := checkFDName(name); err != nil {
			return nil, fmt.Errorf("socket activation: LISTEN_FDNAMES entry %d (fd %d): %w", i+1, listenFDsStart+i, err)
		}
	}
	copy(out, list)
	return out, nil
}

// checkFDName applies systemd's rule for descriptor names: 1 to 255
// printable ASCII characters, no colon.
func checkFDName(name string) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("name %q must be 1 to 255 characters", name)
	}
	for _, r := range name {
		if r < 0x21 || r > 0x7e {
			return fmt.Errorf("name %q holds a character that is not printable ASCII", name)
		}
	}
	return nil
}

// inherit checks that fd is a listening Unix stream socket bound to a
// path, and takes it as a listener (the descriptor itself is closed; the
// listener holds a close-on-exec duplicate).
func inherit(fd int, name string) (*Activated, error) {
	desc := fmt.Sprintf("socket activation: fd %d", fd)
	if name != "" {
		desc += fmt.Sprintf(" (%s)", name)
	}
	fail := func(format string, args ...any) (*Activated, error) {
		syscall.Close(fd)
		return nil, fmt.Errorf("%s: %s", desc, fmt.Sprintf(format, args...))
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s: not open: %w", desc, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return fail("not a socket")
	}
	if v, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_DOMAIN); err != nil || v != syscall.AF_UNIX {
		return fail("not a Unix socket (pcpd serves Unix sockets only; --tcp binds TCP itself)")
	}
	if v, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err != nil || v != syscall.SOCK_STREAM {
		return fail("not a stream socket (ListenStream=, not ListenDatagram= or ListenSequentialPacket=)")
	}
	if v, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN); err != nil || v != 1 {
		return fail("not listening (a socket unit with Accept=yes passes connections; pcpd needs Accept=no)")
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return fail("getsockname: %v", err)
	}
	ua, ok := sa.(*syscall.SockaddrUnix)
	if !ok || ua.Name == "" || ua.Name[0] == '@' || !filepath.IsAbs(ua.Name) {
		return fail("not bound to a file path (abstract and unnamed sockets are not served)")
	}
	syscall.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), ua.Name)
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", desc, err)
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("%s: not a Unix listener", desc)
	}
	// The manager owns the file and keeps listening after pcpd exits.
	ul.SetUnlinkOnClose(false)
	return &Activated{FD: fd, Name: name, Path: ua.Name, l: ul}, nil
}

// closeActivated closes the listeners no server took.
func closeActivated(as []*Activated) {
	for _, a := range as {
		if !a.taken {
			a.l.Close()
		}
	}
}

// knownFDName reports whether name is one of the names pcpd matches by.
func knownFDName(name string) bool {
	switch name {
	case FDNameAgent, FDNameControl, FDNameMCP, FDNameScomp:
		return true
	}
	return false
}

// listenUnix gives the listener of one of pcpd's sockets (role is its
// FDName): the activated socket named role or bound to path when there is
// one, else a socket pcpd creates itself with unixsock.Listen. An
// activated socket named role but bound elsewhere, or bound to path but
// named for another role, is an error: pcpd and its clients would not
// agree on where it is.
func (s *Server) listenUnix(role, path string) (*net.UnixListener, error) {
	var found *Activated
	for _, a := range s.cfg.Activated {
		if a.taken {
			continue
		}
		if a.Name == role {
			if filepath.Clean(a.Path) != path {
				return nil, fmt.Errorf("socket activation: fd %d is named %s but bound to %s, not to pcpd's %s socket %s (the socket unit and pcpd's flags disagree)", a.FD, a.Name, a.Path, role, path)
			}
			found = a
			break
		}
		if filepath.Clean(a.Path) == path {
			if knownFDName(a.Name) {
				return nil, fmt.Errorf("socket activation: fd %d is named %s but bound to %s, pcpd's %s socket", a.FD, a.Name, a.Path, role)
			}
			found = a
			break
		}
	}
	if found == nil {
		return unixsock.Listen(path)
	}
	if err := checkActivatedFile(found); err != nil {
		return nil, err
	}
	found.taken = true
	s.log.Info("serving an activated socket", "socket", role, "path", found.Path, "fd", found.FD, "name", found.Name)
	return found.l, nil
}

// checkActivatedFile holds an inherited socket to the rules of pcpd's
// own: a directory that passes unixsock.SecureDir, and a socket file of
// the user's that no one else may connect to (SocketMode=0600,
// DirectoryMode=0700).
func checkActivatedFile(a *Activated) error {
	if err := unixsock.SecureDir(filepath.Dir(a.Path)); err != nil {
		return fmt.Errorf("socket activation: fd %d: %w", a.FD, err)
	}
	fi, err := os.Lstat(a.Path)
	if err != nil {
		return fmt.Errorf("socket activation: fd %d is bound to %s, which is gone: %w", a.FD, a.Path, err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("socket activation: fd %d is bound to %s, which is now a %v, not a socket", a.FD, a.Path, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("socket activation: %s is owned by uid %d, not by this user (uid %d)", a.Path, st.Uid, os.Getuid())
	}
	if m := fi.Mode().Perm(); m&0o022 != 0 {
		return fmt.Errorf("socket activation: %s is mode %#o: other users may connect (SocketMode=0600 in the socket unit)", a.Path, m)
	}
	return nil
}

// checkActivatedTaken refuses activated sockets that match none of
// pcpd's: the unit and the flags disagree, and a client of that socket
// would wait forever.
func (s *Server) checkActivatedTaken() error {
	var left []string
	for _, a := range s.cfg.Activated {
		if !a.taken {
			n := a.Name
			if n == "" {
				n = "unnamed"
			}
			left = append(left, fmt.Sprintf("fd %d (%s, %s)", a.FD, n, a.Path))
		}
	}
	if len(left) == 0 {
		return nil
	}
	return fmt.Errorf("socket activation: %s matches none of pcpd's sockets (agent %s, control %s, mcp %s, scomp %s); name each agent, control, mcp or scomp, or bind it to one of those paths",
		strings.Join(left, ", "), s.cfg.Socket, s.cfg.ControlSocket, s.cfg.MCP.Socket, s.cfg.Scomp.Socket)
}
