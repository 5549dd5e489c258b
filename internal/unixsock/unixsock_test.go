package unixsock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenRefusesUnsafeDirectory(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	if _, err := Listen(filepath.Join(open, "pcp.sock")); err == nil || !strings.Contains(err.Error(), "open to other users") {
		t.Errorf("listening in a 0777 directory: %v, want a refusal", err)
	}
	if st, _ := os.Stat(open); st.Mode().Perm() != 0o777 {
		t.Errorf("the refused directory was changed to %v; it must be left alone", st.Mode().Perm())
	}
	link := filepath.Join(base, "link")
	os.Symlink(t.TempDir(), link)
	if _, err := Listen(filepath.Join(link, "pcp.sock")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("listening through a symlinked directory: %v, want a refusal", err)
	}
	if os.Getuid() == 0 {
		other := filepath.Join(base, "other")
		os.Mkdir(other, 0o700)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Listen(filepath.Join(other, "pcp.sock")); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("listening in another user's directory: %v, want a refusal naming its owner", err)
		}
	}
	// A missing directory is created 0700 and used.
	fresh := filepath.Join(base, "fresh", "run")
	l, err := Listen(filepath.Join(fresh, "pcp.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if st, _ := os.Stat(fresh); st.Mode().Perm() != 0o700 {
		t.Errorf("created directory mode %v, want 0700", st.Mode().Perm())
	}
}
