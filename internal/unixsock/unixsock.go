// Package unixsock creates the daemon's Unix sockets safely and reads the
// credentials of the processes that connect to them.
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

// Listen creates a Unix socket at path safely: its directory is made
// 0700 if missing and refused if others can enter it; a live daemon on the
// path is an error; a stale socket file is removed.
func Listen(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating socket directory %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("socket directory %s is open to other users (%v) and cannot be tightened: %w", dir, st.Mode().Perm(), err)
		}
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

// PeerCred reads SO_PEERCRED of an accepted Unix connection.
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
