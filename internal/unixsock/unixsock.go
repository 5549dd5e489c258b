// Package unixsock creates the daemon's Unix sockets safely and reads the
// credentials of the processes at either end of them.
package unixsock

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// SecureDir makes sure dir is a directory that only this process's user
// can enter: it is created 0700 when missing (with its parents), and an
// existing one must be a real directory (not a symlink) owned by the
// process's uid with no group or other permissions. A directory that
// fails is refused, never chmod-ed: another user who created it could
// swap what is inside.
func SecureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating socket directory %s: %w", dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("socket directory %s is not a directory (%v)", dir, st.Mode().Type())
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("socket directory %s: cannot read its owner", dir)
	}
	if self := os.Getuid(); int(sys.Uid) != self {
		return fmt.Errorf("socket directory %s is owned by uid %d, not by this user (uid %d); refusing to use it", dir, sys.Uid, self)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("socket directory %s is open to other users (mode %v); refusing to use it (chmod 700 it if it is yours)", dir, perm)
	}
	return nil
}

// Listen creates a Unix socket at path safely: its directory must pass
// SecureDir; a live daemon on the path is an error; a stale socket file
// is removed.
func Listen(path string) (*net.UnixListener, error) {
	if err := SecureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(path); err == nil {
		d := net.Dialer{Timeout: time.Second}
		if c, err := d.DialContext(context.Background(), "unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("another daemon is serving %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// PeerCred reads SO_PEERCRED of a Unix connection: on an accepted one the
// client's credentials, on a dialled one the server's (those of the
// process that listened).
func PeerCred(c *net.UnixConn) (uid, pid int, err error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, -1, err
	}
	var cred *syscall.Ucred
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return -1, -1, err
	}
	return int(cred.Uid), int(cred.Pid), nil
}

// AllowPeer is the connection policy: only the daemon's own user.
func AllowPeer(peerUID, selfUID int) bool { return peerUID == selfUID }
