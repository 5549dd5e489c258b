package unixsock

import (
	"os"
	"syscall"
	"testing"
)

// ParseRights finds the descriptors an SCM_RIGHTS message carries and
// nothing in control data that does not parse.
func TestParseRights(t *testing.T) {
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(pair[0])
	defer syscall.Close(pair[1])
	f, err := os.CreateTemp(t.TempDir(), "fd")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Sendmsg(pair[0], []byte{1}, syscall.UnixRights(int(f.Fd()), int(f.Fd())), nil, 0); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 1), make([]byte, syscall.CmsgSpace(8*4))
	_, oobn, _, _, err := syscall.Recvmsg(pair[1], buf, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	fds := ParseRights(oob[:oobn])
	if len(fds) != 2 {
		t.Fatalf("got %d descriptors, want 2", len(fds))
	}
	for _, fd := range fds {
		var st, want syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Fstat(int(f.Fd()), &want); err != nil {
			t.Fatal(err)
		}
		if st.Ino != want.Ino {
			t.Errorf("descriptor %d is inode %d, want the file's %d", fd, st.Ino, want.Ino)
		}
		syscall.Close(fd)
	}
	for _, bad := range [][]byte{nil, {1, 2, 3}, make([]byte, 64)} {
		if got := ParseRights(bad); len(got) != 0 {
			t.Errorf("ParseRights(%v) = %v, want none", bad, got)
		}
	}
}
