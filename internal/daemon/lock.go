package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFileName is the file in the state directory that the running
// daemon holds an exclusive flock on, with its pid inside.
const lockFileName = "pcpd.lock"

// lockStateDir takes the state directory for this process: two daemons
// on one store would interleave audit sequence numbers and run actions
// whose entries cannot be written. The lock goes with the process (the
// kernel drops it on exit, however the process ends), so a stale file
// never blocks a start. The file itself is never removed: removing it
// would let a third daemon lock a new file while the second still holds
// the old one.
func lockStateDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "unknown pid"
			if b, rerr := os.ReadFile(path); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
					holder = "pid " + strconv.Itoa(pid)
				}
			}
			return nil, fmt.Errorf("state directory %s is in use by another pcpd (%s, holding %s)", dir, holder, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// unlockStateDir releases the lock taken by lockStateDir.
func unlockStateDir(f *os.File) {
	if f == nil {
		return
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}
