package testkit

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// WaitFile waits until the contents of path satisfy want, and returns
// them: it reads the file again each time inotify reports a change in
// its directory (a file created, written, closed or moved in), never on
// a timer, and fails the test after timeout. Another process (a shell in
// an xterm, say) may write the file.
func WaitFile(t testing.TB, path string, timeout time.Duration, want func(string) bool) string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	defer unix.Close(fd)
	// Watching before the first read: no change between the read and the
	// wait goes unseen.
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(path), unix.IN_CREATE|unix.IN_MODIFY|unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO); err != nil {
		t.Fatalf("inotify on %s: %v", filepath.Dir(path), err)
	}
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 64<<10)
	for {
		b, err := os.ReadFile(path)
		if err == nil && want(string(b)) {
			return string(b)
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%s: got %q (%v) after %v", path, b, err, timeout)
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, int(left/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatalf("waiting on inotify: %v", err)
		}
		// Drain what was reported; the file is read again either way.
		for {
			if _, err := unix.Read(fd, buf); err != nil {
				break
			}
		}
	}
}
